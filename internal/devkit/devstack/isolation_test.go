package devstack_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// The concurrency tests (holds admitted against a cap, racing deliveries of one event) count on
// what DynamoDB documents: every transaction is serializable, so a cancelled one changes nothing
// and erases nothing. An endpoint that breaks this fails those tests for reasons that have
// nothing to do with Ferry; this test names the cause. Plain moto_server breaks it (a cancelled
// TransactWriteItems restores a snapshot of every table it touched, dropping writes that other
// requests committed meanwhile), which is why `make test-moto` serializes its DynamoDB requests.
func TestStack_ConcurrentTransactions_ACancelledOneErasesNothing(t *testing.T) {
	env := testenv.New(t)
	table := env.Names.Table(resources.TableUsage)
	// A client of its own, without the guard table's check: this probes the endpoint with
	// conditions of the test's own, not Ferry's.
	db, err := cloud.New(context.Background(), env.Endpoints, cloud.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		committed []string
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every other transaction puts an item on a condition that cannot hold, so it is cancelled.
			cond := "attribute_not_exists(#pk)"
			if i%2 == 1 {
				cond = "attribute_exists(#pk)"
			}
			sk := fmt.Sprintf("item-%03d", i)
			_, err := db.DynamoDB.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{
				TransactItems: []types.TransactWriteItem{{Put: &types.Put{
					TableName:                aws.String(table),
					Item:                     map[string]types.AttributeValue{"pk": dynamo.S("isolation"), "sk": dynamo.S(sk)},
					ConditionExpression:      aws.String(cond),
					ExpressionAttributeNames: dynamo.Names(cond),
				}}},
			})
			switch {
			case err == nil && i%2 == 0:
				mu.Lock()
				committed = append(committed, sk)
				mu.Unlock()
			case dynamo.IsTransactionCanceled(err) && i%2 == 1:
			default:
				t.Errorf("transaction %d: %v", i, err)
			}
		}()
	}
	wg.Wait()

	out, err := env.Clients.DynamoDB.Query(context.Background(), &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  dynamo.Names("#pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S("isolation")},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	stored := map[string]bool{}
	for _, item := range out.Items {
		stored[dynamo.Str(item, "sk")] = true
	}
	var lost []string
	for _, sk := range committed {
		if !stored[sk] {
			lost = append(lost, sk)
		}
	}
	if len(committed) != n/2 || len(lost) > 0 || len(out.Items) != n/2 {
		t.Fatalf("%d transactions committed, %d items stored, lost after commit: %v; want %d, %d, none "+
			"(the endpoint does not isolate concurrent transactions)", len(committed), len(out.Items), lost, n/2, n/2)
	}
}
