package outbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Expressions.
const (
	// insertCondition: a row is written once; its key (the total, or the evidence) is the
	// identifier, so a second row with the same key would be a second event under one identifier.
	insertCondition = "attribute_not_exists(#pk)"
	// rewriteCondition: every later write (claim, sent, failure, cancellation) is conditioned on
	// the revision it was decided on, so two drainers can never both claim one row.
	rewriteCondition = "#rev = :rev"
	dueKeyCondition  = "#dueShard = :shard AND #dueAtMs <= :now"
)

// Errors of the store.
var (
	// ErrExists: a row with this key exists.
	ErrExists = errors.New("an outbox row with this key exists")
	// ErrChanged: the row was written after it was read (another drainer claimed it).
	ErrChanged = errors.New("the outbox row changed after it was read")
	// ErrNotFound: no row with this key.
	ErrNotFound = errors.New("no such outbox row")
)

// Ref names a row.
type Ref struct{ PK, SK string }

// Table keeps the outbox in its table.
type Table struct {
	DB    *dynamodb.Client
	Table string
	// Notifications is the notifications table, where RewriteNotifying puts the notification it
	// writes with a row.
	Notifications string
}

type rowItem struct {
	PK              string `dynamodbav:"pk"`
	SK              string `dynamodbav:"sk"`
	Account         string `dynamodbav:"accountId"`
	Feature         string `dynamodbav:"feature"`
	Cycle           string `dynamodbav:"cycle"`
	Identifier      string `dynamodbav:"identifier"`
	Kind            string `dynamodbav:"kind"`
	Total           int64  `dynamodbav:"total"`
	Delta           int64  `dynamodbav:"delta"`
	Absolute        bool   `dynamodbav:"absolute,omitempty"`
	EventName       string `dynamodbav:"eventName"`
	MeterID         string `dynamodbav:"meterId"`
	Customer        string `dynamodbav:"customer"`
	TimestampMs     int64  `dynamodbav:"timestampMs"`
	CycleEndMs      int64  `dynamodbav:"cycleEndMs"`
	Status          string `dynamodbav:"status"`
	Attempts        int    `dynamodbav:"attempts"`
	NextAttemptAtMs int64  `dynamodbav:"nextAttemptAtMs"`
	ClaimUntilMs    int64  `dynamodbav:"claimUntilMs"`
	ClaimOwner      string `dynamodbav:"claimOwner,omitempty"`
	LastError       string `dynamodbav:"lastError,omitempty"`
	SentAtMs        int64  `dynamodbav:"sentAtMs,omitempty"`
	CancelledAtMs   int64  `dynamodbav:"cancelledAtMs,omitempty"`
	CreatedAtMs     int64  `dynamodbav:"createdAtMs"`
	UpdatedAtMs     int64  `dynamodbav:"updatedAtMs"`
	Rev             int64  `dynamodbav:"rev"`
	// DueShard and DueAtMs are present only while the row is due: they put it in the due index.
	DueShard string `dynamodbav:"dueShard,omitempty"`
	DueAtMs  int64  `dynamodbav:"dueAtMs,omitempty"`
}

// PartitionKey is a cycle's partition in the outbox (as in the usage table).
func PartitionKey(account, feature, cycle string) string {
	return usage.PartitionKey(account, feature, cycle)
}

// DueShard spreads due rows over the due index's partitions by their cycle.
func DueShard(pk string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(pk))
	return fmt.Sprintf("%02d", h.Sum32()%resources.OutboxDueShards)
}

func itemOf(r Row) rowItem {
	pk := PartitionKey(r.Account, r.Feature, r.Cycle)
	it := rowItem{
		PK: pk, SK: r.Key, Account: r.Account, Feature: r.Feature, Cycle: r.Cycle, Identifier: r.Identifier(),
		Kind: string(r.Kind), Total: r.Total, Delta: r.Delta, Absolute: r.Absolute, EventName: r.EventName, MeterID: r.MeterID,
		Customer: r.Customer, TimestampMs: r.TimestampMs, CycleEndMs: r.CycleEndMs, Status: string(r.Status),
		Attempts: r.Attempts, NextAttemptAtMs: r.NextAttemptAtMs, ClaimUntilMs: r.ClaimUntilMs,
		ClaimOwner: r.ClaimOwner, LastError: r.LastError, SentAtMs: r.SentAtMs, CancelledAtMs: r.CancelledAtMs,
		CreatedAtMs: r.CreatedAtMs, UpdatedAtMs: r.UpdatedAtMs, Rev: r.Rev,
	}
	if r.Status.Due() {
		it.DueShard, it.DueAtMs = DueShard(pk), r.dueAt()
	}
	return it
}

