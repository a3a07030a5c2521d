package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// Bounds of BatchGet.
const (
	// MaxBatchGetKeys is DynamoDB's BatchGetItem limit.
	MaxBatchGetKeys = 100
	// maxBatchGetRounds bounds the rounds that re-read the keys DynamoDB left unprocessed.
	maxBatchGetRounds = 5
)

// errUnprocessed is a BatchGetItem answer that left keys unprocessed (DynamoDB's own load
// shedding).
var errUnprocessed = errors.New("keys left unprocessed")

// BatchGet reads up to MaxBatchGetKeys items of one table by key, strongly consistent, in as
// few rounds as DynamoDB allows: keys it leaves unprocessed (its own load shedding), and a
// throttled call, are read again after the contended policy's backoff, at most
// maxBatchGetRounds rounds in all. Items that do not exist are simply absent from the answer; the
// order is DynamoDB's.
func BatchGet(ctx context.Context, db *dynamodb.Client, table string, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	if len(keys) > MaxBatchGetKeys {
		return nil, fmt.Errorf("batch get of %d keys: at most %d", len(keys), MaxBatchGetKeys)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	var items []map[string]types.AttributeValue
	pending := keys
	_, err := retry.Do(ctx, retry.Contended.WithTries(maxBatchGetRounds), func(ctx context.Context, _ retry.Lap) (struct{}, error) {
		out, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			table: {Keys: pending, ConsistentRead: aws.Bool(true)},
		}})
		if err != nil {
			return struct{}{}, err
		}
		items = append(items, out.Responses[table]...)
		if pending = out.UnprocessedKeys[table].Keys; len(pending) > 0 {
			return struct{}{}, retry.Again(errUnprocessed)
		}
		return struct{}{}, nil
	})
	if errors.Is(err, retry.ErrExhausted) {
		return nil, fmt.Errorf("%d keys still unprocessed after %d rounds: %w", len(pending), maxBatchGetRounds, err)
	}
	if err != nil {
		return nil, err
	}
	return items, nil
}

// IndexPage reads one page of a keys-only index (in's IndexName) and then the items themselves
// from the table, strongly consistent, in the index's order: an index is eventually consistent,
// so a list shows each item as it is now, never as the index last saw it. keyAttrs are the
// table's key attributes, strings (every index projects them). An item the index still names but that is
// gone is left out. last is the page's LastEvaluatedKey (nil at the end of the index).
func IndexPage(ctx context.Context, db *dynamodb.Client, in *dynamodb.QueryInput, keyAttrs ...string) (items []map[string]types.AttributeValue, last map[string]types.AttributeValue, err error) {
	out, err := db.Query(ctx, in)
	if err != nil {
		return nil, nil, err
	}
	if len(out.LastEvaluatedKey) > 0 {
		last = out.LastEvaluatedKey
	}
	if len(out.Items) == 0 {
		return nil, last, nil
	}
	keys := make([]map[string]types.AttributeValue, len(out.Items))
	for i, item := range out.Items {
		keys[i] = make(map[string]types.AttributeValue, len(keyAttrs))
		for _, a := range keyAttrs {
			keys[i][a] = item[a]
		}
	}
	got, err := BatchGet(ctx, db, aws.ToString(in.TableName), keys)
	if err != nil {
		return nil, nil, err
	}
	byKey := make(map[string]map[string]types.AttributeValue, len(got))
	keyOf := func(item map[string]types.AttributeValue) string {
		k := ""
		for _, a := range keyAttrs {
			k += Str(item, a) + "\x00"
		}
		return k
	}
	for _, item := range got {
		byKey[keyOf(item)] = item
	}
	for _, k := range keys {
		if item, ok := byKey[keyOf(k)]; ok {
			items = append(items, item)
		}
	}
	return items, last, nil
}
