package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// Condition expressions. A unit's claim puts each entry conditional on its absence
// (claimCondition): one transaction claims, checkpoints and meters the unit's events, and
// exactly one claim of an event ever commits. An entry that an earlier release's per-event worker
// claimed alone and never billed is taken over by the unit's claim under takeOverCondition
// instead: still INSERTING, still without its checkpoint.
const (
	claimCondition    = dynamo.AbsentCondition
	takeOverCondition = "#status = :inserting AND attribute_not_exists(#billingAcceptedAtMs)"
	// markCondition: only an unfinished entry is marked INSERTED. The worker reaches the mark
	// only for a billed entry (every entry a claim admits is checkpointed, and the scenario
	// rows that mark match billed entries alone), so the entry carries its checkpoint here.
	markCondition    = "#status = :inserting"
	quarantineUpdate = "ADD #quarantineCount :one SET #reason = :reason, #updatedAtMs = :now"
	// reopenUpdate takes the entry out of the failure index in the write that reopens it, and
	// out of its batch: the batch's record of being done no longer speaks for it. The batch is
	// set to "" (which reads as none) rather than removed: the local emulator ignores REMOVE,
	// and there a redriven event would read INSERTED through its batch's record, unstored.
	reopenUpdate = "SET #status = :inserting, #quarantineCount = :zero, #updatedAtMs = :now, #batch = :noBatch REMOVE #failureKey, #failedAtMs"
	// insertingCondition keeps a step that only an unfinished event may take (a quarantine, the
	// UNINSERTABLE end) from touching an entry another delivery finished.
	insertingCondition = "#status = :inserting"
	// uninsertableCondition: only an UNINSERTABLE entry is reopened for a redrive.
	uninsertableCondition = "#status = :uninsertable"
	// finalUpdate and insertedUpdate end an entry (UNINSERTABLE, INSERTED); an UNINSERTABLE end
	// also puts the entry in the failure index.
	finalUpdate        = "SET #status = :status, #updatedAtMs = :now"
	insertedUpdate     = finalUpdate + ", #insertedAtMs = :now"
	uninsertableUpdate = finalUpdate + ", " + failureSet
	// failureSet puts a REJECTED or UNINSERTABLE entry in the sparse failure index (see
	// resources.IndexLedgerByFailure), in the same write that gives it the status.
	failureSet = "#failureKey = :failureKey, #failedAtMs = :now"
)

// Table is the ledger on DynamoDB. A unit's claim spans the ledger, usage and analytics
// tables.
type Table struct {
	DB    *dynamodb.Client
	Table string
	Usage usage.Table
	// Analytics is the analytics table, which a batch claim puts its unit's rows item in (the
	// worker's store only).
	Analytics string
	// Notifications is the notifications table, which a claim puts the notifications it decides
	// in (the worker's store only).
	Notifications string
}

type entryItem struct {
	PK                  string `dynamodbav:"pk"`
	AccountID           string `dynamodbav:"accountId"`
	EventID             string `dynamodbav:"eventId"`
	Status              string `dynamodbav:"status"`
	RowInsertedAtMs     int64  `dynamodbav:"rowInsertedAtMs"`
	ReceivedAtMs        int64  `dynamodbav:"receivedAtMs"`
	Cycle               string `dynamodbav:"cycle"`
	BillingAcceptedAtMs int64  `dynamodbav:"billingAcceptedAtMs,omitempty"`
	Tier                string `dynamodbav:"tier,omitempty"`
	Reason              string `dynamodbav:"reason,omitempty"`
	QuarantineCount     int    `dynamodbav:"quarantineCount,omitempty"`
	CreatedAtMs         int64  `dynamodbav:"createdAtMs"`
	UpdatedAtMs         int64  `dynamodbav:"updatedAtMs"`
	InsertedAtMs        int64  `dynamodbav:"insertedAtMs,omitempty"`
	// FailureKey and FailedAtMs are present only while the entry is REJECTED or UNINSERTABLE:
	// they put it in the failure index.
	FailureKey string `dynamodbav:"failureKey,omitempty"`
	FailedAtMs int64  `dynamodbav:"failedAtMs,omitempty"`
	// MeterRow is set by the claim of an event billed against a counter row: the row's
	// identity, the key of the ledger's sparse meter index.
	MeterRow string `dynamodbav:"meterRow,omitempty"`
	// The archive location and the batch of an event claimed in a batch (see batch.go).
	ArchiveKey    string `dynamodbav:"archiveKey,omitempty"`
	ArchiveOffset int64  `dynamodbav:"archiveOffset,omitempty"`
	ArchiveLength int64  `dynamodbav:"archiveLength,omitempty"`
	Batch         string `dynamodbav:"batch,omitempty"`
	// RowInUnit: the claim put the event's analytics row in its batch's rows item.
	RowInUnit bool `dynamodbav:"rowInUnit,omitempty"`
	// Meters are the values the event moved (see meters.go).
	Meters []MeterValue `dynamodbav:"meters,omitempty"`
}

