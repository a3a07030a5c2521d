package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// Units: the events of one account that the worker claims, checkpoints and meters together (a
// packed message, or several messages of one invocation; the worker calls the group a unit and
// the ledger, by its record, a batch).
//
// One TransactWriteItems puts every unclaimed event's entry — each conditional on not existing,
// the claim — either already checkpointed (INSERTING with billingAcceptedAtMs, its archive
// location, its batch and the values it moved) or REJECTED with its reason, moves each meter the
// admitted events match once, with its counter row's report mark (meters.go: PlanUnit), puts the
// markers of the distinct values counted first and the rollup writes, and puts the admitted
// events' analytics rows as one item of the analytics table (RowsItem). Money moves with its
// receipts in one write: the claim and the checkpoint are the same item. A cancelled transaction
// is resolved from durable state (ReadBatch: the entries, the budget rows, the marks and the
// markers, strongly consistent), and the next lap claims exactly the events that are still
// unclaimed, admitting them in unit order while they fit.
//
// When every event of the unit is finished, one item, the batch's, records it (MarkBatchDone):
// the batch's INSERTING entries are INSERTED from then on (Get resolves them), and a redelivery
// of the whole unit acks after reading it.

// ErrCancelled is what the store returns when a claim's transaction was cancelled: one of its
// conditions did not hold, or a conflicting transaction cancelled it. The store does not say
// which; the next lap's read of durable state does.
var ErrCancelled = errors.New("claim transaction cancelled")

// ClaimedAlone reports an entry that an earlier release's per-event worker claimed on its own and
// never billed: INSERTING, without a checkpoint, in no batch. No claim of this release leaves
// such an entry (a unit's entries are checkpointed or REJECTED when they are put), so a unit
// meeting one takes it over (BatchClaim.TakeOver).
func ClaimedAlone(e Entry) bool { return e.Status == Inserting && !e.Billed() && e.Batch == "" }

// BatchClaim is one lap's claim of a batch.
type BatchClaim struct {
	AccountID string
	// Batch is the batch's id (derived from the packed message's bytes).
	Batch        string
	Cycle        string
	ReceivedAtMs int64
	NowMs        int64
	Billing      Billing
	// Admit are the entries claimed billed, each with its archive location and the values it
	// moves; Reject those claimed REJECTED, each with its reason.
	Admit  []Entry
	Reject []Entry
	// TakeOver are the events of Admit and Reject whose entry an earlier release claimed alone
	// and never billed (ClaimedAlone): each is put over that entry, conditional on its being
	// still exactly that (INSERTING, no checkpoint), and keeps the instants that claim fixed
	// (RowInsertedAtMs, CreatedAtMs). Every other entry is put conditional on its absence.
	TakeOver map[string]bool
	// Moves are the counter writes (with their marks and the unit's records) of the features
	// the admitted entries move; Markers the distinct values they count first (PlanUnit).
	Moves   []Move
	Markers []Marker
	// Rows is the unit's rows item: the analytics rows of admitted events, put in the same
	// transaction (PackRows). Each entry whose row it holds is claimed with RowInUnit; an event
	// admitted without one (a row the sink's schema refuses, rows past the item's size) gets a
	// row of its own after the claim.
	Rows RowsItem
	// Rollups are the writes of the usage query's rollup items for what the admitted entries
	// move (package rollup), put in the same transaction.
	Rollups []types.TransactWriteItem
	// Notes are the notifications the claim decides, each put conditional on its absence, and
	// Alerted the alerts it records on budget rows it moves nothing on (alerts.go).
	Notes   []notify.Notification
	Alerted []Alerted
}

// Items is how many items the claim's transaction holds.
func (c BatchClaim) Items() int {
	n := UnitPlan{Admit: c.Admit, Reject: c.Reject, Moves: c.Moves, Markers: c.Markers, Notes: c.Notes, Alerted: c.Alerted}.Items() + len(c.Rollups)
	if c.Rows.item != nil {
		n++
	}
	return n
}

