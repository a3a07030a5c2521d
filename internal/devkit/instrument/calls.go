package instrument

import (
	"context"
	"sort"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/platform/cloud"
)

// CallCounter counts the calls each client makes, by service and operation: the round trips a
// benchmark reports per event.
type CallCounter struct {
	mu    sync.Mutex
	calls map[string]int // "S3 PutObject"
}

// NewCallCounter returns an empty counter.
func NewCallCounter() *CallCounter { return &CallCounter{calls: map[string]int{}} }

func (c *CallCounter) install(stack *smithymw.Stack) error {
	return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.CallCounter",
		func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
			key := middleware.GetServiceID(ctx) + " " + middleware.GetOperationName(ctx)
			c.mu.Lock()
			c.calls[key]++
			c.mu.Unlock()
			return next.HandleInitialize(ctx, in)
		}), smithymw.After)
}

// Options installs the counter on all three clients.
func (c *CallCounter) Options() cloud.Options {
	return cloud.Options{
		DynamoDB: []func(*dynamodb.Options){func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, c.install) }},
		S3:       []func(*s3.Options){func(o *s3.Options) { o.APIOptions = append(o.APIOptions, c.install) }},
		SQS:      []func(*sqs.Options){func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, c.install) }},
	}
}

// Snapshot returns a copy of the counts.
func (c *CallCounter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.calls))
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

// Service sums the calls to one service ("DynamoDB", "S3", "SQS").
func (c *CallCounter) Service(id string) int {
	n := 0
	for k, v := range c.Snapshot() {
		if len(k) > len(id) && k[:len(id)+1] == id+" " {
			n += v
		}
	}
	return n
}

// Keys returns the counted "Service Operation" names, sorted.
func (c *CallCounter) Keys() []string { return sortedKeys(c.Snapshot()) }

// sortedKeys returns a count map's names, sorted, so that reports list them in a stable order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Reset clears the counts.
func (c *CallCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = map[string]int{}
}
