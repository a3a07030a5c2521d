package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

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
func readEvents(ctx context.Context, s *ledger.DynamoStore, batch string, ids ...string) (ledger.BatchState, error) {
	return s.ReadBatch(ctx, ledger.BatchRead{AccountID: acct, Batch: batch, Cycle: cycle, EventIDs: ids,
		Features: []ledger.FeatureRead{{Feature: plans.FeatureEvents, Row: usage.BudgetSK, Budget: true}}})
}

// A batch's transaction never overwrites an entry some other unit claimed (an event sent alone
// before, or in another batch): the whole transaction is cancelled, nothing is billed, and the
// next lap re-plans from a fresh read. Without the claim condition the batch would put its own
// checkpointed entry over the other claim and move the meter for it a second time.
func TestGuard_BatchClaimOfAnEventClaimedAlone_IsCancelled(t *testing.T) {
	testenv.NeedsGuard(t, "ledger.claim.first-writer", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := store(env, db), context.Background()
		if err := s.Claim(ctx, entry("evt_b1")); err != nil {
			return err
		}
		err := s.WriteBatchClaim(ctx, batchClaim("b1", "evt_b1", "evt_b2"))
		if !errors.Is(err, ledger.ErrCancelled) {
			return fmt.Errorf("a batch claiming an event claimed alone: %v; want the transaction cancelled", err)
		}
		st, err := readEvents(ctx, s, "b1", "evt_b1", "evt_b2")
		if err != nil {
			return err
		}
		if _, ok := st.Entries["evt_b2"]; ok || st.Unit.Rows[plans.FeatureEvents].Committed != 0 {
			return fmt.Errorf("a cancelled batch left evt_b2 claimed (%v) or the meter moved (%d)", ok, st.Unit.Rows[plans.FeatureEvents].Committed)
		}
		return nil
	})
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
