package review_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The same entry listed twice is listed once: its alarm calls a person once.
func TestGuard_AnEntryIsListedOnce(t *testing.T) {
	testenv.NeedsGuard(t, "review.add.absent", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s := &review.Table{DB: db, Table: env.Names.Table(resources.TableReview)}
		e := review.Entry{Account: "acct_g", Feature: "events", Cycle: "2026-11", Provider: "stripe",
			Reason: review.ClosedCycleDrift, Ledger: 10, Sent: 9, AtMs: 1_000}
		for i, want := range []bool{true, false} {
			added, err := s.Add(context.Background(), e)
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