func (it rowItem) row() Row {
	return Row{
		Account: it.Account, Feature: it.Feature, Cycle: it.Cycle, Key: it.SK, Kind: Kind(it.Kind), Total: it.Total,
		Delta: it.Delta, Absolute: it.Absolute, EventName: it.EventName, MeterID: it.MeterID, Customer: it.Customer,
		TimestampMs: it.TimestampMs, CycleEndMs: it.CycleEndMs, Status: Status(it.Status), Attempts: it.Attempts,
		NextAttemptAtMs: it.NextAttemptAtMs, ClaimUntilMs: it.ClaimUntilMs, ClaimOwner: it.ClaimOwner,
		LastError: it.LastError, SentAtMs: it.SentAtMs, CancelledAtMs: it.CancelledAtMs,
		CreatedAtMs: it.CreatedAtMs, UpdatedAtMs: it.UpdatedAtMs, Rev: it.Rev,
	}
}

// InsertItem is the transaction item that writes a new row (PENDING, due at once), only if no
// row has its key. The reporter and the reconciler put it in one transaction with lastSent.
func (s *Table) InsertItem(r Row) (types.TransactWriteItem, error) {
	r.Status, r.Rev = Pending, 1
	if r.NextAttemptAtMs == 0 {
		r.NextAttemptAtMs = r.CreatedAtMs
	}
	item, err := attributevalue.MarshalMap(itemOf(r))
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("encode outbox row %s: %w", r.Identifier(), err)
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.Table), Item: item,
		ConditionExpression: aws.String(insertCondition), ExpressionAttributeNames: dynamo.Names(insertCondition),
	}}, nil
}

// Get reads a row (strongly consistent).
func (s *Table) Get(ctx context.Context, ref Ref) (Row, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": dynamo.S(ref.PK), "sk": dynamo.S(ref.SK)},
	})
	if err != nil {
		return Row{}, fmt.Errorf("read outbox row %s %s: %w", ref.PK, ref.SK, err)
	}
	if out.Item == nil {
		return Row{}, ErrNotFound
	}
	var it rowItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return Row{}, fmt.Errorf("decode outbox row %s %s: %w", ref.PK, ref.SK, err)
	}
	return it.row(), nil
}

// Rewrite replaces a row read at revision prev with next (whose Rev becomes prev+1), only if no
// one wrote it since. The row is written whole, so a row that is no longer due leaves the due
// index (the local emulator ignores REMOVE).
func (s *Table) Rewrite(ctx context.Context, next Row, prev int64) (Row, error) {
	next.Rev = prev + 1
	put, err := s.rewritePut(next, prev)
	if err != nil {
		return Row{}, err
	}
	_, err = s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: put.TableName, Item: put.Item, ConditionExpression: put.ConditionExpression,
		ExpressionAttributeNames: put.ExpressionAttributeNames, ExpressionAttributeValues: put.ExpressionAttributeValues,
	})
	if dynamo.IsConditionFailed(err) {
		return Row{}, ErrChanged
	}
	if err != nil {
		return Row{}, fmt.Errorf("write outbox row %s: %w", next.Identifier(), err)
	}
	return next, nil
}

// RewriteNotifying is Rewrite with a notification: one transaction rewrites the row (only if no
// one wrote it since prev) and puts n (only if it was never put, notify.Put), so the row's new
// state and its notification exist together or not at all, and no crash between two writes
// can keep one without the other.
//
// A cancelled transaction is resolved from the row, not from the cancellation's reasons: a row
// written since prev is ErrChanged, as for Rewrite. A row still at prev was not what cancelled
// it: n exists already, or the transaction met another one. Then the notification is told on
// its own first (conditional on its absence: telling twice is one notification) and the row
// rewritten alone after it, so a crash between the two never loses the notification: it leaves
// it told and the row as it was, claimed, for the drainer that takes the lapsed claim over.
func (s *Table) RewriteNotifying(ctx context.Context, next Row, prev int64, n notify.Notification) (Row, error) {
	if s.Notifications == "" {
		return Row{}, fmt.Errorf("write outbox row %s with its %s: the outbox was composed without the notifications table", next.Identifier(), n.Kind)
	}
	next.Rev = prev + 1
	put, err := s.rewritePut(next, prev)
	if err != nil {
		return Row{}, err
	}
	_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &put}, notify.Put(s.Notifications, n),
	}})
	if err == nil {
		return next, nil
	}
	if !dynamo.IsTransactionCanceled(err) {
		return Row{}, fmt.Errorf("write outbox row %s with its %s: %w", next.Identifier(), n.Kind, err)
	}
	now, gerr := s.Get(ctx, RefOf(next))
	if gerr != nil {
		return Row{}, gerr
	}
	if now.Rev != prev {
		return Row{}, ErrChanged
	}
	if _, err := notify.Tell(ctx, s.DB, s.Notifications, n); err != nil {
		return Row{}, err
	}
	return s.Rewrite(ctx, next, prev)
}

