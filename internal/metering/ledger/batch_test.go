package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// batchClaim is one lap's claim of a batch of ids, all admitted against a capped budget.
func batchClaim(batch string, ids ...string) ledger.BatchClaim {
	c := ledger.BatchClaim{AccountID: acct, Batch: batch, Cycle: cycle, ReceivedAtMs: nowMs, NowMs: nowMs, Billing: capped(10)}
	for i, id := range ids {
		c.Admit = append(c.Admit, ledger.Entry{EventID: id, ArchiveKey: "events/" + batch + ".jsonl", ArchiveOffset: int64(i), ArchiveLength: 1})
	}
	c.Moves = []ledger.Move{{Feature: plans.FeatureEvents, Meter: meter.EventsMeter, Aggregation: meter.Count, Row: usage.BudgetSK,
		Add: int64(len(ids)), Capped: true, Limit: plans.Max(10)}}
	return c
}

// readEvents reads a batch's entries and its events budget row.
func readEvents(ctx context.Context, s *ledger.Table, batch string, ids ...string) (ledger.BatchState, error) {
	return s.ReadBatch(ctx, ledger.BatchRead{AccountID: acct, Batch: batch, Cycle: cycle, EventIDs: ids,
		Features: []ledger.FeatureRead{{Feature: plans.FeatureEvents, Row: usage.BudgetSK, Budget: true}}})
}

// A unit's claim is one transaction, and its conditions are sent exactly as written: each
// entry's put on the entry's absence (the claim), the meter's cap (a fresh row passes only when
// the admitted events fit), and the budget row's report mark checked. Money moves with its
// receipts: the meter and the checkpointed entries commit together or not at all.
func TestBatchClaim_OneTransactionSendsItsConditionsVerbatim(t *testing.T) {
	env := testenv.New(t)
	w := &wire{}
	s := store(env, env.ClientsWith(t, w.option).DynamoDB)
	marked(t, s)
	w.calls = nil
	c := batchClaim("b0", "evt_1", "evt_2")
	c.Moves[0].MarkPresent = true
	if err := s.WriteBatchClaim(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	txs := w.ops("TransactWriteItems")
	if len(txs) != 1 || len(w.calls) != 1 {
		t.Fatalf("%d TransactWriteItems in %d calls, want one call: the entries and the meter are one write", len(txs), len(w.calls))
	}
	items := txs[0].params.(*dynamodb.TransactWriteItemsInput).TransactItems
	if len(items) != 4 || items[0].Put == nil || items[1].Put == nil || items[2].Update == nil || items[3].ConditionCheck == nil {
		t.Fatalf("the claim has %d items; want the two entries' puts, the meter's update and the mark's check", len(items))
	}
	for _, it := range items[:2] {
		if got := aws.ToString(it.Put.ConditionExpression); got != "attribute_not_exists(#pk)" {
			t.Errorf("an entry's condition is %q, want the claim's attribute_not_exists(#pk)", got)
		}
		if _, billed := it.Put.Item["billingAcceptedAtMs"]; !billed {
			t.Error("an admitted entry is put without its checkpoint")
		}
	}
	if got, want := aws.ToString(items[2].Update.ConditionExpression), "attribute_not_exists(#committed) OR #committed <= :room"; got != want {
		t.Errorf("the meter's condition is %q, want %q", got, want)
	}
	// committed ≤ limit − amount: 10 − 2.
	if room, ok := items[2].Update.ExpressionAttributeValues[":room"].(*types.AttributeValueMemberN); !ok || room.Value != "8" {
		t.Errorf("the meter's room is %v, want 8 (the limit less the two admitted)", items[2].Update.ExpressionAttributeValues[":room"])
	}
	if got := eventsUsed(t, s); got != 2 {
		t.Errorf("the meter is %d, want 2", got)
	}
}

// A unit's claim never overwrites an entry another unit claimed (the same event in an earlier
// message): the whole transaction is cancelled, nothing is billed, and the next lap re-plans
// from a fresh read. Without the claim condition the unit would put its own checkpointed entry
// over the other claim and move the meter for it a second time.
func TestGuard_AClaimOfAnEventAnotherUnitClaimed_IsCancelled(t *testing.T) {
	testenv.NeedsGuard(t, "ledger.claim.first-writer", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := store(env, db), context.Background()
		if err := s.WriteBatchClaim(ctx, batchClaim("b0", "evt_b1")); err != nil {
			return err
		}
		err := s.WriteBatchClaim(ctx, batchClaim("b1", "evt_b1", "evt_b2"))
		if !errors.Is(err, ledger.ErrCancelled) {
			return fmt.Errorf("a unit claiming an event another unit claimed: %v; want the transaction cancelled", err)
		}
		st, err := readEvents(ctx, s, "b1", "evt_b1", "evt_b2")
		if err != nil {
			return err
		}
		if _, ok := st.Entries["evt_b2"]; ok || st.Unit.Rows[plans.FeatureEvents].Committed != 1 || st.Entries["evt_b1"].Batch != "b0" {
			return fmt.Errorf("a cancelled claim left evt_b2 claimed (%v), the meter at %d, evt_b1 in batch %q", ok, st.Unit.Rows[plans.FeatureEvents].Committed, st.Entries["evt_b1"].Batch)
		}
		return nil
	})
}

