package instrument

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guard refuses, on one function's clients, every call on Ferry's resources that the function's
// IAM role would refuse in AWS: a table, queue or bucket its entry does not grant, or an action
// its access level does not allow (resources' action lists, which the CDK app grants). A refused
// call fails as AWS fails it (AccessDeniedException) and is recorded, so a test harness can fail
// the test that made it. Calls on anything that is not one of Ferry's resources pass: whether
// they succeed is not a question of grants.
type Guard struct {
	fn      resources.Function
	tables  map[string]string // physical name → logical name
	queues  map[string]string // URL → logical name
	buckets map[string]string

	mu      sync.Mutex
	refused []string
}

// NewGuard guards fn's calls on the resources names lists.
func NewGuard(fn resources.Function, names resources.Names) *Guard {
	g := &Guard{fn: fn, tables: map[string]string{}, queues: map[string]string{}, buckets: map[string]string{}}
	for logical, physical := range names.Tables {
		g.tables[physical] = logical
	}
	for logical, url := range names.Queues {
		g.queues[url] = logical
	}
	for logical, physical := range names.Buckets {
		g.buckets[physical] = logical
	}
	return g
}

// Options installs the guard on all three clients.
func (g *Guard) Options() cloud.Options {
	install := func(check func(params any) []access) func(*smithymw.Stack) error {
		return func(stack *smithymw.Stack) error {
			return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.IAMGuard",
				func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
					if err := g.check(middleware.GetOperationName(ctx), check(in.Parameters)); err != nil {
						return smithymw.InitializeOutput{}, smithymw.Metadata{}, err
					}
					return next.HandleInitialize(ctx, in)
				}), smithymw.Before)
		}
	}
	return cloud.Options{
		DynamoDB: []func(*dynamodb.Options){func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, install(dynamoAccess)) }},
		S3:       []func(*s3.Options){func(o *s3.Options) { o.APIOptions = append(o.APIOptions, install(s3Access)) }},
		SQS:      []func(*sqs.Options){func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, install(sqsAccess)) }},
	}
}

// Refused lists the calls the guard refused, in order.
func (g *Guard) Refused() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.refused...)
}

// access is one IAM action a call needs on one resource.
type access struct {
	kind   string // resources.KindTable, KindQueue or KindBucket
	name   string // the physical name or URL
	action string
}

func (g *Guard) check(op string, needs []access) error {
	for _, n := range needs {
		var logical string
		var known, allowed bool
		switch n.kind {
		case resources.KindTable:
			logical, known = g.tables[n.name]
			granted, ok := g.fn.Tables[logical]
			allowed = ok && resources.TableAllows(granted, n.action)
		case resources.KindQueue:
			logical, known = g.queues[n.name]
			granted, ok := g.fn.Queues[logical]
			allowed = ok && resources.QueueAllows(granted, n.action)
		case resources.KindBucket:
			logical, known = g.buckets[n.name]
			granted, ok := g.fn.Buckets[logical]
			allowed = ok && resources.BucketAllows(granted, n.action)
		}
		if !known || allowed {
			continue
		}
		msg := fmt.Sprintf("function %s may not %s on %s %s (%s): its entry grants %s",
			g.fn.Name, n.action, strings.ToLower(n.kind), logical, op, g.grantOf(n.kind, logical))
		g.mu.Lock()
		g.refused = append(g.refused, msg)
		g.mu.Unlock()
		return &smithy.GenericAPIError{Code: "AccessDeniedException", Message: msg, Fault: smithy.FaultClient}
	}
	return nil
}

func (g *Guard) grantOf(kind, logical string) string {
	var a resources.Access
	var ok bool
	switch kind {
	case resources.KindTable:
		a, ok = g.fn.Tables[logical]
	case resources.KindQueue:
		a, ok = g.fn.Queues[logical]
	case resources.KindBucket:
		a, ok = g.fn.Buckets[logical]
	}
	if !ok {
		return "nothing on it"
	}
	return string(a)
}