func (it entryItem) entry() Entry {
	return Entry{
		AccountID: it.AccountID, EventID: it.EventID, Status: Status(it.Status),
		RowInsertedAtMs: it.RowInsertedAtMs, ReceivedAtMs: it.ReceivedAtMs, Cycle: it.Cycle,
		BillingAcceptedAtMs: it.BillingAcceptedAtMs, Tier: plans.Tier(it.Tier), Reason: it.Reason,
		QuarantineCount: it.QuarantineCount, CreatedAtMs: it.CreatedAtMs, UpdatedAtMs: it.UpdatedAtMs,
		InsertedAtMs: it.InsertedAtMs, ArchiveKey: it.ArchiveKey, ArchiveOffset: it.ArchiveOffset,
		ArchiveLength: it.ArchiveLength, Batch: it.Batch, RowInUnit: it.RowInUnit, MeterRow: it.MeterRow, Meters: it.Meters,
	}
}

func (s *Table) key(accountID, eventID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(Key(accountID, eventID))}
}

// Get reads an entry with a strongly consistent read, resolved (Resolve): an INSERTING entry of
// a batch recorded done reads INSERTED.
func (s *Table) Get(ctx context.Context, accountID, eventID string) (Entry, error) {
	e, err := s.GetStored(ctx, accountID, eventID)
	if err != nil || e.Status != Inserting || e.Batch == "" {
		return e, err
	}
	done, at, err := s.BatchDone(ctx, accountID, e.Batch)
	if err != nil {
		return Entry{}, err
	}
	return Resolve(e, done, at), nil
}

// GetStored reads an entry as stored, with a strongly consistent read.
func (s *Table) GetStored(ctx context.Context, accountID, eventID string) (Entry, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.Table),
		Key:            s.key(accountID, eventID),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Entry{}, fmt.Errorf("read ledger %s: %w", eventID, err)
	}
	if out.Item == nil {
		return Entry{}, ErrNotFound
	}
	var it entryItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return Entry{}, fmt.Errorf("decode ledger %s: %w", eventID, err)
	}
	return it.entry(), nil
}

// Quarantine counts one refused analytics row and returns the new count.
func (s *Table) Quarantine(ctx context.Context, accountID, eventID, reason string, nowMs int64) (int, error) {
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.Table),
		Key:                      s.key(accountID, eventID),
		UpdateExpression:         aws.String(quarantineUpdate),
		ConditionExpression:      aws.String(insertingCondition),
		ExpressionAttributeNames: dynamo.Names(quarantineUpdate, insertingCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":one": dynamo.N(1), ":reason": dynamo.S(reason), ":now": dynamo.N(nowMs), ":inserting": dynamo.S(string(Inserting)),
		},
		ReturnValues: types.ReturnValueUpdatedNew,
	})
	if dynamo.IsConditionFailed(err) {
		return 0, ErrNotInserting
	}
	if err != nil {
		return 0, fmt.Errorf("quarantine event %s: %w", eventID, err)
	}
	return int(dynamo.Int(out.Attributes, "quarantineCount")), nil
}

// MarkUninsertable ends an INSERTING entry as UNINSERTABLE: its payload is archived, its row
// cannot be written, and an operator re-drives it once the cause is fixed.
func (s *Table) MarkUninsertable(ctx context.Context, accountID, eventID string, nowMs int64) error {
	return s.setFinal(ctx, accountID, eventID, Uninsertable, insertingCondition, nowMs)
}

