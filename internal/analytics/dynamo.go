package analytics

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/dynamo"
)

// DynamoWriter keeps rows in the analytics table: partition = account, sort key = the claim's
// timestamp (13 digits, so keys sort by time) and the event id. A Query with a key range on the
// sort key reads one account's events over a time range.
type DynamoWriter struct {
	DB    *dynamodb.Client
	Table string
}

// SortKey is a row's sort key.
func SortKey(eventID string, rowInsertedAtMs int64) string {
	return fmt.Sprintf("%013d#%s", rowInsertedAtMs, eventID)
}

func (w *DynamoWriter) key(accountID, eventID string, rowInsertedAtMs int64) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(accountID), "sk": dynamo.S(SortKey(eventID, rowInsertedAtMs))}
}

// Write implements Writer. DynamoDB refusing the item as invalid (e.g. over 400 KB) is a
// rejection like a schema violation: it will fail the same way every time.
func (w *DynamoWriter) Write(ctx context.Context, row Row) error {
	item := w.key(row.AccountID, row.EventID, row.RowInsertedAtMs)
	item["accountId"] = dynamo.S(row.AccountID)
	item["eventId"] = dynamo.S(row.EventID)
	item["type"] = dynamo.S(row.Type)
	item["source"] = dynamo.S(row.Source)
	if row.Subject != "" {
		item["subject"] = dynamo.S(row.Subject)
	}
	if row.Time != "" {
		item["time"] = dynamo.S(row.Time)
	}
	item["receivedAtMs"] = dynamo.N(row.ReceivedAtMs)
	item["rowInsertedAtMs"] = dynamo.N(row.RowInsertedAtMs)
	item["cycle"] = dynamo.S(row.Cycle)
	item["archiveKey"] = dynamo.S(row.ArchiveKey)
	if len(row.Dimensions) > 0 {
		dims := make(map[string]types.AttributeValue, len(row.Dimensions))
		for k, v := range row.Dimensions {
			switch v := v.(type) {
			case string:
				dims[k] = dynamo.S(v)
			case json.Number:
				dims[k] = &types.AttributeValueMemberN{Value: v.String()}
			case bool:
				dims[k] = &types.AttributeValueMemberBOOL{Value: v}
			}
		}
		item["dims"] = &types.AttributeValueMemberM{Value: dims}
	}
	if len(row.Truncated) > 0 {
		cut := make(map[string]types.AttributeValue, len(row.Truncated))
		for k, n := range row.Truncated {
			cut[k] = dynamo.N(int64(n))
		}
		item["truncated"] = &types.AttributeValueMemberM{Value: cut}
	}
	if row.DimsOmitted > 0 {
		item["dimsOmitted"] = dynamo.N(int64(row.DimsOmitted))
	}
	_, err := w.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(w.Table), Item: item})
	if dynamo.IsValidation(err) {
		return fmt.Errorf("write analytics row %s: %w: %v", row.EventID, ErrRowRejected, err)
	}
	if err != nil {
		return fmt.Errorf("write analytics row %s: %w", row.EventID, err)
	}
	return nil
}

// Exists implements Writer.
func (w *DynamoWriter) Exists(ctx context.Context, accountID, eventID string, rowInsertedAtMs int64) (bool, error) {
	out, err := w.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(w.Table),
		Key:                      w.key(accountID, eventID, rowInsertedAtMs),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#pk"),
		ExpressionAttributeNames: dynamo.Names("#pk"),
	})
	if err != nil {
		return false, fmt.Errorf("probe analytics row %s: %w", eventID, err)
	}
	return out.Item != nil, nil
}