// RowsItem is a unit's analytics rows item, ready to be put (analytics.UnitItem): possibly
// holding only the first of the rows it was built from, possibly none.
type RowsItem struct {
	item map[string]types.AttributeValue
	held map[string]bool
	// from is the events it was built from, in order.
	from []string
}

// PackRows builds unit's rows item from rows (in unit order). It is built ahead of the unit's
// read when it can be, so that nothing but the plan lies between the read and the claim.
func PackRows(unit string, rows []analytics.Row) (RowsItem, error) {
	ri := RowsItem{from: make([]string, len(rows))}
	for i, r := range rows {
		ri.from[i] = r.EventID
	}
	item, n, err := analytics.UnitItem(unit, rows)
	if err != nil || n == 0 {
		return ri, err
	}
	ri.item, ri.held = item, make(map[string]bool, n)
	for _, r := range rows[:n] {
		ri.held[r.EventID] = true
	}
	return ri, nil
}

// Holds reports whether the item holds the event's row.
func (ri RowsItem) Holds(eventID string) bool { return ri.held[eventID] }

// BuiltFrom reports whether the item was built from exactly these events' rows, in this order.
func (ri RowsItem) BuiltFrom(eventIDs []string) bool { return slices.Equal(ri.from, eventIDs) }

// HasRoomForRows reports whether the claim's transaction has an item to spare for its rows item:
// not for a unit of 98 events, packed before units were bounded at event.MaxPackedEvents = 97.
// The rows item's key is the unit and the claim's instant: two claims of one unit are never both
// committed (each claims every event the unit had unclaimed, conditional on its having no entry),
// so its plain put never meets an item it would replace.
func (c BatchClaim) HasRoomForRows() bool {
	c.Rows = RowsItem{}
	return c.Items()+1 <= maxTransactItems
}

// BatchState is the durable state of a batch's events, read strongly consistent.
type BatchState struct {
	// Entries are the events that have an entry, by event id, as stored (not resolved).
	Entries map[string]Entry
	// Done: the batch's item is present.
	Done bool
	// DoneAtMs is when the batch was recorded finished.
	DoneAtMs int64
	// Unit is what the claim plans from: the budget rows, the marks, the distinct values.
	Unit UnitState
	// Extra are the items of BatchRead.Extra that exist, by table.
	Extra map[string][]map[string]types.AttributeValue
}

// BatchRead is what a unit's claim reads before it plans, in one strongly consistent read.
type BatchRead struct {
	AccountID string
	Batch     string
	Cycle     string
	EventIDs  []string
	// Features are the features the unit may move.
	Features []FeatureRead
	// Distinct are the distinct values whose markers are looked up.
	Distinct []Marker
	// Extra are other items the claim plans from (the rollup items of MAX and LATEST meters).
	Extra []ItemKey
}

// FeatureRead is one feature a unit may move: the counter row whose report mark the claim
// checks, and whether the budget row is read (a cap, or a MAX or LATEST figure to beat).
type FeatureRead struct {
	Feature string
	Row     string
	Budget  bool
}

// ItemKey is an item of some table.
type ItemKey struct {
	Table string
	Key   map[string]types.AttributeValue
}

// batchKey is the ledger key of a batch's item. Account ids never start with '#', so it cannot
// be an event's key.
func batchKey(accountID, batch string) string { return batchKeyPrefix + accountID + "#" + batch }

const batchKeyPrefix = "#batch#"

type batchItem struct {
	PK        string `dynamodbav:"pk"`
	AccountID string `dynamodbav:"accountId"`
	Batch     string `dynamodbav:"batch"`
	DoneAtMs  int64  `dynamodbav:"doneAtMs"`
}

// MeterRowSK is the counter row a batch's billing moves: the budget row for capped billing, one
// shard chosen by the batch's id for counted billing, none otherwise.
func MeterRowSK(b Billing, batch string) string {
	switch b.Kind {
	case BillCapped:
		return usage.BudgetSK
	case BillCounted:
		return usage.ShardSK(usage.ShardFor(batch))
	}
	return ""
}

