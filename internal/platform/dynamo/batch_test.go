package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// shedding makes DynamoDB's answers to BatchGetItem shed load as DynamoDB does under pressure:
// on each of the first calls (all of them when calls < 0) it keeps the first item it read and
// hands the keys of the rest back as unprocessed.
type shedding struct {
	mu           sync.Mutex
	table        string
	calls, total int
}

func (s *shedding) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("test.Shedding", func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			got, ok := out.Result.(*dynamodb.BatchGetItemOutput)
			if err != nil || !ok {
				return out, md, err
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			s.total++
			if s.calls >= 0 && s.total > s.calls {
				return out, md, err
			}
			items := got.Responses[s.table]
			if len(items) > 1 {
				var keys []map[string]types.AttributeValue
				for _, item := range items[1:] {
					keys = append(keys, map[string]types.AttributeValue{"pk": item["pk"], "sk": item["sk"]})
				}
				got.Responses[s.table] = items[:1]
				got.UnprocessedKeys = map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
			}
			return out, md, err
		}), smithymw.After)
	})
}

func putItems(t *testing.T, db *dynamodb.Client, table string, n int) []map[string]types.AttributeValue {
	t.Helper()
	var keys []map[string]types.AttributeValue
	for i := range n {
		key := map[string]types.AttributeValue{"pk": dynamo.S("review"), "sk": dynamo.S(fmt.Sprintf("entry_%d", i))}
		if _, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: key}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	return keys
}

// Keys DynamoDB leaves unprocessed are read again in the next round, until every item is read.
func TestBatchGet_UnprocessedKeysAreReadAgain(t *testing.T) {
	env := testenv.New(t)
	table := env.Names.Table(resources.TableReview)
	keys := putItems(t, env.Clients.DynamoDB, table, 4)
	shed := &shedding{table: table, calls: 2}
	items, err := dynamo.BatchGet(context.Background(), env.ClientsWith(t, shed.option).DynamoDB, table, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 4 || shed.total != 3 {
		t.Errorf("read %d items in %d calls; want 4 items in 3 calls (two shed all but one)", len(items), shed.total)
	}
}

// Keys DynamoDB leaves unprocessed round after round end the read after the bounded rounds, as
// an error that says so, never as a short answer.
func TestBatchGet_KeysStillUnprocessed_FailsAfterTheBoundedRounds(t *testing.T) {
	env := testenv.New(t)
	table := env.Names.Table(resources.TableReview)
	keys := putItems(t, env.Clients.DynamoDB, table, 8)
	shed := &shedding{table: table, calls: -1}
	items, err := dynamo.BatchGet(context.Background(), env.ClientsWith(t, shed.option).DynamoDB, table, keys)
	if !errors.Is(err, retry.ErrExhausted) || items != nil {
		t.Fatalf("read %d items, %v; want no items and the bounded rounds exhausted", len(items), err)
	}
	if shed.total != 5 {
		t.Errorf("%d calls; want 5 rounds", shed.total)
	}
}
