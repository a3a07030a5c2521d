package main

import (
	"sort"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsscheduler"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsschedulertargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// maxScheduleEventAge bounds how late a scheduled invocation may run; EventBridge Scheduler
// accepts 1 minute to 24 hours.
const (
	minScheduleEventAge = time.Minute
	maxScheduleEventAge = 24 * time.Hour
)

// IAM actions per access level: resources' lists, which the test harness's IAM guard enforces
// on every function's clients too.
var (
	tableReadActions   = resources.TableReadActions
	tableWriteActions  = resources.TableWriteActions
	queueSendActions   = resources.QueueSendActions
	bucketListActions  = resources.BucketListActions
	objectReadActions  = resources.ObjectReadActions
	objectWriteActions = resources.ObjectWriteActions
)

// FunctionsProps configures the Lambda functions.
type FunctionsProps struct {
	Config      Config
	Definitions Definitions
	Storage     *Storage
	// Secrets are the secrets this deployment provides, by the environment variable that carries
	// each one's ARN (stackSecrets). A function gets, and may read, those its definition lists;
	// one it lists that the deployment does not provide (the Kinde client secret with plan
	// limits) it does not get.
	Secrets map[string]awssecretsmanager.ISecret
	// SourceRoot is the module root; SourceDigest is sourceDigest(SourceRoot).
	SourceRoot   string
	SourceDigest string
	// Accepted collects the template judges' findings this app accepts, with their reasons.
	Accepted *accepted
}

// Functions holds every Lambda function by name.
type Functions struct {
	ByName map[string]awslambda.Function
}

// NewFunctions creates each function with its own role, granted exactly the access its
// definition lists, its own log group, its queue event sources and its schedule.
// A function that does not build is an error naming it, with the compiler's output.
func NewFunctions(scope constructs.Construct, id string, props *FunctionsProps) (*Functions, error) {
	this := constructs.NewConstruct(scope, jsii.String(id))
	fns := &Functions{ByName: map[string]awslambda.Function{}}
	names := props.Storage.Names()
	for _, def := range props.Definitions.Functions {
		fn, err := newFunction(this, props, def, names)
		if err != nil {
			return nil, err
		}
		fns.ByName[def.Name] = fn
	}
	return fns, nil
}

// envSettings are the deployment's settings that reach functions as environment variables.
func envSettings(cfg Config, secrets map[string]awssecretsmanager.ISecret) resources.EnvSettings {
	s := resources.EnvSettings{
		LogLevel: cfg.LogLevel, Plans: cfg.Plans, LimitsSource: cfg.LimitsSource, ReportToKinde: cfg.ReportToKinde,
		Secrets: map[string]string{},
	}
	if cfg.KindeClient() {
		s.KindeDomain, s.KindeClientID = cfg.KindeDomain, cfg.KindeClientID
	}
	s.Settings = cfg.Settings()
	for name, secret := range secrets {
		s.Secrets[name] = *secret.SecretArn()
	}
	return s
}

func newFunction(scope constructs.Construct, props *FunctionsProps, def resources.Function, names resources.Names) (awslambda.Function, error) {
	cfg := props.Config
	id := pascal(def.Name)
	// The environment is resources.FunctionEnv's, which the Lambda emulator check also starts
	// every function with.
	env := map[string]*string{}
	settings := envSettings(cfg, props.Secrets)
	for k, v := range resources.FunctionEnv(def, names, settings) {
		env[k] = jsii.String(v)
	}
	// Secrets in definition order, so the policy reads the same on every synthesis; each one the
	// function lists and needs in this deployment.
	var secrets []awssecretsmanager.ISecret
	for _, name := range def.Secrets {
		if secret, ok := props.Secrets[name]; ok && resources.NeedsSecret(def, name, settings) {
			secrets = append(secrets, secret)
		}
	}

	logs := awslogs.NewLogGroup(scope, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
		Retention:     retentionDays[cfg.LogRetentionDays],
		RemovalPolicy: removalPolicy(cfg),
	})
	props.Accepted.accept(logs, "CKV_AWS_158", reasonLogsServiceKey)
	// A role of its own with no managed policy: AWSLambdaBasicExecutionRole would allow writing
	// to every log group in the account.
	role := awsiam.NewRole(scope, jsii.String(id+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("Ferry " + cfg.Stage + " " + def.Name + " function"),
	})
	logs.GrantWrite(role)
	grantAccess(role, props, def)
	for _, secret := range secrets {
		// GetSecretValue and DescribeSecret on this secret alone.
		secret.GrantRead(role, nil)
	}

	code, bundler := goFunctionCode(props.SourceRoot, props.SourceDigest, def.Name)
	fnProps := &awslambda.FunctionProps{
		FunctionName: jsii.String(resources.PhysicalName(cfg.Prefix(), def.Name)),
		Description:  jsii.String(def.Purpose),
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         code,
		Timeout:      seconds(def.Timeout),
		MemorySize:   jsii.Number(def.MemoryMB),
		Environment:  &env,
		Role:         role,
		LogGroup:     logs,
	}
	if def.ReservedConcurrency > 0 {
		fnProps.ReservedConcurrentExecutions = jsii.Number(def.ReservedConcurrency)
	}
	if def.Every > 0 {
		// The next scheduled run is the retry; Lambda's own async retries would only overlap it.
		// A run that fails (or is too old to run) leaves a message in the failed-runs queue,
		// whose depth alarm fires.
		fnProps.RetryAttempts = jsii.Number(0)
		fnProps.DeadLetterQueue = props.Storage.FailedRuns
	}
	fn, err := newLambda(scope, id+"Function", fnProps, bundler)
	if err != nil {
		return nil, err
	}
	acceptFunctionFindings(props.Accepted, fn, def)

	for _, q := range props.Definitions.Queues {
		if !def.Queues[q.Logical].Consumes() {
			continue
		}
		// The event source grants what it needs on this queue only: receive, delete, change
		// visibility and read the queue's attributes.
		source := awslambdaeventsources.NewSqsEventSource(props.Storage.Queues[q.Logical], &awslambdaeventsources.SqsEventSourceProps{
			BatchSize:               jsii.Number(resources.EventSourceBatchSize),
			MaxBatchingWindow:       awscdk.Duration_Seconds(jsii.Number(resources.EventSourceBatchingWindow.Seconds())),
			ReportBatchItemFailures: jsii.Bool(true),
			MaxConcurrency:          jsii.Number(cfg.ConsumerMaxConcurrency),
		})
		fn.AddEventSource(source)
	}
	for _, mapping := range childResources(fn, "AWS::Lambda::EventSourceMapping") {
		props.Accepted.accept(mapping, "ES1001", reasonSQSSourceNoDestination)
	}
	if def.Every > 0 {
		newSchedule(scope, id, fn, def, props.Storage.FailedRuns)
	}
	return fn, nil
}

