package main

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// abortMultipartAfter cleans up uploads that never completed; their parts are billed as storage
// but never become objects.
const abortMultipartAfter = 7 * 24 // hours

// failedRunsLogical names the queue that holds the scheduled functions' failed runs: their
// asynchronous invocations' dead letters, from Lambda and from EventBridge Scheduler.
const failedRunsLogical = "failed-runs"

// failedRunsRetention keeps a failed run's record as long as SQS allows, for whoever answers the
// alarm.
const failedRunsRetention = 14 * 24 * time.Hour

// StorageProps configures the stateful resources.
type StorageProps struct {
	Config      Config
	Definitions Definitions
	// Accepted collects the template judges' findings this app accepts, with their reasons.
	Accepted *accepted
}

// Storage holds every table, queue and bucket, by logical name. These are the resources whose
// loss loses money or evidence, so outside the dev stage they survive the stack's deletion.
type Storage struct {
	Tables map[string]awsdynamodb.Table
	// Queues holds every queue and every dead-letter queue (by resources.Queue.DLQLogical).
	Queues  map[string]awssqs.Queue
	Buckets map[string]awss3.Bucket
	// FailedRuns is the dead-letter queue of every asynchronous invocation (the schedules):
	// a failed run leaves a message here, and its depth alarm fires.
	FailedRuns awssqs.Queue
}

// NewStorage creates the tables, queues and buckets the definitions list.
func NewStorage(scope constructs.Construct, id string, props *StorageProps) *Storage {
	this := constructs.NewConstruct(scope, jsii.String(id))
	s := &Storage{
		Tables:  map[string]awsdynamodb.Table{},
		Queues:  map[string]awssqs.Queue{},
		Buckets: map[string]awss3.Bucket{},
	}
	cfg, accepted := props.Config, props.Accepted
	for _, t := range props.Definitions.Tables {
		table := newTable(this, cfg, t)
		accepted.accept(table, "CKV_AWS_119", reasonDynamoManagedKey)
		s.Tables[t.Logical] = table
	}
	for _, q := range props.Definitions.Queues {
		queue, dlq := newQueue(this, cfg, q)
		accepted.accept(queue, "CKV_AWS_27", reasonSQSManagedSSE)
		accepted.accept(dlq, "CKV_AWS_27", reasonSQSManagedSSE)
		accepted.accept(dlq, "ES6000", reasonDLQOfDLQ)
		s.Queues[q.Logical] = queue
		s.Queues[q.DLQLogical()] = dlq
	}
	for _, b := range props.Definitions.Buckets {
		bucket := newBucket(this, cfg, b)
		accepted.accept(bucket, "CKV_AWS_18", reasonArchiveAccessLogs)
		s.Buckets[b.Logical] = bucket
	}
	s.FailedRuns = awssqs.NewQueue(this, jsii.String(pascal(failedRunsLogical)+"Queue"), &awssqs.QueueProps{
		QueueName:       jsii.String(resources.PhysicalName(cfg.Prefix(), failedRunsLogical)),
		RetentionPeriod: seconds(failedRunsRetention),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RemovalPolicy:   removalPolicy(cfg),
	})
	accepted.accept(s.FailedRuns, "CKV_AWS_27", reasonSQSManagedSSE)
	accepted.accept(s.FailedRuns, "ES6000", reasonDLQOfDLQ)
	return s
}

// Names returns every resource's physical name (queue URL for queues); each function receives
// the part its entry grants (resources.FunctionEnv).
func (s *Storage) Names() resources.Names {
	n := resources.Names{Tables: map[string]string{}, Queues: map[string]string{}, Buckets: map[string]string{}}
	for logical, t := range s.Tables {
		n.Tables[logical] = *t.TableName()
	}
	for logical, q := range s.Queues {
		n.Queues[logical] = *q.QueueUrl()
	}
	for logical, b := range s.Buckets {
		n.Buckets[logical] = *b.BucketName()
	}
	return n
}

// removalPolicy keeps data when the stack is deleted, except in the disposable dev stage.
func removalPolicy(cfg Config) awscdk.RemovalPolicy {
	if cfg.Disposable() {
		return awscdk.RemovalPolicy_DESTROY
	}
	return awscdk.RemovalPolicy_RETAIN
}