// WriteBatchClaim writes one lap's claim in one TransactWriteItems. A cancelled transaction is
// ErrCancelled: which condition failed, only ReadBatch says.
func (s *Table) WriteBatchClaim(ctx context.Context, c BatchClaim) error {
	items := make([]types.TransactWriteItem, 0, c.Items())
	rowSK := MeterRowSK(c.Billing, c.Batch)
	if c.Rows.item != nil && s.Analytics == "" {
		return fmt.Errorf("claim batch %s: this store has no analytics table to put the rows in", c.Batch)
	}
	admitted := make(map[string]bool, len(c.Admit))
	for _, e := range c.Admit {
		admitted[e.EventID] = true
	}
	for id := range c.Rows.held {
		if !admitted[id] {
			return fmt.Errorf("claim batch %s: the rows item holds the row of %s, which this claim does not admit", c.Batch, id)
		}
		if c.TakeOver[id] {
			return fmt.Errorf("claim batch %s: the rows item holds the row of %s, an entry taken over, whose row is its own", c.Batch, id)
		}
	}
	for _, e := range c.Admit {
		it := entryItem{
			PK: Key(c.AccountID, e.EventID), AccountID: c.AccountID, EventID: e.EventID, Status: string(Inserting),
			RowInsertedAtMs: c.NowMs, ReceivedAtMs: e.ReceivedAtMs, Cycle: c.Cycle, BillingAcceptedAtMs: c.NowMs,
			Tier: string(c.Billing.Tier), CreatedAtMs: c.NowMs, UpdatedAtMs: c.NowMs,
			ArchiveKey: e.ArchiveKey, ArchiveOffset: e.ArchiveOffset, ArchiveLength: e.ArchiveLength, Batch: c.Batch,
			RowInUnit: c.Rows.Holds(e.EventID), Meters: e.Meters,
		}
		if rowSK != "" {
			it.MeterRow = usage.MeterRow(c.AccountID, plans.FeatureEvents, c.Cycle, rowSK)
		}
		put, err := s.claimPut(c, e, it)
		if err != nil {
			return err
		}
		items = append(items, put)
	}
	for _, e := range c.Reject {
		if e.Reason == "" {
			return fmt.Errorf("claim batch %s: event %s is rejected without a reason", c.Batch, e.EventID)
		}
		put, err := s.claimPut(c, e, entryItem{
			PK: Key(c.AccountID, e.EventID), AccountID: c.AccountID, EventID: e.EventID, Status: string(Rejected),
			RowInsertedAtMs: c.NowMs, ReceivedAtMs: e.ReceivedAtMs, Cycle: c.Cycle, Reason: e.Reason,
			CreatedAtMs: c.NowMs, UpdatedAtMs: c.NowMs, Batch: c.Batch,
			// Born REJECTED, so listed in the failure index, where operators look for them.
			FailureKey: FailureKey(c.AccountID, Rejected), FailedAtMs: c.NowMs,
		})
		if err != nil {
			return err
		}
		items = append(items, put)
	}
	var recs []usage.Record
	for _, m := range c.Moves {
		switch {
		case m.Set:
			items = append(items, s.Usage.SetValue(c.AccountID, m.Feature, c.Cycle, m.Value, m.Order, m.Rev, c.NowMs))
		case m.Add > 0 && m.Capped:
			items = append(items, s.Usage.ConsumeCappedAlerted(c.AccountID, m.Feature, c.Cycle, m.Add, m.Limit, m.Alerts, c.NowMs))
		case m.Add > 0:
			items = append(items, s.Usage.AddToShard(c.AccountID, m.Feature, c.Cycle, usage.ShardFor(c.Batch), m.Add, c.NowMs))
		}
		if m.Writes() {
			items = append(items, s.Usage.MarkedItems(c.AccountID, m.Feature, c.Cycle, m.Row, m.MarkPresent, c.NowMs))
		}
		if m.Record != nil {
			r := *m.Record
			r.Feature = m.Feature
			recs = append(recs, r)
		}
	}
	if len(recs) > 0 {
		put, err := s.Usage.RecordPut(c.AccountID, c.Cycle, recs)
		if err != nil {
			return fmt.Errorf("claim batch %s: %w", c.Batch, err)
		}
		items = append(items, put)
	}
	if len(c.Notes)+len(c.Alerted) > 0 && s.Notifications == "" {
		return fmt.Errorf("claim batch %s: this store has no notifications table to put the claim's %d notifications in", c.Batch, len(c.Notes))
	}
	for _, a := range c.Alerted {
		items = append(items, s.Usage.RecordAlerts(c.AccountID, a.Feature, c.Cycle, a.Keys, c.NowMs))
	}
	for _, n := range c.Notes {
		items = append(items, notify.Put(s.Notifications, n))
	}
	for _, mk := range c.Markers {
		items = append(items, s.Usage.MarkerPut(c.AccountID, mk.Feature, c.Cycle, mk.Hash, c.Batch, c.NowMs))
	}
	if c.Rows.item != nil {
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.Analytics), Item: c.Rows.item}})
	}
	items = append(items, c.Rollups...)
	if len(items) == 0 {
		return nil
	}
	if len(items) > maxTransactItems {
		return fmt.Errorf("claim batch %s: %d items; a transaction takes at most %d", c.Batch, len(items), maxTransactItems)
	}
	_, err := s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if dynamo.IsTransactionCanceled(err) {
		return fmt.Errorf("claim batch %s: %w", c.Batch, ErrCancelled)
	}
	if err != nil {
		return fmt.Errorf("claim batch %s: %w", c.Batch, err)
	}
	return nil
}

