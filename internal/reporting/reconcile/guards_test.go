package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
)

// The same evidence recorded twice is one record.
func TestGuard_EvidenceIsRecordedOnce(t *testing.T) {
	testenv.NeedsGuard(t, "reconcile.evidence.absent", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s := &reconcile.EvidenceStore{DB: db, Table: env.Names.Table(resources.TableEvidence)}
		r := reconcile.Record{Account: "acct_g", Cycle: "2026-11", Feature: "events", Provider: "stripe", Ledger: 10, Sent: 10, AtMs: 1_000}
		for i, want := range []bool{true, false} {
			added, err := s.Add(context.Background(), r)
			if err != nil {
				return err
			}
			if added != want {
				return fmt.Errorf("add %d: added %v, want %v", i+1, added, want)
			}
		}
		return nil
	})
}

// A reconciliation requested again after the reconciler read the request stays requested when the
// reconciler marks the first one done.
func TestGuard_ARequestMadeAgainAfterTheReadStays(t *testing.T) {
	testenv.NeedsGuard(t, "reconcile.request-done.at", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		now := time.UnixMilli(1_000)
		q := &reconcile.Requests{DB: db, Table: env.Names.Table(resources.TableEvidence), Now: func() time.Time { return now }}
		ctx := context.Background()
		if err := q.Request(ctx, "acct_g", "2026-11", "webhook"); err != nil {
			return err
		}
		read, err := q.Pending(ctx, 10)
		if err != nil || len(read) != 1 {
			return fmt.Errorf("pending: %v %v", read, err)
		}
		now = time.UnixMilli(2_000)
		if err := q.Request(ctx, "acct_g", "2026-11", "webhook again"); err != nil {
			return err
		}
		if err := q.Done(ctx, read[0]); err != nil {
			return err
		}
		left, err := q.Pending(ctx, 10)
		if err != nil {
			return err
		}
		if len(left) != 1 {
			return fmt.Errorf("after marking the first request done, %d requests are pending, want the second one", len(left))
		}
		return nil
	})
}
