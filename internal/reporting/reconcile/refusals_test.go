package reconcile_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/reporting/report"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

// legacyCorrection writes a correction row at the store, past the service's rules, as a row
// written before corrections were bounded by the usage is.
func legacyCorrection(t *testing.T, r *rig, account string, units int64) {
	t.Helper()
	ctx := context.Background()
	tb := r.MeterAPI().Usage
	label := r.cycle(t, account)
	basis, err := tb.ReadCorrectionBasis(ctx, account, plans.FeatureEvents, label)
	if err != nil {
		t.Fatal(err)
	}
	err = tb.PutCorrection(ctx, usage.Correction{AccountID: account, Feature: plans.FeatureEvents, Cycle: label, ID: "legacy",
		Units: units, Reason: "written before the rule", CreatedAtMs: r.Clock.Now().UnixMilli()}, basis)
	if err != nil {
		t.Fatal(err)
	}
}

// A ledger below zero is never sent to a provider, by the reporter or as a repair: no negative
// absolute total to Kinde, no negative delta or cancellation to Stripe. Each provider's cycle is
// listed for review, and the run answers that it proved nothing (ok false through the route).
func TestReconcile_LedgerBelowZero_NothingSentListedForReview(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_below", "plus")
	r.bill(t, acct, 5)
	r.report(t)
	legacyCorrection(t, r, acct.ID, -8) // the ledger is now -3
	kinde, stripe := r.stand.Kinde.Counts(), r.stand.Stripe.Counts()

	rep, err := r.MeterAPI().Reporter.Run(context.Background())
	if err != nil || rep.Review != 1 || rep.Retrying != 0 {
		t.Fatalf("report: %+v, %v", rep, err)
	}
	res, err := r.reconcile(t, acct.ID)
	if !errors.Is(err, reconcile.ErrUnconfirmed) {
		t.Fatalf("run: %v; want ErrUnconfirmed", err)
	}
	for _, p := range []string{report.ProviderKinde, report.ProviderStripe} {
		c := check(t, res, p)
		if c.Verdict != reconcile.OverBilled || c.Repair != nil || c.Confirmed || !strings.Contains(c.Error, "below zero") ||
			!strings.Contains(c.Cause, reconcile.CauseNegative) {
			t.Errorf("%s: %+v", p, c)
		}
	}
	if now := r.stand.Kinde.Counts(); now.MeterWrites != kinde.MeterWrites || r.stand.Kinde.MeterTotal("agr_acct_below", "events") != 5 {
		t.Errorf("Kinde was written: %d writes since, total %d", now.MeterWrites-kinde.MeterWrites, r.stand.Kinde.MeterTotal("agr_acct_below", "events"))
	}
	if now := r.stand.Stripe.Counts(); now.MeterEventRequests != stripe.MeterEventRequests || now.Cancels != stripe.Cancels {
		t.Errorf("Stripe was written: %+v → %+v", stripe, now)
	}
	entries, err := r.MeterAPI().Review.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, e := range entries {
		if e.Reason == review.NegativeLedger && e.Ledger == -3 {
			listed[e.Provider] = true
		}
	}
	if !listed[report.ProviderKinde] || !listed[report.ProviderStripe] {
		t.Errorf("review list: %+v", entries)
	}
	resp := r.Do(t, http.MethodPost, "/v1/reconcile", apptest.AdminKey, map[string]any{"account": acct.ID})
	if resp.Status != http.StatusOK || resp.JSON(t)["ok"] != false {
		t.Errorf("route: %d %s", resp.Status, resp.Body)
	}
}

// The answer's ok is false when a repair was called for and not made: over-billing past Stripe's
// cancellation window is listed for review, and the meter stays above the ledger.
func TestRoute_RepairListedForReview_OkFalse(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_ok", "plus")
	r.bill(t, acct, 10)
	r.report(t)
	correct(t, r, acct.ID, -1)
	r.Clock.Advance(25 * time.Hour)
	resp := r.Do(t, http.MethodPost, "/v1/reconcile", apptest.AdminKey, map[string]any{"account": acct.ID})
	if resp.Status != http.StatusOK || resp.JSON(t)["ok"] != false || !strings.Contains(string(resp.Body), "listed for review") {
		t.Errorf("%d %s", resp.Status, resp.Body)
	}
}

