package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// DynamoWriter keeps rows in the analytics table: partition = account, sort key = the claim's
// timestamp (13 digits, so keys sort by time) and the event id. A Query with a key range on the
// sort key reads one account's events over a time range.
type DynamoWriter struct {
	DB    *dynamodb.Client
	Table string
}

// MaxInstantMs is the last instant a 13-digit key holds (the year 2286).
const MaxInstantMs = 9_999_999_999_999

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
	_, err := w.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(w.Table), Item: w.item(row)})
	if dynamo.IsValidation(err) {
		return fmt.Errorf("write analytics row %s: %w: %v", row.EventID, ErrRowRejected, err)
	}
	if err != nil {
		return fmt.Errorf("write analytics row %s: %w", row.EventID, err)
	}
	return nil
}

func (w *DynamoWriter) item(row Row) map[string]types.AttributeValue {
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
	if row.ArchiveLength > 0 {
		item["archiveOffset"] = dynamo.N(row.ArchiveOffset)
		item["archiveLength"] = dynamo.N(row.ArchiveLength)
	}
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
	return item
}

// DynamoDB's bounds on one BatchWriteItem and one BatchGetItem, and how many rounds re-send what
// DynamoDB left unprocessed (its own throttle) before the call fails.
const (
	maxBatchWrite        = 25
	maxBatchGet          = 100
	maxUnprocessedRounds = 5
)

// errUnprocessed: DynamoDB left part of a batch call unprocessed every round.
var errUnprocessed = errors.New("analytics batch still unprocessed")

