package corrections_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/reporting/corrections"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func apply(t *testing.T, h *apptest.Harness, in corrections.Input) (corrections.Correction, bool, error) {
	t.Helper()
	return h.MeterAPI().Corrections.Apply(context.Background(), in)
}

// A correction is a new row in the corrected cycle; its Idempotency-Key names it, so the same key
// finds the same row, and never writes a second.
func TestApply_AppendsOnceUnderItsKey(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_c", "plus", nil)
	h.Bill(t, account(t, h, "acct_c"), 5)
	in := corrections.Input{Account: "acct_c", Feature: "events", Units: -2, Reason: "two bot clicks", IdempotencyKey: "k1"}
	c, created, err := apply(t, h, in)
	if err != nil || !created || c.Cycle != "2026-11" || c.Closed {
		t.Fatalf("%+v %v %v", c, created, err)
	}
	again, created, err := apply(t, h, in)
	if err != nil || created || again.ID != c.ID {
		t.Errorf("repeat: %+v %v %v", again, created, err)
	}
	in.Units = -3
	if _, _, err := apply(t, h, in); !errors.Is(err, corrections.ErrKeyReused) {
		t.Errorf("the key with another correction: %v", err)
	}
	tot, err := h.MeterAPI().Usage.Read(context.Background(), "acct_c", "events", "2026-11")
	if err != nil || tot.Corrections != -2 {
		t.Errorf("corrections %d, %v", tot.Corrections, err)
	}
}

// A correction for a closed cycle is kept (the ledger is the record) and goes to the review list:
// no provider is written for a closed cycle.
func TestApply_ClosedCycle_StoredAndListedForReview(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_old", "plus", nil)
	h.Clock.Advance(30 * 24 * time.Hour) // into 2026-12: the account's first cycle is closed
	c, created, err := apply(t, h, corrections.Input{Account: "acct_old", Feature: "events", Units: 4, Reason: "a late import", Cycle: "2026-11", IdempotencyKey: "k2"})
	if err != nil || !created || !c.Closed || c.Cycle != "2026-11" {
		t.Fatalf("%+v %v %v", c, created, err)
	}
	entries, err := h.MeterAPI().Review.List(context.Background())
	if err != nil || len(entries) != 1 || entries[0].Reason != review.ClosedCycleChanged || entries[0].Ledger != 4 {
		t.Errorf("review %+v, %v", entries, err)
	}
}

