package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// tableActiveWait bounds how long provisioning waits for a real DynamoDB table to become ACTIVE.
const tableActiveWait = 2 * time.Minute

// ProvisionOptions adjust the resources for local use.
type ProvisionOptions struct {
	// VisibilityTimeout overrides the queues' visibility timeout (the local stack redelivers a
	// failed message after seconds, not minutes). Zero keeps the definition's value.
	VisibilityTimeout time.Duration
	// Tables, Queues and Buckets replace internal/platform/resources' lists when set (definitions a test
	// extends with a capability's resources).
	Tables  []resources.Table
	Queues  []resources.Queue
	Buckets []resources.Bucket
}

// Provision makes every table, bucket and queue of internal/platform/resources (or of opts) exist under
// prefix and returns their physical names. Bucket names are lower-cased, as S3 requires.
//
// What is already there under prefix is reused, so a stack on external endpoints can be stopped
// — or killed — and started again with its state: each existing resource is checked against its
// definition (a table's key schema and attribute types, its indexes and their projections, its
// TTL attribute; a queue's visibility timeout, retention and redrive policy), and one that
// differs is an error that names the resource and the difference, never silently used. What is
// missing is created, which also finishes a provisioning that was itself killed half way (a
// table whose TTL was not yet enabled gets it).
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
		if err := ensureTable(ctx, c.DynamoDB, name, t); err != nil {
			return names, err
		}
		names.Tables[t.Logical] = name
	}
	for _, t := range tables {
		if err := waitActive(ctx, c.DynamoDB, names.Tables[t.Logical]); err != nil {
			return names, err
		}
		if err := ensureTTL(ctx, c.DynamoDB, names.Tables[t.Logical], t.TTLAttribute); err != nil {
			return names, err
		}
	}
	for _, b := range buckets {
		name := resources.PhysicalName(prefix, b.Logical)
		if err := ensureBucket(ctx, c.S3, name); err != nil {
			return names, err
		}
		names.Buckets[b.Logical] = name
	}
	for _, q := range queues {
		dlqURL, err := ensureQueue(ctx, c.SQS, resources.PhysicalName(prefix, q.DLQLogical()), map[string]string{
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
		url, err := ensureQueue(ctx, c.SQS, resources.PhysicalName(prefix, q.Logical), map[string]string{
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

// MismatchError is an existing resource that differs from its definition: it is not used.
type MismatchError struct {
	// Resource is the physical name ("ferry-dev-ledger").
	Resource string
	// Differences say what differs, definition against what the endpoint reports.
	Differences []string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s already exists but does not match its definition in internal/platform/resources: %s; "+
		"delete it, or start the stack with another --prefix", e.Resource, strings.Join(e.Differences, "; "))
}

func seconds(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }

// ensureTable creates the table, or checks the one already there against t.
func ensureTable(ctx context.Context, db *dynamodb.Client, name string, t resources.Table) error {
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	var missing *ddbtypes.ResourceNotFoundException
	switch {
	case errors.As(err, &missing):
		err = createTable(ctx, db, name, t)
		var exists *ddbtypes.ResourceInUseException
		if !errors.As(err, &exists) {
			return err
		}
		// Made meanwhile: by another provisioning of the same prefix, or by this CreateTable
		// itself, when the SDK retried a request whose answer it lost after the endpoint acted
		// on it. Either way the table is checked like any that was there.
		out, err = db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("describe table %s: %w", name, err)
		}
	case err != nil:
		return fmt.Errorf("describe table %s: %w", name, err)
	}
	if diffs := tableDifferences(out.Table, t); len(diffs) > 0 {
		return &MismatchError{Resource: name, Differences: diffs}
	}
	return nil
}

// tableDifferences compares a described table with its definition: the key schema, each key
// attribute's type, and each index's name, keys and projection — as far as the endpoint reports
// them (minidyn reports no attribute definitions, so there the types are not compared).
func tableDifferences(got *ddbtypes.TableDescription, t resources.Table) []string {
	types := map[string]string{}
	for _, a := range got.AttributeDefinitions {
		types[aws.ToString(a.AttributeName)] = string(a.AttributeType)
	}
	typed := len(types) > 0
	attr := func(name, typ string) string {
		if !typed {
			return name
		}
		return fmt.Sprintf("%s (%s)", name, typ)
	}
	keys := func(ks []ddbtypes.KeySchemaElement) string {
		var parts []string
		for _, k := range ks {
			parts = append(parts, fmt.Sprintf("%s %s", k.KeyType, attr(aws.ToString(k.AttributeName), types[aws.ToString(k.AttributeName)])))
		}
		return strings.Join(parts, ", ")
	}
	want := func(pk resources.Attribute, sk *resources.Attribute) string {
		s := "HASH " + attr(pk.Name, string(pk.Type))
		if sk != nil {
			s += ", RANGE " + attr(sk.Name, string(sk.Type))
		}
		return s
	}
	var diffs []string
	if g, w := keys(got.KeySchema), want(t.PartitionKey, t.SortKey); g != w {
		diffs = append(diffs, fmt.Sprintf("key schema is %s, want %s", g, w))
	}
	indexes := map[string]ddbtypes.GlobalSecondaryIndexDescription{}
	for _, ix := range got.GlobalSecondaryIndexes {
		indexes[aws.ToString(ix.IndexName)] = ix
	}
	for _, ix := range t.Indexes {
		g, ok := indexes[ix.Name]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("index %s is missing", ix.Name))
			continue
		}
		delete(indexes, ix.Name)
		if gk, wk := keys(g.KeySchema), want(ix.PartitionKey, ix.SortKey); gk != wk {
			diffs = append(diffs, fmt.Sprintf("index %s keys are %s, want %s", ix.Name, gk, wk))
		}
		projection := ddbtypes.ProjectionTypeKeysOnly
		if ix.ProjectAll {
			projection = ddbtypes.ProjectionTypeAll
		}
		if g.Projection != nil && g.Projection.ProjectionType != projection {
			diffs = append(diffs, fmt.Sprintf("index %s projects %s, want %s", ix.Name, g.Projection.ProjectionType, projection))
		}
	}
	extra := make([]string, 0, len(indexes))
	for name := range indexes {
		extra = append(extra, name)
	}
	sort.Strings(extra)
	for _, name := range extra {
		diffs = append(diffs, fmt.Sprintf("index %s is not in the definition", name))
	}
	return diffs
}

// ensureTTL enables the table's TTL attribute unless it is already the enabled one; a table
// whose TTL is on another attribute (or on, when the definition has none) is a mismatch.
func ensureTTL(ctx context.Context, db *dynamodb.Client, name, attribute string) error {
	out, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		return fmt.Errorf("describe TTL of %s: %w", name, err)
	}
	var status ddbtypes.TimeToLiveStatus
	var current string
	if d := out.TimeToLiveDescription; d != nil {
		status, current = d.TimeToLiveStatus, aws.ToString(d.AttributeName)
	}
	on := status == ddbtypes.TimeToLiveStatusEnabled || status == ddbtypes.TimeToLiveStatusEnabling
	switch {
	case on && current == attribute:
		return nil
	case on && attribute == "":
		return &MismatchError{Resource: name, Differences: []string{fmt.Sprintf("TTL is on %q, want none", current)}}
	case on:
		return &MismatchError{Resource: name, Differences: []string{fmt.Sprintf("TTL is on %q, want %q", current, attribute)}}
	case attribute == "":
		return nil
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{
			AttributeName: aws.String(attribute), Enabled: aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("enable TTL on %s: %w", name, err)
	}
	return nil
}

// ensureBucket creates the bucket unless it is already there (and this account's).
func ensureBucket(ctx context.Context, c *s3.Client, name string) error {
	_, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(name)})
	if err == nil {
		return nil
	}
	var missing *s3types.NotFound
	var resp *smithyhttp.ResponseError
	if !errors.As(err, &missing) && !(errors.As(err, &resp) && resp.HTTPStatusCode() == http.StatusNotFound) {
		return fmt.Errorf("head bucket %s: %w", name, err)
	}
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	// Already this account's: made meanwhile, or by this request when a retry followed an
	// answer lost after the endpoint acted on it.
	var owned *s3types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	return nil
}