// rewritePut is the put that replaces a row read at revision prev with next, only if no one
// wrote it since.
func (s *Table) rewritePut(next Row, prev int64) (types.Put, error) {
	item, err := attributevalue.MarshalMap(itemOf(next))
	if err != nil {
		return types.Put{}, fmt.Errorf("encode outbox row %s: %w", next.Identifier(), err)
	}
	return types.Put{
		TableName: aws.String(s.Table), Item: item,
		ConditionExpression:       aws.String(rewriteCondition),
		ExpressionAttributeNames:  dynamo.Names(rewriteCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{":rev": dynamo.N(prev)},
	}, nil
}

// Due returns up to limit rows that need a drainer by nowMs, oldest first within each shard. The
// index is eventually consistent: the drainer re-reads every row before acting on it.
func (s *Table) Due(ctx context.Context, nowMs int64, limit int) ([]Ref, error) {
	var refs []Ref
	for shard := range resources.OutboxDueShards {
		var start map[string]types.AttributeValue
		for range maxDuePages {
			if len(refs) >= limit {
				return refs, nil
			}
			out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
				TableName:                aws.String(s.Table),
				IndexName:                aws.String(resources.IndexOutboxByDue),
				KeyConditionExpression:   aws.String(dueKeyCondition),
				ExpressionAttributeNames: dynamo.Names(dueKeyCondition),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":shard": dynamo.S(fmt.Sprintf("%02d", shard)), ":now": dynamo.N(nowMs),
				},
				Limit:             aws.Int32(int32(limit - len(refs))),
				ExclusiveStartKey: start,
			})
			if err != nil {
				return refs, fmt.Errorf("query due outbox rows of shard %d: %w", shard, err)
			}
			for _, item := range out.Items {
				refs = append(refs, Ref{PK: dynamo.Str(item, "pk"), SK: dynamo.Str(item, "sk")})
			}
			if len(out.LastEvaluatedKey) == 0 {
				break
			}
			start = out.LastEvaluatedKey
		}
	}
	return refs, nil
}

// maxDuePages bounds the pages read from one shard of the due index in one call.
const maxDuePages = 10

// maxCyclePages bounds one read of a cycle's rows (a row per report: about one a minute at most).
const maxCyclePages = 50

// Cycle returns every row of one (account, feature, cycle), oldest key first.
func (s *Table) Cycle(ctx context.Context, account, feature, cycle string) ([]Row, error) {
	var rows []Row
	var start map[string]types.AttributeValue
	for range maxCyclePages {
		out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.Table),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  dynamo.Names("#pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(PartitionKey(account, feature, cycle))},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("read the outbox of %s %s %s: %w", account, feature, cycle, err)
		}
		for _, raw := range out.Items {
			var it rowItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return nil, fmt.Errorf("decode an outbox row: %w", err)
			}
			rows = append(rows, it.row())
		}
		if len(out.LastEvaluatedKey) == 0 {
			return rows, nil
		}
		start = out.LastEvaluatedKey
	}
	return nil, fmt.Errorf("the outbox of %s %s %s has more than %d pages", account, feature, cycle, maxCyclePages)
}

// RefOf names a row.
func RefOf(r Row) Ref { return Ref{PK: PartitionKey(r.Account, r.Feature, r.Cycle), SK: r.Key} }

// SplitPartition reads (account, feature, cycle) back from a partition key.
func SplitPartition(pk string) (account, feature, cycle string, ok bool) {
	parts := strings.Split(pk, "#")
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}
