package usage_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func guardTable(env *testenv.Env, db *dynamodb.Client) usage.Table {
	return usage.Table{DB: db, Name: env.Names.Table(resources.TableUsage)}
}

func write(tb usage.Table, items ...types.TransactWriteItem) error {
	_, err := tb.DB.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: items})
	return err
}

// A meter write that only checks its row's report mark is cancelled when the mark is gone, so the
// writer puts the mark: no write goes unreported.
func TestGuard_AWriteThatChecksAMissingMarkIsCancelled(t *testing.T) {
	testenv.NeedsGuard(t, "usage.mark.present", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		tb := guardTable(env, db)
		err := write(tb, tb.AddToShard(acct, feature, cycle, 3, 5, 1), tb.MarkCheck(acct, feature, cycle, usage.ShardSK(3)))
		if !dynamo.IsTransactionCanceled(err) {
			return fmt.Errorf("a write that checked an absent mark: %v, want it cancelled (the reporter would never see it)", err)
		}
		return nil
	})
}

// marksLeft reads how many counter rows are still marked.
func marksLeft(tb usage.Table) (int, error) {
	_, rs, err := tb.ReadRows(context.Background(), acct, feature, cycle)
	n := 0
	for _, r := range rs {
		if usage.IsMark(r) {
			if _, ok := r[usage.AttrReportBucket]; ok {
				n++
			}
		}
	}
	return n, err
}

// A write after the reporter read the rows keeps its row's mark when the reporter clears them.
func TestGuard_AWriteAfterTheReadKeepsItsMark(t *testing.T) {
	testenv.NeedsGuard(t, "usage.mark-clear.rev", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		tb, ctx := guardTable(env, db), context.Background()
		if err := write(tb, tb.AddToShard(acct, feature, cycle, 3, 5, 1), tb.MarkPut(acct, feature, cycle, usage.ShardSK(3), 1)); err != nil {
			return err
		}
		_, read, err := tb.ReadRows(ctx, acct, feature, cycle)
		if err != nil {
			return err
		}
		if err := write(tb, tb.AddToShard(acct, feature, cycle, 3, 2, 2), tb.MarkCheck(acct, feature, cycle, usage.ShardSK(3))); err != nil {
			return fmt.Errorf("the write after the read: %w", err)
		}
		if _, err := tb.ClearMarks(ctx, read); err != nil {
			return err
		}
		if n, err := marksLeft(tb); err != nil || n != 1 {
			return fmt.Errorf("after clearing, %d marks are left (%v); the write after the read needs its mark", n, err)
		}
		return nil
	})
}

// A mark read while its row did not exist yet stays when the row's first write came since.
func TestGuard_AFirstWriteAfterTheReadKeepsItsMark(t *testing.T) {
	testenv.NeedsGuard(t, "usage.mark-clear.fresh", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		tb, ctx := guardTable(env, db), context.Background()
		if err := write(tb, tb.MarkPut(acct, feature, cycle, usage.ShardSK(3), 1)); err != nil {
			return err
		}
		_, read, err := tb.ReadRows(ctx, acct, feature, cycle)
		if err != nil {
			return err
		}
		if err := write(tb, tb.AddToShard(acct, feature, cycle, 3, 2, 2), tb.MarkCheck(acct, feature, cycle, usage.ShardSK(3))); err != nil {
			return fmt.Errorf("the first write: %w", err)
		}
		if _, err := tb.ClearMarks(ctx, read); err != nil {
			return err
		}
		if n, err := marksLeft(tb); err != nil || n != 1 {
			return fmt.Errorf("after clearing, %d marks are left (%v); the first write needs its mark", n, err)
		}
		return nil
	})
}

// A counter row rebuilt from a read loses no write made after that read.
func TestGuard_ARebuildLosesNoWriteMadeSinceItsRead(t *testing.T) {
	testenv.NeedsGuard(t, "usage.rebuild.rev", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		tb, ctx := guardTable(env, db), context.Background()
		if err := write(tb, tb.AddToShard(acct, feature, cycle, 3, 5, 1), tb.MarkPut(acct, feature, cycle, usage.ShardSK(3), 1)); err != nil {
			return err
		}
		_, read, err := tb.ReadRows(ctx, acct, feature, cycle)
		if err != nil {
			return err
		}
		if err := write(tb, tb.AddToShard(acct, feature, cycle, 3, 2, 2), tb.MarkCheck(acct, feature, cycle, usage.ShardSK(3))); err != nil {
			return err
		}
		if err := tb.RebuildRow(ctx, row(read, usage.ShardSK(3)), 4, 3); !errors.Is(err, usage.ErrRowChanged) {
			return fmt.Errorf("a rebuild from a read before the last write: %v, want ErrRowChanged", err)
		}
		return nil
	})
}