// maxTransactItems is DynamoDB's bound on one TransactWriteItems.
const maxTransactItems = 100

// claimPut is the put of one entry of a claim: conditional on the entry's absence, or, for an
// entry an earlier release claimed alone (c.TakeOver), on its being still unbilled and
// INSERTING, with the instants that claim fixed.
func (s *Table) claimPut(c BatchClaim, e Entry, it entryItem) (types.TransactWriteItem, error) {
	cond, values := claimCondition, map[string]types.AttributeValue(nil)
	if c.TakeOver[e.EventID] {
		cond, values = takeOverCondition, map[string]types.AttributeValue{":inserting": dynamo.S(string(Inserting))}
		it.RowInsertedAtMs, it.CreatedAtMs = e.RowInsertedAtMs, e.CreatedAtMs
	}
	item, err := attributevalue.MarshalMap(it)
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("encode the entry of %s: %w", it.EventID, err)
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.Table), Item: item,
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  dynamo.Names(cond),
		ExpressionAttributeValues: values,
	}}, nil
}

// ReadBatch reads a batch's durable state in as few round trips as BatchGetItem allows: the
// entries of the unit's events and the batch's item from the ledger; per feature the unit may
// move, its budget row and its counter row's report mark; the markers of its distinct values;
// and the extra items asked for.
func (s *Table) ReadBatch(ctx context.Context, r BatchRead) (BatchState, error) {
	accountID, batch := r.AccountID, r.Batch
	keys := []ItemKey{{s.Table, map[string]types.AttributeValue{"pk": dynamo.S(batchKey(accountID, batch))}}}
	for _, id := range r.EventIDs {
		keys = append(keys, ItemKey{s.Table, s.key(accountID, id)})
	}
	feature := map[string]string{} // usage partition → feature
	for _, f := range r.Features {
		feature[usage.PartitionKey(accountID, f.Feature, r.Cycle)] = f.Feature
		if f.Budget {
			keys = append(keys, ItemKey{s.Usage.Name, usage.BudgetKey(accountID, f.Feature, r.Cycle)})
		}
		if f.Row != "" {
			keys = append(keys, ItemKey{s.Usage.Name, usage.MarkKey(accountID, f.Feature, r.Cycle, f.Row)})
		}
	}
	for _, mk := range r.Distinct {
		feature[usage.DistinctPartition(accountID, mk.Feature, r.Cycle)] = mk.Feature
		keys = append(keys, ItemKey{s.Usage.Name, usage.MarkerKey(accountID, mk.Feature, r.Cycle, mk.Hash)})
	}
	keys = append(keys, r.Extra...)
	st := BatchState{Entries: map[string]Entry{}, Unit: UnitState{Rows: map[string]usage.Row{}, Marked: map[string]bool{}, Distinct: map[string]bool{}}}
	for _, f := range r.Features {
		if f.Budget {
			st.Unit.Rows[f.Feature] = usage.RowOf(nil) // absent until found
		}
	}
	for start := 0; start < len(keys); start += maxBatchGetKeys {
		request := map[string]types.KeysAndAttributes{}
		for _, k := range keys[start:min(start+maxBatchGetKeys, len(keys))] {
			ka := request[k.Table]
			ka.Keys, ka.ConsistentRead = append(ka.Keys, k.Key), aws.Bool(true)
			request[k.Table] = ka
		}
		_, err := retry.Do(ctx, retry.Contended.WithTries(maxUnprocessedRounds), func(ctx context.Context, _ retry.Lap) (struct{}, error) {
			out, err := s.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: request})
			if err != nil {
				return struct{}{}, fmt.Errorf("read batch %s: %w", batch, err)
			}
			for table, items := range out.Responses {
				switch table {
				case s.Table:
					for _, item := range items {
						if dynamo.Str(item, "pk") == batchKey(accountID, batch) {
							st.Done, st.DoneAtMs = true, dynamo.Int(item, "doneAtMs")
							continue
						}
						var it entryItem
						if err := attributevalue.UnmarshalMap(item, &it); err != nil {
							return struct{}{}, fmt.Errorf("decode ledger %s: %w", dynamo.Str(item, "pk"), err)
						}
						st.Entries[it.EventID] = it.entry()
					}
				case s.Usage.Name:
					for _, item := range items {
						f := feature[dynamo.Str(item, "pk")]
						if hash, ok := usage.IsMarker(item); ok {
							st.Unit.Distinct[DistinctKey(f, hash)] = true
						} else if usage.IsMark(item) {
							st.Unit.Marked[f] = usage.Marks(item)
						} else {
							st.Unit.Rows[f] = usage.RowOf(item)
						}
					}
				}
				if table != s.Table && table != s.Usage.Name {
					if st.Extra == nil {
						st.Extra = map[string][]map[string]types.AttributeValue{}
					}
					st.Extra[table] = append(st.Extra[table], items...)
				}
			}
			if request = out.UnprocessedKeys; len(request) > 0 {
				return struct{}{}, retry.Again(errUnprocessed)
			}
			return struct{}{}, nil
		})
		if errors.Is(err, retry.ErrExhausted) {
			return BatchState{}, fmt.Errorf("read batch %s: keys still unprocessed after %d rounds", batch, maxUnprocessedRounds)
		}
		if err != nil {
			return BatchState{}, err
		}
	}
	return st, nil
}

