package reconcile_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
)

// A Kinde customer.meter_usage_updated delivery, after someone else moved the meter, leaves the
// inbox's mark; the reporter's next minute run reconciles that cycle through the mark seam,
// repairs the meter to the ledger, stores the evidence and clears the mark.
func TestInboxMeterMark_ReconciledByTheNextReporterRun(t *testing.T) {
	r := newRig(t)
	resp := r.Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, map[string]any{
		"id": "acct_mm", "plan": "plus", "kindeCustomerId": "kp_mm", "kindeAgreementId": "agr_acct_mm",
	})
	if resp.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Status, resp.Body)
	}
	acct, err := r.MeterAPI().Accounts.Get(context.Background(), "acct_mm")
	if err != nil {
		t.Fatal(err)
	}
	r.bill(t, acct, 5)
	r.report(t)
	if got := r.stand.Kinde.MeterTotal("agr_acct_mm", "events"); got != 5 {
		t.Fatalf("meter %d after the report, want 5", got)
	}

	// Someone else moves the meter; Kinde tells Ferry.
	r.stand.Kinde.SetMeterTotal("agr_acct_mm", "events", 9)
	now := r.Clock.Now()
	tok, err := r.Signer(t).Sign(map[string]any{
		"type": "customer.meter_usage_updated", "event_id": "event_mm_1", "source": "api",
		"data":            map[string]any{"customer_id": "kp_mm", "customer_type": "user", "feature_code": "events"},
		"event_timestamp": now.Format(time.RFC3339Nano), "timestamp": now.Format(time.RFC3339Nano),
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Do(t, http.MethodPost, "/v1/webhooks/kinde", "", []byte(tok), "Content-Type", "application/jwt"); d.Status != http.StatusOK {
		t.Fatalf("deliver: %d %s", d.Status, d.Body)
	}
	r.Drain(t, 0)
	marks := r.Inbox().MeterMarks
	if listed, _, err := marks.List(context.Background(), "", 10); err != nil || len(listed) != 1 {
		t.Fatalf("inbox marks %+v, %v; want the one", listed, err)
	}

	// The reporter's minute run, as its schedule runs it.
	rep := r.Fn(resources.FunctionReporter)
	r.Reporter().Reconciler.ConfirmWait, r.Reporter().Reconciler.RecheckWait = 10*time.Millisecond, 10*time.Millisecond
	if err := rep.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.stand.Kinde.MeterTotal("agr_acct_mm", "events"); got != 5 {
		t.Errorf("meter %d after the marked cycle was reconciled, want the ledger's 5", got)
	}
	if listed, _, err := marks.List(context.Background(), "", 10); err != nil || len(listed) != 0 {
		t.Errorf("inbox marks %+v, %v after the run; want none", listed, err)
	}
	var found bool
	for _, rec := range r.evidence(t, acct.ID) {
		if rec.Feature == "events" && rec.Verdict == reconcile.OverBilled && rec.Confirmed && rec.Ledger == 5 {
			found = true
		}
	}
	if !found {
		t.Errorf("no confirmed over_billed evidence: %+v", r.evidence(t, acct.ID))
	}
}