// A counter row rebuilt from a read that found no row loses no first write made since.
func TestGuard_ARebuildOfARowReadAbsentLosesNoFirstWrite(t *testing.T) {
	testenv.NeedsGuard(t, "usage.rebuild.fresh", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		tb, ctx := guardTable(env, db), context.Background()
		absent := row(nil, usage.ShardSK(3))
		if err := write(tb, tb.AddToShard(acct, feature, cycle, 3, 2, 2), tb.MarkPut(acct, feature, cycle, usage.ShardSK(3), 2)); err != nil {
			return err
		}
		if err := tb.RebuildRow(ctx, absent, 4, 3); !errors.Is(err, usage.ErrRowChanged) {
			return fmt.Errorf("a rebuild from a read that found no row, after the row's first write: %v, want ErrRowChanged", err)
		}
		return nil
	})
}

// The same correction twice is one row: it moves the bill once.
func TestGuard_ACorrectionIsWrittenOnce(t *testing.T) {
	testenv.NeedsGuard(t, "usage.correction.absent", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		tb, ctx := guardTable(env, db), context.Background()
		c := usage.Correction{AccountID: acct, Feature: feature, Cycle: cycle, ID: "corr-1", Units: -3, Reason: "refund", KeyHash: "h", CreatedAtMs: 1}
		if err := tb.PutCorrection(ctx, c, usage.CorrectionBasis{}); err != nil {
			return err
		}
		// Decided again on a fresh read, so that only the row's own guard can refuse it.
		basis, err := tb.ReadCorrectionBasis(ctx, acct, feature, cycle)
		if err != nil {
			return err
		}
		c.Units = -30
		if err := tb.PutCorrection(ctx, c, basis); !errors.Is(err, usage.ErrCorrectionExists) {
			return fmt.Errorf("the same correction again: %v, want ErrCorrectionExists", err)
		}
		return nil
	})
}

// A consume of more than the whole limit is refused, a fresh budget row included: its room is
// below zero, a condition no row meets. A unit's claim never asks for one (it admits only what
// the budget row had room for, so its amount is at most the limit); ConsumeCapped's promise —
// the meter never passes the cap — holds for any caller.
func TestGuard_AConsumeOverTheWholeLimitIsRefused(t *testing.T) {
	testenv.NeedsGuard(t, "usage.consume.cap-room", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		tb, ctx := guardTable(env, db), context.Background()
		err := write(tb, tb.ConsumeCapped(acct, feature, cycle, 3, plans.Max(2), 1))
		if !dynamo.IsTransactionCanceled(err) {
			return fmt.Errorf("a consume of 3 against a limit of 2: %v, want it cancelled", err)
		}
		tot, err := tb.Read(ctx, acct, feature, cycle)
		if err != nil {
			return err
		}
		if tot.Used != 0 {
			return fmt.Errorf("the meter is %d past a limit of 2", tot.Used)
		}
		return nil
	})
}

// twoOnOneBasis writes two different corrections decided on one read of the partition, as two
// operators' requests that read the same totals do: the second must be cancelled and decided
// again. first runs before the shared read.
func twoOnOneBasis(tb usage.Table, first func() error) error {
	ctx := context.Background()
	if err := first(); err != nil {
		return err
	}
	basis, err := tb.ReadCorrectionBasis(ctx, acct, feature, cycle)
	if err != nil {
		return err
	}
	a := usage.Correction{AccountID: acct, Feature: feature, Cycle: cycle, ID: "refund-a", Units: -6, Reason: "refund a", CreatedAtMs: 2}
	b := usage.Correction{AccountID: acct, Feature: feature, Cycle: cycle, ID: "refund-b", Units: -6, Reason: "refund b", CreatedAtMs: 2}
	if err := tb.PutCorrection(ctx, a, basis); err != nil {
		return fmt.Errorf("the first correction: %w", err)
	}
	if err := tb.PutCorrection(ctx, b, basis); !errors.Is(err, usage.ErrCorrectionsChanged) {
		tot, _ := tb.Read(ctx, acct, feature, cycle)
		return fmt.Errorf("a second correction on the totals the first changed: %v, want ErrCorrectionsChanged (the cycle now bills %d)", err, tot.Billed())
	}
	return nil
}

// Two corrections decided on the same totals never both commit once the cycle has a corrections
// head: each of two refunds of 6 fits a cycle of 10, both together do not.
func TestGuard_TwoCorrectionsOnOneReadOfTheTotals_OnlyOneCommits(t *testing.T) {
	testenv.NeedsGuard(t, "usage.correction-head.rev", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		tb := guardTable(env, db)
		return twoOnOneBasis(tb, func() error {
			if err := write(tb, tb.AddToShard(acct, feature, cycle, 1, 11, 1)); err != nil {
				return err
			}
			// An earlier correction made the head.
			return tb.PutCorrection(context.Background(), usage.Correction{AccountID: acct, Feature: feature, Cycle: cycle,
				ID: "import", Units: -1, Reason: "a duplicate import", CreatedAtMs: 1}, usage.CorrectionBasis{})
		})
	})
}

// The same for a cycle's first two corrections, read when it had none.
func TestGuard_TheFirstTwoCorrectionsOfACycle_OnlyOneCommits(t *testing.T) {
	testenv.NeedsGuard(t, "usage.correction-head.fresh", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		tb := guardTable(env, db)
		return twoOnOneBasis(tb, func() error { return write(tb, tb.AddToShard(acct, feature, cycle, 1, 10, 1)) })
	})
}