func TestApply_RefusesWhatCannotBeACorrection(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_v", "plus", nil)
	for name, c := range map[string]struct {
		in   corrections.Input
		want string
	}{
		"zero units":   {corrections.Input{Account: "acct_v", Feature: "events", Reason: "x", IdempotencyKey: "k"}, "non-zero"},
		"no reason":    {corrections.Input{Account: "acct_v", Feature: "events", Units: 1, IdempotencyKey: "k"}, "reason is required"},
		"no key":       {corrections.Input{Account: "acct_v", Feature: "events", Units: 1, Reason: "x"}, "Idempotency-Key is required"},
		"feature":      {corrections.Input{Account: "acct_v", Feature: "seats", Units: 1, Reason: "x", IdempotencyKey: "k"}, "unknown"},
		"future cycle": {corrections.Input{Account: "acct_v", Feature: "events", Units: 1, Reason: "x", Cycle: "2027-01", IdempotencyKey: "k"}, "has not started"},
		"bad cycle":    {corrections.Input{Account: "acct_v", Feature: "events", Units: 1, Reason: "x", Cycle: "2026-13", IdempotencyKey: "k"}, "YYYY-MM"},
	} {
		_, _, err := apply(t, h, c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}
	if _, _, err := apply(t, h, corrections.Input{Account: "nobody", Feature: "events", Units: 1, Reason: "x", IdempotencyKey: "k"}); err == nil {
		t.Error("a correction for an unknown account")
	}
}

// Through the route, with the Idempotency-Key middleware in front: a repeat is replayed.
func TestRoute_CorrectionReplayedUnderItsKey(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_r", "plus", nil)
	body := map[string]any{"account": "acct_r", "feature": "events", "units": 3, "reason": "missed import"}
	first := h.Do(t, http.MethodPost, "/v1/usage/corrections", apptest.AdminKey, body, "Idempotency-Key", "c-1")
	second := h.Do(t, http.MethodPost, "/v1/usage/corrections", apptest.AdminKey, body, "Idempotency-Key", "c-1")
	if first.Status != http.StatusCreated || second.Status != http.StatusCreated || second.Header.Get("Idempotent-Replayed") != "true" ||
		string(first.Body) != string(second.Body) {
		t.Errorf("%d %s / %d %s", first.Status, first.Body, second.Status, second.Body)
	}
}

// account reads an account as the services see it.
func account(t *testing.T, h *apptest.Harness, id string) accounts.Account {
	t.Helper()
	a, err := h.MeterAPI().Accounts.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func totals(t *testing.T, h *apptest.Harness, id, cycle string) usage.Totals {
	t.Helper()
	tot, err := h.MeterAPI().Usage.Read(context.Background(), id, plans.FeatureEvents, cycle)
	if err != nil {
		t.Fatal(err)
	}
	return tot
}

// "Usage" for a negative correction is the ledger's total for the account, feature and cycle:
// what was used plus every earlier correction. A correction that would take it below zero is
// refused, with the total in the problem, and nothing is stored; one that takes it to zero is not.
func TestApply_NegativePastTheCycleUsage_RefusedNothingStored(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_neg", "plus", nil)
	h.Bill(t, account(t, h, "acct_neg"), 10)
	in := corrections.Input{Account: "acct_neg", Feature: "events", Units: -4, Reason: "bot clicks", IdempotencyKey: "first"}
	if _, _, err := apply(t, h, in); err != nil {
		t.Fatal(err)
	}
	// 6 left: 7 is refused, although the events alone (10) would cover it.
	_, _, err := apply(t, h, corrections.Input{Account: "acct_neg", Feature: "events", Units: -7, Reason: "more", IdempotencyKey: "second"})
	kind, pub := problem.Describe(err)
	if kind != problem.Conflict || pub.Facts["usage"] != int64(6) || pub.Facts["used"] != int64(10) || pub.Facts["corrections"] != int64(-4) ||
		!strings.Contains(err.Error(), "below zero") {
		t.Fatalf("a correction past the cycle's usage: %v (%v, %+v)", err, kind, pub)
	}
	if tot := totals(t, h, "acct_neg", "2026-11"); tot.Billed() != 6 || tot.Corrections != -4 {
		t.Errorf("after the refusal: %+v", tot)
	}
	if _, created, err := apply(t, h, corrections.Input{Account: "acct_neg", Feature: "events", Units: -6, Reason: "the rest", IdempotencyKey: "third"}); err != nil || !created {
		t.Fatalf("a correction to exactly zero: %v", err)
	}
	// Stored, the last one is still answered as stored when its key comes again, although the
	// totals now include it.
	if _, created, err := apply(t, h, corrections.Input{Account: "acct_neg", Feature: "events", Units: -6, Reason: "the rest", IdempotencyKey: "third"}); err != nil || created {
		t.Errorf("the same correction again: created %v, %v", created, err)
	}
	// A positive correction is never refused by the rule.
	if _, _, err := apply(t, h, corrections.Input{Account: "acct_neg", Feature: "events", Units: 2, Reason: "a late import", IdempotencyKey: "fourth"}); err != nil {
		t.Error(err)
	}
}

// Through the route: a 409 conflict (the cycle's state refuses it, not the request's shape) with
// the cycle's usage as extension members.
func TestRoute_NegativePastTheCycleUsage_ProblemCarriesTheUsage(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_np", "plus", nil)
	h.Bill(t, account(t, h, "acct_np"), 3)
	resp := h.Do(t, http.MethodPost, "/v1/usage/corrections", apptest.AdminKey,
		map[string]any{"account": "acct_np", "feature": "events", "units": -5, "reason": "refund"}, "Idempotency-Key", "np-1")
	body := resp.JSON(t)
	if resp.Status != http.StatusConflict || resp.Header.Get("Content-Type") != "application/problem+json" ||
		body["type"] != "tag:ferrymeter.dev,2026:problem:conflict" || body["usage"] != float64(3) || body["used"] != float64(3) || body["corrections"] != float64(0) {
		t.Fatalf("%d %s", resp.Status, resp.Body)
	}
	if tot := totals(t, h, "acct_np", "2026-11"); tot.Corrections != 0 {
		t.Errorf("a refused correction was stored: %+v", tot)
	}
}

// barrier parks the first n TransactWriteItems calls of a client until all n have arrived, so that
// n corrections read their totals before any of them writes: the race a check before a write
// loses without a guard. Later calls pass at once.
type barrier struct {
	mu      sync.Mutex
	n       int
	arrived int
	release chan struct{}
}

func newBarrier(n int) *barrier {
	b := &barrier{}
	b.arm(n)
	return b
}

func (b *barrier) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("test.Barrier",
			func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
				if middleware.GetOperationName(ctx) == "TransactWriteItems" {
					b.mu.Lock()
					b.arrived++
					if b.arrived == b.n {
						close(b.release)
					}
					parked := b.arrived <= b.n
					b.mu.Unlock()
					if parked {
						select {
						case <-b.release:
						case <-time.After(10 * time.Second):
						}
					}
				}
				return next.HandleInitialize(ctx, in)
			}), smithymw.After)
	})
}

