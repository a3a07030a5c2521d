package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/retry"
)

// Bounds of BatchGet.
const (
	// MaxBatchGetKeys is DynamoDB's BatchGetItem limit.
	MaxBatchGetKeys = 100
	// maxBatchGetRounds bounds the rounds that re-read the keys DynamoDB left unprocessed.
	maxBatchGetRounds = 5
)

// BatchGet reads up to MaxBatchGetKeys items of one table by key, strongly consistent, in as
// few rounds as DynamoDB allows: keys it leaves unprocessed (its own load shedding) are read
// again after the contended policy's backoff, at most maxBatchGetRounds rounds in all. Items that
// do not exist are simply absent from the answer; the order is DynamoDB's.
func BatchGet(ctx context.Context, db *dynamodb.Client, table string, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	if len(keys) > MaxBatchGetKeys {
		return nil, fmt.Errorf("batch get of %d keys: at most %d", len(keys), MaxBatchGetKeys)
	}
	var items []map[string]types.AttributeValue
	pending := keys
	for round := range maxBatchGetRounds {
		if len(pending) == 0 {
			return items, nil
		}
		out, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			table: {Keys: pending, ConsistentRead: aws.Bool(true)},
		}})
		if err != nil {
			return nil, err
		}
		items = append(items, out.Responses[table]...)
		pending = out.UnprocessedKeys[table].Keys
		if len(pending) > 0 && round < maxBatchGetRounds-1 {
			if err := retry.Sleep(ctx, retry.Contended.Backoff(round)); err != nil {
				return nil, err
			}
		}
	}
	if len(pending) > 0 {
		return nil, fmt.Errorf("%d keys still unprocessed after %d rounds", len(pending), maxBatchGetRounds)
	}
	return items, nil
}
