package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/ledger"
	"github.com/ferrymeter/ferry/internal/testenv"
)

// batchClaim is one lap's claim of a batch of ids, all admitted against a capped budget.
func batchClaim(batch string, ids ...string) ledger.BatchClaim {
	c := ledger.BatchClaim{AccountID: acct, Batch: batch, Cycle: cycle, ReceivedAtMs: nowMs, NowMs: nowMs, Billing: capped(10)}
	for i, id := range ids {
		c.Admit = append(c.Admit, ledger.Entry{EventID: id, ArchiveKey: "events/" + batch + ".jsonl", ArchiveOffset: int64(i), ArchiveLength: 1})
	}
	return c
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
		st, err := s.ReadBatch(ctx, acct, "b1", cycle, capped(10), []string{"evt_b1", "evt_b2"})
		if err != nil {
			return err
		}
		if _, ok := st.Entries["evt_b2"]; ok || st.Budget.Committed != 0 {
			return fmt.Errorf("a cancelled batch left evt_b2 claimed (%v) or the meter moved (%d)", ok, st.Budget.Committed)
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