// arm makes the barrier park the next n TransactWriteItems calls.
func (b *barrier) arm(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n, b.arrived, b.release = n, 0, make(chan struct{})
}

// Concurrent negative corrections, each within the cycle's usage, all read the totals before any
// writes: the corrections head lets exactly one commit, and the rest are decided again on the new
// totals and refused. Usage never goes below zero. Two rounds: the cycle's first corrections
// (no head yet), then corrections after it has one.
func TestApply_ConcurrentNegativeCorrections_NeverBelowZero(t *testing.T) {
	const racers = 4
	b := newBarrier(0)
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){b.option}})
	h.CreateAccount(t, "acct_race", "plus", nil)
	h.Bill(t, account(t, h, "acct_race"), 20)
	for round, c := range []struct{ units, left int64 }{{-12, 8}, {-5, 3}} {
		b.arm(racers)
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, errs[i] = apply(t, h, corrections.Input{Account: "acct_race", Feature: "events", Units: c.units,
					Reason: "a refund", IdempotencyKey: fmt.Sprintf("race-%d-%d", round, i)})
			}()
		}
		wg.Wait()
		committed := 0
		for _, err := range errs {
			switch {
			case err == nil:
				committed++
			case problem.KindOf(err) != problem.Conflict:
				t.Errorf("round %d: a racer failed otherwise than refused below zero: %v", round, err)
			}
		}
		if tot := totals(t, h, "acct_race", "2026-11"); committed != 1 || tot.Billed() != c.left {
			t.Fatalf("round %d: %d of %d refunds of %d committed; the cycle bills %d, want %d (%+v)", round, committed, racers, -c.units, tot.Billed(), c.left, tot)
		}
	}
}

// A correction names a cycle of the account's life: the cycle the account was created in is the
// earliest; one before it (or in year 0000) holds nothing to correct and is refused.
func TestApply_CycleBeforeTheAccount_Refused(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_young", "plus", nil) // created 2026-11-15
	for _, label := range []string{"2026-10", "2019-01", "0000-01"} {
		_, _, err := apply(t, h, corrections.Input{Account: "acct_young", Feature: "events", Units: 1, Reason: "x", Cycle: label, IdempotencyKey: "k-" + label})
		var ie *problem.InputError
		if !errors.As(err, &ie) || ie.Facts["earliestCycle"] != "2026-11" || !strings.Contains(err.Error(), "before account acct_young existed") {
			t.Errorf("cycle %s: %v", label, err)
		}
		if tot := totals(t, h, "acct_young", label); tot.Corrections != 0 {
			t.Errorf("cycle %s: stored %+v", label, tot)
		}
	}
	if _, created, err := apply(t, h, corrections.Input{Account: "acct_young", Feature: "events", Units: 1, Reason: "x", Cycle: "2026-11", IdempotencyKey: "k-first"}); err != nil || !created {
		t.Errorf("the account's first cycle: %v", err)
	}
}

// The earliest cycle follows the account's agreement day: created on 2026-11-15 with cycles that
// start on the 20th, the account was born in the cycle that started on 2026-10-20 ("2026-10").
func TestEarliest_FollowsTheAgreementDay(t *testing.T) {
	created := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC).UnixMilli()
	for _, c := range []struct {
		acct accounts.Account
		want string
		ok   bool
	}{
		{accounts.Account{CreatedAtMs: created}, "2026-11", true},
		{accounts.Account{CreatedAtMs: created, AgreementDay: 20}, "2026-10", true},
		{accounts.Account{CreatedAtMs: created, AgreementDay: 15}, "2026-11", true},
		// A record kept without its creation time starts at its first usage.
		{accounts.Account{UsageStartedAtMs: created}, "2026-11", true},
		{accounts.Account{}, "", false},
	} {
		got, ok := corrections.Earliest(c.acct)
		if ok != c.ok || ok && got.Label() != c.want {
			t.Errorf("%+v: %s %v; want %s %v", c.acct, got.Label(), ok, c.want, c.ok)
		}
	}
}
