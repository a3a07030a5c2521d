package report_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/report"
)

var guardKey = report.Key{Account: "acct_g", Feature: "events", Cycle: "2026-11"}

func stateStore(env *testenv.Env, db *dynamodb.Client) *report.StateStore {
	return &report.StateStore{DB: db, Table: env.Names.Table(resources.TableMeters)}
}

// While one run holds a cycle's lease, a second run's claim is refused.
func TestGuard_OneRunAtATimeReportsACycle(t *testing.T) {
	testenv.NeedsGuard(t, "report.claim.lease-free", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := stateStore(env, db), context.Background()
		if _, err := s.Claim(ctx, guardKey, report.RoleReporter, "run-a", 1_000, 61_000); err != nil {
			return fmt.Errorf("first claim: %w", err)
		}
		if _, err := s.Claim(ctx, guardKey, report.RoleReporter, "run-b", 2_000, 62_000); !errors.Is(err, report.ErrLeased) {
			return fmt.Errorf("a second claim within the lease: %v, want ErrLeased", err)
		}
		return nil
	})
}

// A run whose lease lapsed, giving it back, never frees the lease the next run has taken since.
func TestGuard_ALapsedRunNeverFreesTheNextRunsLease(t *testing.T) {
	testenv.NeedsGuard(t, "report.release.owner", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := stateStore(env, db), context.Background()
		if _, err := s.Claim(ctx, guardKey, report.RoleReporter, "run-a", 1_000, 61_000); err != nil {
			return err
		}
		if _, err := s.Claim(ctx, guardKey, report.RoleReporter, "run-b", 70_000, 130_000); err != nil { // run-a's lease lapsed
			return fmt.Errorf("claim after the lapse: %w", err)
		}
		if err := s.Release(ctx, guardKey, "run-a"); err != nil { // run-a, late, gives back "its" lease
			return err
		}
		if _, err := s.Claim(ctx, guardKey, report.RoleReporter, "run-c", 80_000, 140_000); !errors.Is(err, report.ErrLeased) {
			return fmt.Errorf("a claim while run-b holds the lease: %v, want ErrLeased", err)
		}
		return nil
	})
}

// Two runs that computed their delta from the same lastSent: only the first commits.
func TestGuard_TwoDeltasFromOneLastSent_OnlyOneCommits(t *testing.T) {
	testenv.NeedsGuard(t, "report.sent.prev", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := stateStore(env, db), context.Background()
		if _, err := s.Claim(ctx, guardKey, report.RoleReporter, "run-a", 1_000, 61_000); err != nil {
			return err
		}
		if err := s.Commit(ctx, s.StripeSentItem(guardKey, 0, 5, 2_000)); err != nil {
			return fmt.Errorf("first delta: %w", err)
		}
		if err := s.Commit(ctx, s.StripeSentItem(guardKey, 0, 7, 3_000)); !errors.Is(err, report.ErrSentChanged) {
			return fmt.Errorf("a second delta from lastSent 0: %v, want ErrSentChanged", err)
		}
		return nil
	})
}

// lastSent is lowered after cancellations only from the value they were computed from.
func TestGuard_CancellationsLowerLastSentOnlyFromWhatTheyRead(t *testing.T) {
	testenv.NeedsGuard(t, "report.cancelled.prev", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := stateStore(env, db), context.Background()
		if _, err := s.Claim(ctx, guardKey, report.RoleReporter, "run-a", 1_000, 61_000); err != nil {
			return err
		}
		if err := s.Commit(ctx, s.StripeSentItem(guardKey, 0, 9, 2_000)); err != nil {
			return err
		}
		// Cancellations computed from lastSent 5, which is no longer what is stored.
		if err := s.Commit(ctx, s.StripeCancelledItem(guardKey, 5, 3, 3_000)); !errors.Is(err, report.ErrSentChanged) {
			return fmt.Errorf("cancellations from a stale lastSent: %v, want ErrSentChanged", err)
		}
		return nil
	})
}