// childResources returns the CloudFormation resources of one type directly under c's children
// (an event source mapping is the default child of a child of its function).
func childResources(c constructs.IConstruct, typ string) []awscdk.CfnResource {
	var out []awscdk.CfnResource
	for _, child := range *c.Node().Children() {
		if res, ok := child.Node().DefaultChild().(awscdk.CfnResource); ok && *res.CfnResourceType() == typ {
			out = append(out, res)
		}
	}
	return out
}

// acceptFunctionFindings records the judges' findings a function is accepted with. What differs
// by function is how it is invoked: a scheduled function is invoked asynchronously and gets a
// dead-letter queue (no finding); an SQS consumer is bounded by its event source's maximum
// concurrency; an HTTP function by the API stage's throttle.
func acceptFunctionFindings(a *accepted, fn awslambda.Function, def resources.Function) {
	a.accept(fn, "CKV_AWS_117", reasonNoVPC)
	a.accept(fn, "CKV_AWS_173", reasonEnvNotSecret)
	a.accept(fn, "WS1000", reasonNoXRay)
	a.accept(fn, "WS1004", reasonLoggingConfig)
	a.accept(fn, "W3005", reasonCDKDependsOn)
	consumes := false
	for _, access := range def.Queues {
		consumes = consumes || access.Consumes()
	}
	switch {
	case def.Every > 0:
		if def.ReservedConcurrency == 0 {
			a.accept(fn, "CKV_AWS_115", reasonNoCapSweep)
		}
	case consumes:
		a.accept(fn, "CKV_AWS_116", reasonSyncInvocation)
		if def.ReservedConcurrency == 0 {
			a.accept(fn, "CKV_AWS_115", reasonNoCapConsumer)
		}
	default:
		a.accept(fn, "CKV_AWS_116", reasonSyncInvocation)
		if def.ReservedConcurrency == 0 {
			a.accept(fn, "CKV_AWS_115", reasonNoCapAPI)
		}
	}
}