func dynamoAccess(params any) []access {
	table := func(name *string, action string) access {
		return access{kind: resources.KindTable, name: aws.ToString(name), action: "dynamodb:" + action}
	}
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		return []access{table(in.TableName, "GetItem")}
	case *dynamodb.QueryInput:
		return []access{table(in.TableName, "Query")}
	case *dynamodb.ScanInput:
		return []access{table(in.TableName, "Scan")}
	case *dynamodb.DescribeTableInput:
		return []access{table(in.TableName, "DescribeTable")}
	case *dynamodb.PutItemInput:
		return []access{table(in.TableName, "PutItem")}
	case *dynamodb.UpdateItemInput:
		return []access{table(in.TableName, "UpdateItem")}
	case *dynamodb.DeleteItemInput:
		return []access{table(in.TableName, "DeleteItem")}
	case *dynamodb.BatchGetItemInput:
		return batch(in.RequestItems, "dynamodb:BatchGetItem")
	case *dynamodb.BatchWriteItemInput:
		return batch(in.RequestItems, "dynamodb:BatchWriteItem")
	case *dynamodb.TransactGetItemsInput:
		var needs []access
		for _, it := range in.TransactItems {
			if it.Get != nil {
				needs = append(needs, table(it.Get.TableName, "GetItem"))
			}
		}
		return needs
	case *dynamodb.TransactWriteItemsInput:
		var needs []access
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				needs = append(needs, table(it.Put.TableName, "PutItem"))
			case it.Update != nil:
				needs = append(needs, table(it.Update.TableName, "UpdateItem"))
			case it.Delete != nil:
				needs = append(needs, table(it.Delete.TableName, "DeleteItem"))
			case it.ConditionCheck != nil:
				needs = append(needs, table(it.ConditionCheck.TableName, "ConditionCheckItem"))
			}
		}
		return needs
	}
	return nil
}

// batch lists the tables of a batch request, in name order.
func batch[V any](items map[string]V, action string) []access {
	names := sortedKeys(items)
	needs := make([]access, len(names))
	for i, name := range names {
		needs[i] = access{kind: resources.KindTable, name: name, action: action}
	}
	return needs
}

func s3Access(params any) []access {
	bucket := func(name *string, action string) []access {
		return []access{{kind: resources.KindBucket, name: aws.ToString(name), action: "s3:" + action}}
	}
	switch in := params.(type) {
	case *s3.PutObjectInput:
		return bucket(in.Bucket, "PutObject")
	case *s3.GetObjectInput:
		return bucket(in.Bucket, "GetObject")
	case *s3.HeadObjectInput:
		return bucket(in.Bucket, "GetObject")
	case *s3.DeleteObjectInput:
		return bucket(in.Bucket, "DeleteObject")
	case *s3.ListObjectsV2Input:
		return bucket(in.Bucket, "ListBucket")
	case *s3.HeadBucketInput:
		return bucket(in.Bucket, "ListBucket")
	}
	return nil
}

func sqsAccess(params any) []access {
	queue := func(url *string, action string) []access {
		return []access{{kind: resources.KindQueue, name: aws.ToString(url), action: "sqs:" + action}}
	}
	switch in := params.(type) {
	case *sqs.SendMessageInput:
		return queue(in.QueueUrl, "SendMessage")
	case *sqs.SendMessageBatchInput:
		return queue(in.QueueUrl, "SendMessage")
	case *sqs.ReceiveMessageInput:
		return queue(in.QueueUrl, "ReceiveMessage")
	case *sqs.DeleteMessageInput:
		return queue(in.QueueUrl, "DeleteMessage")
	case *sqs.DeleteMessageBatchInput:
		return queue(in.QueueUrl, "DeleteMessage")
	case *sqs.ChangeMessageVisibilityInput:
		return queue(in.QueueUrl, "ChangeMessageVisibility")
	case *sqs.GetQueueAttributesInput:
		return queue(in.QueueUrl, "GetQueueAttributes")
	}
	return nil
}
