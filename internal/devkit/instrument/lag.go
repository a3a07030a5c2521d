package instrument

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithymw "github.com/aws/smithy-go/middleware"
)

// IndexLag makes a global secondary index answer as it stood a moment ago, as AWS's
// eventually consistent indexes may: an item written to the table can still be listed the way
// the index saw it before the write. The local emulator updates its indexes in the same request
// as the table, so without this a race that rests on a stale index never happens in a test.
//
// While it records (the default), every Query of a named index passes and its answer is kept,
// by the query as asked. Once it lags, a Query asked before gets the kept answer — the index as it
// stood then — and any other passes and is kept. A test records the index, writes the table, then
// lags, and watches what the code that reads the index does with the stale answer.
type IndexLag struct {
	mu      sync.Mutex
	indexes map[string]bool
	lagging bool
	answers map[string]*dynamodb.QueryOutput
	served  int
}

// NewIndexLag lags the indexes named.
func NewIndexLag(indexes ...string) *IndexLag {
	l := &IndexLag{indexes: map[string]bool{}, answers: map[string]*dynamodb.QueryOutput{}}
	for _, ix := range indexes {
		l.indexes[ix] = true
	}
	return l
}

// Lag turns the lag on (kept answers are served) or off (every query passes and is kept).
func (l *IndexLag) Lag(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lagging = on
}

// Served returns how many stale answers the lag has served.
func (l *IndexLag) Served() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.served
}

// Option installs the lag on a DynamoDB client.
func (l *IndexLag) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.IndexLag", l.handle), smithymw.After)
	})
}

func (l *IndexLag) handle(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
	q, ok := in.Parameters.(*dynamodb.QueryInput)
	if !ok || !l.indexes[aws.ToString(q.IndexName)] {
		return next.HandleInitialize(ctx, in)
	}
	key := queryKey(q)
	l.mu.Lock()
	kept, found := l.answers[key]
	if l.lagging && found {
		l.served++
		l.mu.Unlock()
		return smithymw.InitializeOutput{Result: kept}, smithymw.Metadata{}, nil
	}
	l.mu.Unlock()
	out, md, err := next.HandleInitialize(ctx, in)
	if err == nil {
		if answer, ok := out.Result.(*dynamodb.QueryOutput); ok {
			l.mu.Lock()
			l.answers[key] = answer
			l.mu.Unlock()
		}
	}
	return out, md, err
}

// queryKey is a query as asked: what a repeat of it must match to get the same answer.
func queryKey(q *dynamodb.QueryInput) string {
	parts := []string{
		aws.ToString(q.TableName), aws.ToString(q.IndexName), aws.ToString(q.KeyConditionExpression),
		aws.ToString(q.FilterExpression), aws.ToString(q.ProjectionExpression), string(q.Select),
		fmt.Sprint(aws.ToInt32(q.Limit)), fmt.Sprint(aws.ToBool(q.ScanIndexForward)),
		values(q.ExpressionAttributeValues), values(q.ExclusiveStartKey),
	}
	return strings.Join(parts, "\x00")
}

// values writes attribute values out in name order.
func values(m map[string]types.AttributeValue) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		switch v := m[n].(type) {
		case *types.AttributeValueMemberS:
			fmt.Fprintf(&b, "%s=S:%s;", n, v.Value)
		case *types.AttributeValueMemberN:
			fmt.Fprintf(&b, "%s=N:%s;", n, v.Value)
		default:
			fmt.Fprintf(&b, "%s=%#v;", n, v)
		}
	}
	return b.String()
}