// At an exhausted limit a claim planned from a stale read is cancelled by the budget row's own
// condition: nothing is claimed and the meter stays at the limit; the read that plans the next
// lap is strongly consistent and shows the budget row full.
func TestBatchClaim_PastTheLimit_CancelledByTheBudgetRow(t *testing.T) {
	env := testenv.New(t)
	w := &wire{}
	s := store(env, env.ClientsWith(t, w.option).DynamoDB)
	ctx := context.Background()
	first := batchClaim("b0", "evt_1")
	first.Billing, first.Moves[0].Limit = capped(1), plans.Max(1)
	if err := s.WriteBatchClaim(ctx, first); err != nil {
		t.Fatal(err)
	}
	stale := batchClaim("b1", "evt_2")
	stale.Billing, stale.Moves[0].Limit, stale.Moves[0].MarkPresent = capped(1), plans.Max(1), true
	if err := s.WriteBatchClaim(ctx, stale); !errors.Is(err, ledger.ErrCancelled) {
		t.Fatalf("a claim past the limit: %v; want it cancelled", err)
	}
	w.calls = nil
	st, err := readEvents(ctx, s, "b1", "evt_2")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Entries["evt_2"]; ok || st.Unit.Rows[plans.FeatureEvents].Committed != 1 || eventsUsed(t, s) != 1 {
		t.Errorf("after the cancelled claim: evt_2 claimed %v, committed %d, meter %d; want nothing moved", ok, st.Unit.Rows[plans.FeatureEvents].Committed, eventsUsed(t, s))
	}
	for _, c := range w.ops("BatchGetItem") {
		for _, ka := range c.params.(*dynamodb.BatchGetItemInput).RequestItems {
			if !aws.ToBool(ka.ConsistentRead) {
				t.Error("the unit's read is not strongly consistent")
			}
		}
	}
}