// WriteBatch implements Writer: BatchWriteItem calls of at most 25 rows, each re-sending what
// DynamoDB left unprocessed, a bounded number of rounds. A row DynamoDB refuses as invalid fails
// its whole call as ErrRowRejected.
func (w *DynamoWriter) WriteBatch(ctx context.Context, rows []Row) error {
	for start := 0; start < len(rows); start += maxBatchWrite {
		var reqs []types.WriteRequest
		for _, row := range rows[start:min(start+maxBatchWrite, len(rows))] {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: w.item(row)}})
		}
		pending := map[string][]types.WriteRequest{w.Table: reqs}
		_, err := retry.Do(ctx, retry.Contended.WithTries(maxUnprocessedRounds), func(ctx context.Context, _ retry.Lap) (struct{}, error) {
			out, err := w.DB.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if dynamo.IsValidation(err) {
				return struct{}{}, fmt.Errorf("write analytics rows: %w: %v", ErrRowRejected, err)
			}
			if err != nil {
				return struct{}{}, fmt.Errorf("write analytics rows: %w", err)
			}
			if pending = out.UnprocessedItems; len(pending) > 0 {
				return struct{}{}, retry.Again(errUnprocessed)
			}
			return struct{}{}, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ExistsBatch implements Writer: BatchGetItem calls of at most 100 keys, strongly consistent.
// Each unit's rows item is read once however many of its events are asked for, and answers only
// for the events asked for in it.
func (w *DynamoWriter) ExistsBatch(ctx context.Context, accountID string, refs []RowRef) (map[string]bool, error) {
	present := map[string]bool{}
	inUnit := map[string]map[string]bool{} // unit sort key → the events asked for in it
	var keys []map[string]types.AttributeValue
	for _, r := range refs {
		if r.Unit == "" {
			keys = append(keys, w.key(accountID, r.EventID, r.RowInsertedAtMs))
			continue
		}
		sk := UnitSortKey(r.Unit, r.RowInsertedAtMs)
		if inUnit[sk] == nil {
			inUnit[sk] = map[string]bool{}
			keys = append(keys, map[string]types.AttributeValue{"pk": dynamo.S(accountID), "sk": dynamo.S(sk)})
		}
		inUnit[sk][r.EventID] = true
	}
	for start := 0; start < len(keys); start += maxBatchGet {
		request := map[string]types.KeysAndAttributes{w.Table: {
			Keys: keys[start:min(start+maxBatchGet, len(keys))], ConsistentRead: aws.Bool(true),
		}}
		_, err := retry.Do(ctx, retry.Contended.WithTries(maxUnprocessedRounds), func(ctx context.Context, _ retry.Lap) (struct{}, error) {
			out, err := w.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: request})
			if err != nil {
				return struct{}{}, fmt.Errorf("probe analytics rows: %w", err)
			}
			for _, item := range out.Responses[w.Table] {
				if !IsUnitItem(item) {
					present[dynamo.Str(item, "eventId")] = true
					continue
				}
				rows, err := RowsOf(item)
				if err != nil {
					return struct{}{}, err
				}
				asked := inUnit[dynamo.Str(item, "sk")]
				for _, row := range rows {
					if asked[row.EventID] {
						present[row.EventID] = true
					}
				}
			}
			if request = out.UnprocessedKeys; len(request) > 0 {
				return struct{}{}, retry.Again(errUnprocessed)
			}
			return struct{}{}, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return present, nil
}

// Exists implements Writer.
func (w *DynamoWriter) Exists(ctx context.Context, ref RowRef) (bool, error) {
	if ref.Unit != "" {
		present, err := w.ExistsBatch(ctx, ref.AccountID, []RowRef{ref})
		return present[ref.EventID], err
	}
	out, err := w.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(w.Table),
		Key:                      w.key(ref.AccountID, ref.EventID, ref.RowInsertedAtMs),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#pk"),
		ExpressionAttributeNames: dynamo.Names("#pk"),
	})
	if err != nil {
		return false, fmt.Errorf("probe analytics row %s: %w", ref.EventID, err)
	}
	return out.Item != nil, nil
}

// Rows reads one account's rows whose claim instant is in [fromMs, toMs], strongly consistent,
// in key order: rows of their own and every row of the units' rows items alike.
func (w *DynamoWriter) Rows(ctx context.Context, accountID string, fromMs, toMs int64) ([]Row, error) {
	if fromMs < 0 || toMs < fromMs || toMs > MaxInstantMs {
		return nil, fmt.Errorf("read the analytics rows of %s: the range [%d, %d] is not within [0, %d]", accountID, fromMs, toMs, int64(MaxInstantMs))
	}
	// Every key is the 13-digit instant, then '#' or '~' and more: the bounds are the first
	// instant alone and the last followed by a byte above both.
	lo, hi := fmt.Sprintf("%013d", fromMs), fmt.Sprintf("%013d\x7f", toMs)
	p := dynamodb.NewQueryPaginator(w.DB, &dynamodb.QueryInput{
		TableName:                 aws.String(w.Table),
		KeyConditionExpression:    aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
		ExpressionAttributeNames:  dynamo.Names("#pk", "#sk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(accountID), ":lo": dynamo.S(lo), ":hi": dynamo.S(hi)},
		ConsistentRead:            aws.Bool(true),
	})
	var rows []Row
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the analytics rows of %s: %w", accountID, err)
		}
		for _, item := range page.Items {
			if IsUnitItem(item) {
				in, err := RowsOf(item)
				if err != nil {
					return nil, err
				}
				rows = append(rows, in...)
				continue
			}
			var r Row
			if err := decodeRow(item, &r); err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// decodeRow reads a row of its own back as Write stored it.
func decodeRow(item map[string]types.AttributeValue, r *Row) error {
	*r = Row{
		AccountID: dynamo.Str(item, "accountId"), EventID: dynamo.Str(item, "eventId"), Type: dynamo.Str(item, "type"),
		Source: dynamo.Str(item, "source"), Subject: dynamo.Str(item, "subject"), Time: dynamo.Str(item, "time"),
		ReceivedAtMs: dynamo.Int(item, "receivedAtMs"), RowInsertedAtMs: dynamo.Int(item, "rowInsertedAtMs"),
		Cycle: dynamo.Str(item, "cycle"), ArchiveKey: dynamo.Str(item, "archiveKey"),
		ArchiveOffset: dynamo.Int(item, "archiveOffset"), ArchiveLength: dynamo.Int(item, "archiveLength"),
		DimsOmitted: int(dynamo.Int(item, "dimsOmitted")),
	}
	if m, ok := item["dims"].(*types.AttributeValueMemberM); ok {
		r.Dimensions = make(map[string]any, len(m.Value))
		for k, v := range m.Value {
			switch v := v.(type) {
			case *types.AttributeValueMemberS:
				r.Dimensions[k] = v.Value
			case *types.AttributeValueMemberN:
				r.Dimensions[k] = json.Number(v.Value)
			case *types.AttributeValueMemberBOOL:
				r.Dimensions[k] = v.Value
			default:
				return fmt.Errorf("analytics row %s: dimension %s is neither a string, a number nor a boolean", r.EventID, k)
			}
		}
	}
	if m, ok := item["truncated"].(*types.AttributeValueMemberM); ok {
		r.Truncated = make(map[string]int, len(m.Value))
		for k := range m.Value {
			r.Truncated[k] = int(dynamo.Int(m.Value, k))
		}
	}
	return nil
}