// newLambda creates the function, turning CDK's refusal of an asset whose build failed into the
// build's own error.
func newLambda(scope constructs.Construct, id string, props *awslambda.FunctionProps, bundler *goBundler) (fn awslambda.Function, err error) {
	defer func() {
		if r := recover(); r != nil {
			if bundler.err == nil {
				panic(r)
			}
			fn, err = nil, bundler.err
		}
	}()
	return awslambda.NewFunction(scope, jsii.String(id), props), nil
}

// newSchedule invokes fn every def.Every through EventBridge Scheduler. An invocation Scheduler
// cannot deliver goes to failedRuns, like a run that fails.
func newSchedule(scope constructs.Construct, id string, fn awslambda.IFunction, def resources.Function, failedRuns awssqs.IQueue) {
	maxAge := min(max(def.Every, minScheduleEventAge), maxScheduleEventAge)
	awsscheduler.NewSchedule(scope, jsii.String(id+"Schedule"), &awsscheduler.ScheduleProps{
		Description: jsii.String("Runs " + def.Name + " every " + def.Every.String()),
		Schedule:    awsscheduler.ScheduleExpression_Rate(awscdk.Duration_Minutes(jsii.Number(def.Every.Minutes()))),
		Target: awsschedulertargets.NewLambdaInvoke(fn, &awsschedulertargets.ScheduleTargetBaseProps{
			MaxEventAge:     seconds(maxAge),
			RetryAttempts:   jsii.Number(0),
			DeadLetterQueue: failedRuns,
		}),
	})
}

// grantAccess adds one statement per resource and access level the definition lists, naming
// the resource (and, for tables, each of its indexes) so no statement reaches further. Resources
// are visited in definition order so the policy reads the same on every synthesis.
func grantAccess(role awsiam.IRole, props *FunctionsProps, def resources.Function) {
	allow := func(sid string, actions []string, arns ...string) {
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String(sid),
			Effect:    awsiam.Effect_ALLOW,
			Actions:   jsii.Strings(actions...),
			Resources: jsii.Strings(arns...),
		}))
	}
	for _, t := range props.Definitions.Tables {
		access, ok := def.Tables[t.Logical]
		if !ok {
			continue
		}
		table := props.Storage.Tables[t.Logical]
		arns := []string{*table.TableArn()}
		for _, ix := range sortedIndexNames(t) {
			arns = append(arns, *table.TableArn()+"/index/"+ix)
		}
		sid := "Table" + pascal(t.Logical)
		allow(sid+"Read", tableReadActions, arns...)
		if access == resources.ReadWrite {
			allow(sid+"Write", tableWriteActions, *table.TableArn())
		}
	}
	for _, q := range props.Definitions.Queues {
		if def.Queues[q.Logical].Sends() {
			allow("Queue"+pascal(q.Logical)+"Send", queueSendActions, *props.Storage.Queues[q.Logical].QueueArn())
		}
	}
	for _, b := range props.Definitions.Buckets {
		access, ok := def.Buckets[b.Logical]
		if !ok {
			continue
		}
		bucket := props.Storage.Buckets[b.Logical]
		sid := "Bucket" + pascal(b.Logical)
		allow(sid+"List", bucketListActions, *bucket.BucketArn())
		allow(sid+"ReadObjects", objectReadActions, *bucket.ArnForObjects(jsii.String("*")))
		if access == resources.ReadWrite {
			allow(sid+"WriteObjects", objectWriteActions, *bucket.ArnForObjects(jsii.String("*")))
		}
	}
}

func sortedIndexNames(t resources.Table) []string {
	names := make([]string, 0, len(t.Indexes))
	for _, ix := range t.Indexes {
		names = append(names, ix.Name)
	}
	sort.Strings(names)
	return names
}
