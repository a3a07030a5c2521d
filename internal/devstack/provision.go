package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/resources"
)

// tableActiveWait bounds how long provisioning waits for a real DynamoDB table to become ACTIVE.
const tableActiveWait = 2 * time.Minute

// ProvisionOptions adjust the resources for local use.
type ProvisionOptions struct {
	// VisibilityTimeout overrides the queues' visibility timeout (the local stack redelivers a
	// failed message after seconds, not minutes). Zero keeps the definition's value.
	VisibilityTimeout time.Duration
	// Tables, Queues and Buckets replace internal/resources' lists when set (definitions a test
	// extends with a capability's resources).
	Tables  []resources.Table
	Queues  []resources.Queue
	Buckets []resources.Bucket
}

// Provision creates every table, bucket and queue of internal/resources (or of opts) under prefix
// and returns their physical names. Bucket names are lower-cased, as S3 requires.
func Provision(ctx context.Context, c cloud.Clients, prefix string, opts ProvisionOptions) (resources.Names, error) {
	tables, queues, buckets := resources.Tables, resources.Queues, resources.Buckets
	if opts.Tables != nil {
		tables = opts.Tables
	}
	if opts.Queues != nil {
		queues = opts.Queues
	}
	if opts.Buckets != nil {
		buckets = opts.Buckets
	}
	names := resources.Names{Tables: map[string]string{}, Queues: map[string]string{}, Buckets: map[string]string{}}
	for _, t := range tables {
		name := resources.PhysicalName(prefix, t.Logical)
		if err := createTable(ctx, c.DynamoDB, name, t); err != nil {
			return names, err
		}
		names.Tables[t.Logical] = name
	}
	for _, t := range tables {
		if err := waitActive(ctx, c.DynamoDB, names.Tables[t.Logical]); err != nil {
			return names, err
		}
		if t.TTLAttribute == "" {
			continue
		}
		_, err := c.DynamoDB.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName: aws.String(names.Tables[t.Logical]),
			TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{
				AttributeName: aws.String(t.TTLAttribute), Enabled: aws.Bool(true),
			},
		})
		if err != nil {
			return names, fmt.Errorf("enable TTL on %s: %w", names.Tables[t.Logical], err)
		}
	}
	for _, b := range buckets {
		name := resources.PhysicalName(prefix, b.Logical)
		if _, err := c.S3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
			return names, fmt.Errorf("create bucket %s: %w", name, err)
		}
		names.Buckets[b.Logical] = name
	}
	for _, q := range queues {
		dlqURL, err := createQueue(ctx, c.SQS, resources.PhysicalName(prefix, q.DLQLogical()), map[string]string{
			"MessageRetentionPeriod": seconds(q.DLQRetention),
		})
		if err != nil {
			return names, err
		}
		names.Queues[q.DLQLogical()] = dlqURL
		attrs, err := c.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(dlqURL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
		})
		if err != nil {
			return names, fmt.Errorf("read DLQ ARN: %w", err)
		}
		redrive, _ := json.Marshal(map[string]any{
			"deadLetterTargetArn": attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)],
			"maxReceiveCount":     q.MaxReceiveCount,
		})
		visibility := q.VisibilityTimeout
		if opts.VisibilityTimeout > 0 {
			visibility = opts.VisibilityTimeout
		}
		url, err := createQueue(ctx, c.SQS, resources.PhysicalName(prefix, q.Logical), map[string]string{
			"VisibilityTimeout":      seconds(visibility),
			"MessageRetentionPeriod": seconds(q.Retention),
			"RedrivePolicy":          string(redrive),
		})
		if err != nil {
			return names, err
		}
		names.Queues[q.Logical] = url
	}
	return names, nil
}

func seconds(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }

func createTable(ctx context.Context, db *dynamodb.Client, name string, t resources.Table) error {
	attrs := map[string]ddbtypes.ScalarAttributeType{}
	keySchema := func(pk resources.Attribute, sk *resources.Attribute) []ddbtypes.KeySchemaElement {
		attrs[pk.Name] = ddbtypes.ScalarAttributeType(pk.Type)
		ks := []ddbtypes.KeySchemaElement{{AttributeName: aws.String(pk.Name), KeyType: ddbtypes.KeyTypeHash}}
		if sk != nil {
			attrs[sk.Name] = ddbtypes.ScalarAttributeType(sk.Type)
			ks = append(ks, ddbtypes.KeySchemaElement{AttributeName: aws.String(sk.Name), KeyType: ddbtypes.KeyTypeRange})
		}
		return ks
	}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: ddbtypes.BillingModePayPerRequest,
		KeySchema:   keySchema(t.PartitionKey, t.SortKey),
	}
	for _, ix := range t.Indexes {
		projection := &ddbtypes.Projection{ProjectionType: ddbtypes.ProjectionTypeKeysOnly}
		if ix.ProjectAll {
			projection.ProjectionType = ddbtypes.ProjectionTypeAll
		}
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, ddbtypes.GlobalSecondaryIndex{
			IndexName:  aws.String(ix.Name),
			KeySchema:  keySchema(ix.PartitionKey, ix.SortKey),
			Projection: projection,
		})
	}
	for n, typ := range attrs {
		in.AttributeDefinitions = append(in.AttributeDefinitions, ddbtypes.AttributeDefinition{
			AttributeName: aws.String(n), AttributeType: typ,
		})
	}
	if _, err := db.CreateTable(ctx, in); err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	return nil
}

// waitActive polls until a table is ACTIVE. minidyn leaves TableStatus empty, which counts as
// ready; the SDK's waiters cannot be used against it.
func waitActive(ctx context.Context, db *dynamodb.Client, name string) error {
	deadline := time.Now().Add(tableActiveWait)
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("describe table %s: %w", name, err)
		}
		status := out.Table.TableStatus
		if status == "" || status == ddbtypes.TableStatusActive {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("table %s still %s after %s", name, status, tableActiveWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func createQueue(ctx context.Context, q *sqs.Client, name string, attrs map[string]string) (string, error) {
	out, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", fmt.Errorf("create queue %s: %w", name, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// Teardown deletes what Provision created. It keeps going past errors and returns them joined.
func Teardown(ctx context.Context, c cloud.Clients, names resources.Names) error {
	var errs []error
	for _, name := range names.Tables {
		if _, err := c.DynamoDB.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
			errs = append(errs, err)
		}
	}
	for _, url := range names.Queues {
		if _, err := c.SQS.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
			errs = append(errs, err)
		}
	}
	for _, bucket := range names.Buckets {
		if err := emptyBucket(ctx, c.S3, bucket); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := c.S3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func emptyBucket(ctx context.Context, c *s3.Client, bucket string) error {
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, obj := range page.Contents {
			if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: obj.Key}); err != nil {
				return err
			}
		}
	}
	return nil
}
