package reconcile_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	standin "github.com/ferrymeter/ferry/internal/devkit/standin/stripe"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/reporting/report"
)

// outboxRows reads the account's events outbox rows of its current cycle.
func outboxRows(t *testing.T, r *rig, account string) []outbox.Row {
	t.Helper()
	rows, err := r.MeterAPI().Outbox.Cycle(context.Background(), account, plans.FeatureEvents, r.cycle(t, account))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// A report whose send failed once waits PENDING for its backoff: the reconciler defers (the
// meter lacks a delta that is still on its way) instead of calling it under-billed and repairing
// on top of it, which Stripe would count twice once the row is sent.
func TestReconcile_ReportBackingOff_DefersThenMatches_NeverBillsTwice(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_backoff", "plus")
	r.bill(t, acct, 11)
	r.stand.Stripe.FailNext(standin.EndpointMeterEvents, standin.Fail)
	r.report(t)
	if rows := outboxRows(t, r, acct.ID); len(rows) != 1 || rows[0].Status != outbox.Pending || rows[0].Attempts != 1 {
		t.Fatalf("outbox %+v; want one row backing off", rows)
	}
	res, err := r.reconcile(t, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := check(t, res, report.ProviderStripe); c.Verdict != reconcile.Unreadable || c.Repair != nil || !strings.Contains(c.Cause, "still on its way") {
		t.Errorf("with the report backing off: %+v", c)
	}
	r.Clock.Advance(outbox.BackoffBase)
	r.report(t)
	if got := r.stand.Stripe.Total("ferry_events", "cus_acct_backoff"); got != 11 {
		t.Errorf("Stripe holds %d once the report is sent; want 11 (a repair on top of the delta bills it twice)", got)
	}
	if res, err := r.reconcile(t, acct.ID); err != nil || check(t, res, report.ProviderStripe).Verdict != reconcile.Match {
		t.Errorf("after the send: %+v, %v", res, err)
	}
}

// A report another drainer has claimed and is still sending (its send delayed) is SENDING: the
// reconciler defers while it is in flight, and the delayed send lands once.
func TestReconcile_ReportBeingSent_DefersWhileInFlight_NeverBillsTwice(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_sending", "plus")
	r.bill(t, acct, 11)
	if _, err := r.MeterAPI().Reporter.Run(context.Background()); err != nil { // no drain
		t.Fatal(err)
	}
	d := r.MeterAPI().Drainer
	claimed, release := make(chan struct{}), make(chan struct{})
	slow := &outbox.Drainer{Store: d.Store, Sender: d.Sender, Review: d.Review, Metrics: d.Metrics, Log: d.Log, Now: d.Now,
		Owner: "drainer-slow", Hook: func(_ context.Context, p outbox.Point, _ outbox.Row) error {
			if p == outbox.AfterClaim {
				close(claimed)
				<-release // the send is delayed past the reconciler's read
			}
			return nil
		}}
	sent := make(chan error, 1)
	go func() {
		_, err := slow.Run(context.Background())
		sent <- err
	}()
	<-claimed
	if rows := outboxRows(t, r, acct.ID); len(rows) != 1 || rows[0].Status != outbox.Sending {
		t.Fatalf("outbox %+v; want one row being sent", rows)
	}
	res, err := r.reconcile(t, acct.ID)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if c := check(t, res, report.ProviderStripe); c.Verdict != reconcile.Unreadable || c.Repair != nil || !strings.Contains(c.Cause, "SENDING") {
		t.Errorf("with the report in flight: %+v", c)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if got := r.stand.Stripe.Total("ferry_events", "cus_acct_sending"); got != 11 {
		t.Errorf("Stripe holds %d after the delayed send; want 11", got)
	}
}

// When the ledger falls below what Stripe was last sent without a cancellation (a negative
// correction after a report that never reached Stripe), the repair starts a new epoch of report
// keys: the next report's total equals the dead report's, and under the old epoch it would reuse
// that row's key — the outbox refuses the row, and the cycle is retried every minute forever.
func TestReconcile_LedgerBelowLastSent_NewEpoch_NextTotalGetsItsOwnKey(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_epoch", "plus")
	r.bill(t, acct, 10)
	faults := make([]standin.Fault, outbox.MaxAttempts)
	for i := range faults {
		faults[i] = standin.Fail
	}
	r.stand.Stripe.FailNext(standin.EndpointMeterEvents, faults...)
	r.report(t)
	for range outbox.MaxAttempts - 1 {
		r.Clock.Advance(outbox.BackoffCap)
		if _, err := r.MeterAPI().Drainer.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if rows := outboxRows(t, r, acct.ID); len(rows) != 1 || rows[0].Status != outbox.Dead || rows[0].Total != 10 {
		t.Fatalf("outbox %+v; want the report of 10 DEAD", rows)
	}
	correct(t, r, acct.ID, -3) // the ledger is 7, below the 10 last sent
	res, err := r.reconcile(t, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := check(t, res, report.ProviderStripe); c.Verdict != reconcile.UnderBilled || !c.Confirmed || val(c.ReadBack) != "7" {
		t.Fatalf("repair: %+v", c)
	}
	r.bill(t, acct, 3) // back to 10: the dead report's total
	rep, err := r.MeterAPI().Reporter.Run(context.Background())
	if err != nil || rep.Retrying != 0 || rep.Reported != 1 {
		t.Fatalf("the next report: %+v, %v (a refused outbox row leaves the cycle retrying)", rep, err)
	}
	if _, err := r.MeterAPI().Drainer.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.stand.Stripe.Total("ferry_events", "cus_acct_epoch"); got != 10 {
		t.Errorf("Stripe holds %d; want 10", got)
	}
	keys := map[string]bool{}
	for _, row := range outboxRows(t, r, acct.ID) {
		if keys[row.Identifier()] {
			t.Errorf("identifier %s used twice", row.Identifier())
		}
		keys[row.Identifier()] = true
	}
}