// gate holds the first Stripe read-back of a run until released: the run holds its cycle's
// lease meanwhile.
type gate struct {
	reconcile.StripeMeter
	first   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gate) Summary(ctx context.Context, meterID, customer string, start, end time.Time) (int64, error) {
	if g.first.CompareAndSwap(false, true) {
		close(g.entered)
		<-g.release
	}
	return g.StripeMeter.Summary(ctx, meterID, customer, start, end)
}

// Two reconciliations of one account at once: the one refused its cycle's lease measured nothing,
// so it says so — a null ledger, not 0 — and names the holder, another reconciliation. The other
// run finishes and proves the cycle.
func TestReconcile_TwoRunsOfOneAccount_TheRefusedOneMeasuresNothingAndNamesTheHolder(t *testing.T) {
	r := newRig(t)
	rec := r.MeterAPI().Reconciler
	rec.LeaseWait = 10 * time.Millisecond
	acct := r.linked(t, "acct_twice", "plus")
	r.bill(t, acct, 4)
	r.report(t)
	g := &gate{StripeMeter: rec.Stripe, entered: make(chan struct{}), release: make(chan struct{})}
	rec.Stripe = g
	type run struct {
		page reconcile.Page
		err  error
	}
	first := make(chan run, 1)
	go func() {
		page, err := rec.Run(context.Background(), reconcile.Input{Account: acct.ID, Cycle: r.cycle(t, acct.ID)})
		first <- run{page, err}
	}()
	<-g.entered

	resp := r.Do(t, http.MethodPost, "/v1/reconcile", apptest.AdminKey, map[string]any{"account": acct.ID, "cycle": r.cycle(t, acct.ID)})
	close(g.release)
	body := resp.JSON(t)
	if resp.Status != http.StatusOK || body["ok"] != false {
		t.Fatalf("the second run: %d %s", resp.Status, resp.Body)
	}
	refused := 0
	for _, item := range body["results"].([]any) {
		res := item.(map[string]any)
		if res["error"] == nil {
			continue
		}
		refused++
		if res["ledger"] != nil || res["corrections"] != nil || res["counters"] != nil ||
			!strings.Contains(res["error"].(string), "leased by another reconciliation (reconciler-") ||
			!strings.Contains(res["error"].(string), "nothing was measured") {
			t.Errorf("the refused cycle: %v", res)
		}
	}
	if refused != 1 {
		t.Errorf("%d refused cycles; want the one the first run held: %s", refused, resp.Body)
	}
	got := <-first
	if got.err != nil {
		t.Fatalf("the first run: %v", got.err)
	}
	for _, res := range got.page.Results {
		if res.Ledger == nil || res.Error != "" {
			t.Errorf("the first run: %+v", res)
		}
	}
}

// A cycle the reporter holds is refused in the reporter's name, not another reconciliation's.
func TestReconcile_CycleTheReporterHolds_NamesTheReporter(t *testing.T) {
	r := newRig(t)
	rec := r.MeterAPI().Reconciler
	rec.LeaseWait = 10 * time.Millisecond
	acct := r.linked(t, "acct_busy", "plus")
	r.bill(t, acct, 2)
	r.report(t)
	now := r.Clock.Now()
	k := report.Key{Account: acct.ID, Feature: plans.FeatureEvents, Cycle: r.cycle(t, acct.ID)}
	if _, err := r.MeterAPI().State.Claim(context.Background(), k, report.RoleReporter, "reporter-7f3a",
		now.UnixMilli(), now.Add(report.LeaseFor).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	res, err := r.reconcile(t, acct.ID)
	if !errors.Is(err, reconcile.ErrNotMeasured) || res.Ledger != nil || len(res.Checks) != 0 ||
		!strings.Contains(res.Error, "leased by the reporter (reporter-7f3a)") {
		t.Errorf("%+v, %v", res, err)
	}
}