func newTable(scope constructs.Construct, cfg Config, t resources.Table) awsdynamodb.Table {
	props := &awsdynamodb.TableProps{
		TableName:    jsii.String(resources.PhysicalName(cfg.Prefix(), t.Logical)),
		PartitionKey: attribute(t.PartitionKey),
		SortKey:      optionalAttribute(t.SortKey),
		// On demand: an idle table costs nothing but its storage.
		BillingMode: awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		// The AWS managed key: no monthly key fee, and every use of it shows in CloudTrail.
		Encryption:         awsdynamodb.TableEncryption_AWS_MANAGED,
		DeletionProtection: jsii.Bool(!cfg.Disposable()),
		RemovalPolicy:      removalPolicy(cfg),
	}
	if t.TTLAttribute != "" {
		props.TimeToLiveAttribute = jsii.String(t.TTLAttribute)
	}
	table := awsdynamodb.NewTable(scope, jsii.String(pascal(t.Logical)+"Table"), props)
	for _, ix := range t.Indexes {
		projection := awsdynamodb.ProjectionType_KEYS_ONLY
		if ix.ProjectAll {
			projection = awsdynamodb.ProjectionType_ALL
		}
		table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:      jsii.String(ix.Name),
			PartitionKey:   attribute(ix.PartitionKey),
			SortKey:        optionalAttribute(ix.SortKey),
			ProjectionType: projection,
		})
	}
	return table
}

func attribute(a resources.Attribute) *awsdynamodb.Attribute {
	kind := awsdynamodb.AttributeType_STRING
	if a.Type == resources.Number {
		kind = awsdynamodb.AttributeType_NUMBER
	}
	return &awsdynamodb.Attribute{Name: jsii.String(a.Name), Type: kind}
}

func optionalAttribute(a *resources.Attribute) *awsdynamodb.Attribute {
	if a == nil {
		return nil
	}
	return attribute(*a)
}

// newQueue creates a queue and its dead-letter queue. Both hold accepted events that are not yet
// billed, so they are retained like the tables.
func newQueue(scope constructs.Construct, cfg Config, q resources.Queue) (queue, dlq awssqs.Queue) {
	dlq = awssqs.NewQueue(scope, jsii.String(pascal(q.DLQLogical())+"Queue"), &awssqs.QueueProps{
		QueueName:       jsii.String(resources.PhysicalName(cfg.Prefix(), q.DLQLogical())),
		RetentionPeriod: seconds(q.DLQRetention),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RemovalPolicy:   removalPolicy(cfg),
	})
	queue = awssqs.NewQueue(scope, jsii.String(pascal(q.Logical)+"Queue"), &awssqs.QueueProps{
		QueueName:         jsii.String(resources.PhysicalName(cfg.Prefix(), q.Logical)),
		VisibilityTimeout: seconds(q.VisibilityTimeout),
		RetentionPeriod:   seconds(q.Retention),
		DeadLetterQueue: &awssqs.DeadLetterQueue{
			Queue:           dlq,
			MaxReceiveCount: jsii.Number(q.MaxReceiveCount),
		},
		Encryption:    awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:    jsii.Bool(true),
		RemovalPolicy: removalPolicy(cfg),
	})
	return queue, dlq
}

// newBucket creates a private, TLS-only, encrypted bucket whose objects move to cheaper storage
// as they age. Nothing expires unless the configuration says so: the archive is the copy the
// analytics rows are rebuilt from. The bucket is versioned in every stage, so an overwrite or a
// delete can be undone (dev is where a bug first overwrites the archive); old versions expire
// after ArchiveNoncurrentDays.
//
// The bucket's name is left to CloudFormation: bucket names are global across accounts, and the
// functions learn it from their environment.
func newBucket(scope constructs.Construct, cfg Config, b resources.Bucket) awss3.Bucket {
	rule := &awss3.LifecycleRule{
		Id: jsii.String("age-into-cheaper-storage"),
		Transitions: &[]*awss3.Transition{
			{StorageClass: awss3.StorageClass_INFREQUENT_ACCESS(), TransitionAfter: days(cfg.ArchiveIADays)},
			// Glacier Instant Retrieval keeps objects readable in milliseconds (Athena included).
			{StorageClass: awss3.StorageClass_GLACIER_INSTANT_RETRIEVAL(), TransitionAfter: days(cfg.ArchiveGlacierDays)},
		},
		AbortIncompleteMultipartUploadAfter: awscdk.Duration_Hours(jsii.Number(abortMultipartAfter)),
	}
	if cfg.ArchiveExpireDays > 0 {
		rule.Expiration = days(cfg.ArchiveExpireDays)
	}
	rule.NoncurrentVersionExpiration = days(cfg.ArchiveNoncurrentDays)
	return awss3.NewBucket(scope, jsii.String(pascal(b.Logical)+"Bucket"), &awss3.BucketProps{
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		EnforceSSL:        jsii.Bool(true),
		MinimumTLSVersion: jsii.Number(1.2),
		Versioned:         jsii.Bool(true),
		// Objects under 128 KB stay in STANDARD: per-object transition fees and the minimum
		// billable size of the colder classes would make moving them cost more than it saves.
		TransitionDefaultMinimumObjectSize: awss3.TransitionDefaultMinimumObjectSize_ALL_STORAGE_CLASSES_128_K,
		LifecycleRules:                     &[]*awss3.LifecycleRule{rule},
		RemovalPolicy:                      removalPolicy(cfg),
	})
}