// ensureQueue creates the queue, or checks the one already there has attrs.
func ensureQueue(ctx context.Context, q *sqs.Client, name string, attrs map[string]string) (string, error) {
	got, err := q.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	var missing *sqstypes.QueueDoesNotExist
	switch {
	case errors.As(err, &missing):
		return createQueue(ctx, q, name, attrs)
	case err != nil:
		return "", fmt.Errorf("look up queue %s: %w", name, err)
	}
	url := aws.ToString(got.QueueUrl)
	names := make([]string, 0, len(attrs))
	for k := range attrs {
		names = append(names, k)
	}
	sort.Strings(names)
	out, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		return "", fmt.Errorf("read the attributes of queue %s: %w", name, err)
	}
	var diffs []string
	for _, k := range names {
		if g, w := out.Attributes[k], attrs[k]; !sameAttribute(k, g, w) {
			diffs = append(diffs, fmt.Sprintf("%s is %q, want %q", k, g, w))
		}
	}
	if len(diffs) > 0 {
		return "", &MismatchError{Resource: name, Differences: diffs}
	}
	return url, nil
}

// sameAttribute compares a queue attribute; a redrive policy is JSON, compared as values (SQS
// renders maxReceiveCount as a number or a string).
func sameAttribute(name, got, want string) bool {
	if name != "RedrivePolicy" {
		return got == want
	}
	var g, w struct {
		Target string          `json:"deadLetterTargetArn"`
		Max    json.RawMessage `json:"maxReceiveCount"`
	}
	if json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return g.Target == w.Target && strings.Trim(string(g.Max), `"`) == strings.Trim(string(w.Max), `"`)
}

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

// CreateAnew makes tables and buckets under prefix on endpoints known to hold none of them (an
// emulator just started): it creates each, enables its TTL, and reads nothing first, which is
// what sets it apart from Provision. Tables on an emulator are active as soon as they are made.
func CreateAnew(ctx context.Context, c cloud.Clients, prefix string, tables []resources.Table, buckets []resources.Bucket) (resources.Names, error) {
	names := resources.Names{Tables: map[string]string{}, Queues: map[string]string{}, Buckets: map[string]string{}}
	for _, t := range tables {
		name := resources.PhysicalName(prefix, t.Logical)
		if err := createTable(ctx, c.DynamoDB, name, t); err != nil {
			return names, err
		}
		if t.TTLAttribute != "" {
			if _, err := c.DynamoDB.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
				TableName: aws.String(name),
				TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{
					AttributeName: aws.String(t.TTLAttribute), Enabled: aws.Bool(true),
				},
			}); err != nil {
				return names, fmt.Errorf("enable TTL on %s: %w", name, err)
			}
		}
		names.Tables[t.Logical] = name
	}
	for _, b := range buckets {
		name := resources.PhysicalName(prefix, b.Logical)
		if _, err := c.S3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
			return names, fmt.Errorf("create bucket %s: %w", name, err)
		}
		names.Buckets[b.Logical] = name
	}
	return names, nil
}