// MarkInserted ends a billed INSERTING entry as INSERTED. It is idempotent: an entry some other
// delivery already marked counts as done.
func (s *Table) MarkInserted(ctx context.Context, accountID, eventID string, nowMs int64) error {
	err := s.setFinal(ctx, accountID, eventID, Inserted, markCondition, nowMs)
	if errors.Is(err, ErrNotInserting) {
		e, gerr := s.Get(ctx, accountID, eventID)
		if gerr != nil {
			return gerr
		}
		if e.Status == Inserted {
			return nil
		}
	}
	return err
}

func (s *Table) setFinal(ctx context.Context, accountID, eventID string, status Status, cond string, nowMs int64) error {
	update := finalUpdate
	values := map[string]types.AttributeValue{
		":status": dynamo.S(string(status)), ":now": dynamo.N(nowMs), ":inserting": dynamo.S(string(Inserting)),
	}
	switch status {
	case Inserted:
		update = insertedUpdate
	case Uninsertable:
		update = uninsertableUpdate
		values[":failureKey"] = dynamo.S(FailureKey(accountID, Uninsertable))
	}
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.Table),
		Key:                       s.key(accountID, eventID),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  dynamo.Names(update, cond),
		ExpressionAttributeValues: values,
	})
	if dynamo.IsConditionFailed(err) {
		return ErrNotInserting
	}
	if err != nil {
		return fmt.Errorf("mark event %s %s: %w", eventID, status, err)
	}
	return nil
}

// Reopen puts an UNINSERTABLE entry back to INSERTING with its quarantine count cleared, so a
// redelivery stores it again (it stays billed: the scenario table never bills it twice).
func (s *Table) Reopen(ctx context.Context, accountID, eventID string, nowMs int64) error {
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.Table),
		Key:                      s.key(accountID, eventID),
		UpdateExpression:         aws.String(reopenUpdate),
		ConditionExpression:      aws.String(uninsertableCondition),
		ExpressionAttributeNames: dynamo.Names(reopenUpdate, uninsertableCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":inserting": dynamo.S(string(Inserting)), ":uninsertable": dynamo.S(string(Uninsertable)), ":now": dynamo.N(nowMs),
			":zero": dynamo.N(0), ":noBatch": dynamo.S(""),
		},
	})
	if dynamo.IsConditionFailed(err) {
		return fmt.Errorf("reopen event %s: it is not UNINSERTABLE", eventID)
	}
	if err != nil {
		return fmt.Errorf("reopen event %s: %w", eventID, err)
	}
	return nil
}

// maxBatchGetKeys is DynamoDB's BatchGetItem limit; maxUnprocessedRounds bounds the rounds of
// one page, re-reading the keys DynamoDB left unprocessed under load.
const (
	maxBatchGetKeys      = 100
	maxUnprocessedRounds = 5
)

// Known reports which of an account's event ids already have a ledger entry, with strongly
// consistent reads.
func (s *Table) Known(ctx context.Context, accountID string, eventIDs []string) (map[string]bool, error) {
	known := map[string]bool{}
	for start := 0; start < len(eventIDs); start += maxBatchGetKeys {
		ids := eventIDs[start:min(start+maxBatchGetKeys, len(eventIDs))]
		keys := make([]map[string]types.AttributeValue, len(ids))
		for i, id := range ids {
			keys[i] = s.key(accountID, id)
		}
		request := map[string]types.KeysAndAttributes{s.Table: {
			Keys: keys, ConsistentRead: aws.Bool(true),
			ProjectionExpression: aws.String("#eventId"), ExpressionAttributeNames: dynamo.Names("#eventId"),
		}}
		_, err := retry.Do(ctx, retry.Contended.WithTries(maxUnprocessedRounds), func(ctx context.Context, _ retry.Lap) (struct{}, error) {
			out, err := s.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: request})
			if err != nil {
				return struct{}{}, fmt.Errorf("read ledger: %w", err)
			}
			for _, item := range out.Responses[s.Table] {
				known[dynamo.Str(item, "eventId")] = true
			}
			if request = out.UnprocessedKeys; len(request) > 0 {
				return struct{}{}, retry.Again(errUnprocessed)
			}
			return struct{}{}, nil
		})
		if errors.Is(err, retry.ErrExhausted) {
			return nil, fmt.Errorf("read ledger: keys still unprocessed after %d rounds", maxUnprocessedRounds)
		}
		if err != nil {
			return nil, err
		}
	}
	return known, nil
}

// errUnprocessed is a BatchGetItem answer that left keys unprocessed (DynamoDB's own throttle).
var errUnprocessed = errors.New("keys left unprocessed")