// claimedAlone leaves an entry as an earlier release's per-event worker left it when it claimed
// the event and died before billing it.
func claimedAlone(t *testing.T, env *testenv.Env, db *dynamodb.Client, id string) {
	t.Helper()
	err := testenv.PutClaimedAlone(context.Background(), db, env.Names.Table(resources.TableLedger), testenv.ClaimedAlone{
		AccountID: acct, EventID: id, Cycle: cycle, RowInsertedAtMs: nowMs - 1000, ReceivedAtMs: nowMs - 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// takeOver is a claim of one event whose entry an earlier release claimed alone.
func takeOver(batch, id string, rejected bool) ledger.BatchClaim {
	c := batchClaim(batch, id)
	c.TakeOver = map[string]bool{id: true}
	c.Admit[0].RowInsertedAtMs, c.Admit[0].CreatedAtMs = nowMs-1000, nowMs-1000
	if rejected {
		c.Reject, c.Admit, c.Moves = c.Admit, nil, nil
		c.Reject[0].Reason = "monthly limit reached"
	}
	return c
}

// An entry an earlier release claimed alone and never billed is taken over by a unit's claim:
// put checkpointed over it, at the instants its first claim fixed, and billed once. A second
// unit taking it over from the same stale read is cancelled by the entry's checkpoint; without
// that clause it would put its entry over the first and bill the event again.
func TestGuard_ATakeOverOfAnEntryBilledSince_IsCancelled(t *testing.T) {
	testenv.NeedsGuard(t, "ledger.takeover.unbilled", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := store(env, db), context.Background()
		claimedAlone(t, env, db, "evt_old")
		if err := s.WriteBatchClaim(ctx, takeOver("b0", "evt_old", false)); err != nil {
			return fmt.Errorf("the take-over: %w", err)
		}
		e, err := s.GetStored(ctx, acct, "evt_old")
		if err != nil {
			return err
		}
		if !e.Billed() || e.Batch != "b0" || e.RowInsertedAtMs != nowMs-1000 || e.CreatedAtMs != nowMs-1000 {
			return fmt.Errorf("the entry taken over: %+v; want billed in b0 at the instants its first claim fixed", e)
		}
		if err := s.WriteBatchClaim(ctx, takeOver("b1", "evt_old", false)); !errors.Is(err, ledger.ErrCancelled) {
			return fmt.Errorf("a second take-over of an entry billed since: %v; want it cancelled", err)
		}
		if got := eventsUsed(t, s); got != 1 {
			return fmt.Errorf("the meter is %d after two take-overs of one event; want 1", got)
		}
		return nil
	})
}

// A take-over from a stale read never turns an entry another unit has rejected (taken over at
// the limit) into an admitted one: the entry is no longer INSERTING, and the claim is cancelled.
func TestGuard_ATakeOverOfAnEntryRejectedSince_IsCancelled(t *testing.T) {
	testenv.NeedsGuard(t, "ledger.takeover.inserting", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := store(env, db), context.Background()
		claimedAlone(t, env, db, "evt_old")
		if err := s.WriteBatchClaim(ctx, takeOver("b0", "evt_old", true)); err != nil {
			return fmt.Errorf("the take-over that rejects it: %w", err)
		}
		if err := s.WriteBatchClaim(ctx, takeOver("b1", "evt_old", false)); !errors.Is(err, ledger.ErrCancelled) {
			return fmt.Errorf("admitting an entry rejected since: %v; want it cancelled", err)
		}
		e, err := s.GetStored(ctx, acct, "evt_old")
		if err != nil {
			return err
		}
		if e.Status != ledger.Rejected || e.Billed() || eventsUsed(t, s) != 0 {
			return fmt.Errorf("the rejected entry became %s, billed %v, meter %d", e.Status, e.Billed(), eventsUsed(t, s))
		}
		return nil
	})
}

// A take-over's row is its own, written after the claim at the instant its first claim fixed,
// never in the unit's rows item: a rows item holding it is refused before anything is written.
func TestBatchClaim_ATakenOverEntrysRowIsNotInTheRowsItem(t *testing.T) {
	env := testenv.New(t)
	s, ctx := store(env, env.Clients.DynamoDB), context.Background()
	s.Analytics = env.Names.Table(resources.TableAnalytics)
	claimedAlone(t, env, env.Clients.DynamoDB, "evt_old")
	c := takeOver("b0", "evt_old", false)
	rows, err := ledger.PackRows("b0", []analytics.Row{{AccountID: acct, EventID: "evt_old", Type: "t", Source: "/s", RowInsertedAtMs: nowMs, Cycle: cycle}})
	if err != nil {
		t.Fatal(err)
	}
	c.Rows = rows
	if err := s.WriteBatchClaim(ctx, c); err == nil || errors.Is(err, ledger.ErrCancelled) {
		t.Fatalf("a rows item holding a taken-over entry's row: %v; want it refused", err)
	}
	if e, err := s.GetStored(ctx, acct, "evt_old"); err != nil || e.Billed() {
		t.Fatalf("the refused claim billed evt_old: %+v %v", e, err)
	}
}

// A batch is recorded done once: a redelivery that finishes it again keeps the first instant,
// which its entries' readers have already been shown as the moment they were INSERTED.
func TestGuard_ABatchIsRecordedDoneOnce_ItsInstantStays(t *testing.T) {
	testenv.NeedsGuard(t, "ledger.batch-done.first", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := store(env, db), context.Background()
		if err := s.MarkBatchDone(ctx, acct, "b2", nowMs); err != nil {
			return err
		}
		if err := s.MarkBatchDone(ctx, acct, "b2", nowMs+5); err != nil {
			return err
		}
		done, at, err := s.BatchDone(ctx, acct, "b2")
		if err != nil {
			return err
		}
		if !done || at != nowMs {
			return fmt.Errorf("the batch recorded done twice reads done=%v at %d; want the first instant %d", done, at, nowMs)
		}
		return nil
	})
}

// A unit's rows go in its claim's transaction, and only the rows of what the claim admits: the
// entries then say their row is in the unit's item, and a rows item holding the row of an event
// the claim does not admit (one rejected, or claimed by another unit) is refused before anything
// is written.
func TestBatchClaim_RowsItem_OnlyTheAdmittedEvents(t *testing.T) {
	env := testenv.New(t)
	s, ctx := store(env, env.Clients.DynamoDB), context.Background()
	s.Analytics = env.Names.Table(resources.TableAnalytics)
	rowOf := func(id string) analytics.Row {
		return analytics.Row{AccountID: acct, EventID: id, Type: "t", Source: "/s", RowInsertedAtMs: nowMs, Cycle: cycle, ArchiveKey: "events/b3.jsonl"}
	}
	c := batchClaim("b3", "evt_r1")
	rows, err := ledger.PackRows("b3", []analytics.Row{rowOf("evt_r1"), rowOf("evt_r2")})
	if err != nil {
		t.Fatal(err)
	}
	c.Rows = rows
	if err := s.WriteBatchClaim(ctx, c); err == nil || errors.Is(err, ledger.ErrCancelled) {
		t.Fatalf("a rows item holding an event the claim does not admit: %v; want it refused", err)
	}
	if _, err := s.Get(ctx, acct, "evt_r1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused claim left evt_r1 %v", err)
	}
	if c.Rows, err = ledger.PackRows("b3", []analytics.Row{rowOf("evt_r1")}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteBatchClaim(ctx, c); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get(ctx, acct, "evt_r1")
	if err != nil || !e.RowInUnit || e.RowRef().Unit != "b3" {
		t.Fatalf("evt_r1 claimed with its row in the unit's item: %+v %v", e, err)
	}
	w := &analytics.DynamoWriter{DB: env.Clients.DynamoDB, Table: s.Analytics}
	if ok, err := w.Exists(ctx, e.RowRef()); err != nil || !ok {
		t.Errorf("the unit's rows item does not hold evt_r1: %v %v", ok, err)
	}
}