// MarkBatchDone records that every event of the batch's message is finished: from then on the
// batch's INSERTING entries read as INSERTED. It is conditional on the item not existing, so the
// first record's instant stays; a record already there counts as done.
func (s *Table) MarkBatchDone(ctx context.Context, accountID, batch string, nowMs int64) error {
	item, err := attributevalue.MarshalMap(batchItem{PK: batchKey(accountID, batch), AccountID: accountID, Batch: batch, DoneAtMs: nowMs})
	if err != nil {
		return err
	}
	if _, err := dynamo.PutNew(ctx, s.DB, s.Table, item); err != nil {
		return fmt.Errorf("mark batch %s done: %w", batch, err)
	}
	return nil
}

// BatchDone reads whether a batch's item is present (strongly consistent), and its instant.
func (s *Table) BatchDone(ctx context.Context, accountID, batch string) (bool, int64, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: map[string]types.AttributeValue{"pk": dynamo.S(batchKey(accountID, batch))},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return false, 0, fmt.Errorf("read batch %s: %w", batch, err)
	}
	return out.Item != nil, dynamo.Int(out.Item, "doneAtMs"), nil
}

// Resolve is an entry as its readers see it: an INSERTING entry of a batch recorded done is
// INSERTED, at the batch's instant.
func Resolve(e Entry, done bool, doneAtMs int64) Entry {
	if e.Status == Inserting && e.Batch != "" && done && e.Billed() {
		e.Status, e.InsertedAtMs = Inserted, doneAtMs
	}
	return e
}
