package reconcile_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/devkit/notifytest"
	standin "github.com/ferrymeter/ferry/internal/devkit/standin/stripe"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/reporting/report"
)

// mismatchNotes are the account's reconcile.mismatch notifications, by id, each with its message.
func mismatchNotes(t *testing.T, db *dynamodb.Client, table, account string) map[string]notify.Message {
	t.Helper()
	out := map[string]notify.Message{}
	for _, n := range notifytest.ReadTable(t, db, table) {
		if n.Stored.Kind != notify.ReconcileMismatch || n.Stored.Account != account {
			continue
		}
		if _, dup := out[n.Stored.ID]; dup {
			t.Fatalf("notification %s stored twice", n.Stored.ID)
		}
		out[n.Stored.ID] = n.Message
	}
	return out
}

func (r *rig) mismatchNotes(t *testing.T, account string) map[string]notify.Message {
	t.Helper()
	return mismatchNotes(t, r.Env.Clients.DynamoDB, r.Env.Names.Table(resources.TableNotifications), account)
}

// wantMismatchNotes fails unless the notifications are exactly one per record, each keyed by the
// record and carrying its account, feature, cycle, provider, verdict and figures.
func wantMismatchNotes(t *testing.T, got map[string]notify.Message, recs ...reconcile.Record) {
	t.Helper()
	if len(got) != len(recs) {
		t.Errorf("%d reconcile.mismatch notifications %+v; want %d", len(got), got, len(recs))
	}
	for _, rec := range recs {
		id := notify.Notification{Kind: notify.ReconcileMismatch, Subject: rec.Subject()}.ID()
		m, ok := got[id]
		if !ok {
			t.Errorf("no notification for the evidence %s", rec.Subject())
			continue
		}
		d := m.Data
		if m.Type != notify.ReconcileMismatch || d.Account != rec.Account || d.Feature != rec.Feature || d.Cycle != rec.Cycle ||
			d.Provider != rec.Provider || d.Verdict != string(rec.Verdict) || d.Ledger == nil || *d.Ledger != rec.Ledger ||
			val(d.Detail.Meter) != val(rec.Meter) || d.Limit != nil || d.Used != nil || d.Threshold != nil {
			t.Errorf("the notification of %s reads %+v (data %+v)", rec.Subject(), m, d)
		}
	}
}

// mismatches are the account's evidence rows whose verdict is not match.
func (r *rig) mismatches(t *testing.T, id string) []reconcile.Record {
	t.Helper()
	var out []reconcile.Record
	for _, rec := range r.evidence(t, id) {
		if rec.Verdict != reconcile.Match {
			out = append(out, rec)
		}
	}
	return out
}

// A match tells nothing. Late events leave both meters short: each provider's under_billed
// evidence tells reconcile.mismatch, once, with the figures compared; the repaired meters then
// match, and the runs after it tell nothing more.
func TestReconcile_UnderBilled_ToldOncePerEvidence_MatchTellsNothing(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_told", "plus")
	r.bill(t, acct, 60)
	r.report(t)
	if _, err := r.reconcile(t, acct.ID); err != nil {
		t.Fatalf("first run: %v", err)
	}
	if got := r.mismatchNotes(t, acct.ID); len(got) != 0 {
		t.Fatalf("matching meters told %+v", got)
	}

	r.bill(t, acct, 4)
	res, err := r.reconcile(t, acct.ID)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	for _, p := range []string{report.ProviderKinde, report.ProviderStripe} {
		if c := check(t, res, p); c.Verdict != reconcile.UnderBilled || !c.Confirmed {
			t.Fatalf("%s: %+v", p, c)
		}
	}
	recs := r.mismatches(t, acct.ID)
	if len(recs) != 2 {
		t.Fatalf("mismatch evidence %+v; want one per provider", recs)
	}
	wantMismatchNotes(t, r.mismatchNotes(t, acct.ID), recs...)
	for _, rec := range recs {
		if rec.Verdict != reconcile.UnderBilled || rec.Ledger != 64 || val(rec.Meter) != "60" {
			t.Errorf("evidence %+v", rec)
		}
	}

	for run := range 2 {
		if _, err := r.reconcile(t, acct.ID); err != nil {
			t.Fatalf("run %d after the repair: %v", run+3, err)
		}
	}
	wantMismatchNotes(t, r.mismatchNotes(t, acct.ID), recs...)
}

// Meters that cannot be read are unreadable evidence, told once each: the reconciler running
// again on the same numbers (still unreadable) stores no row and tells nothing more.
func TestReconcile_UnreadableTwiceOnTheSameNumbers_ToldOnce(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_dim", "plus")
	r.bill(t, acct, 5)
	r.report(t)
	for run := range 2 {
		r.stand.Kinde.FailMeterReads("fail")
		r.stand.Stripe.FailNext(standin.EndpointSummaries, standin.Fail)
		res, err := r.reconcile(t, acct.ID)
		if err != nil {
			t.Fatalf("run %d: %v", run+1, err)
		}
		for _, p := range []string{report.ProviderKinde, report.ProviderStripe} {
			if c := check(t, res, p); c.Verdict != reconcile.Unreadable || c.NewEvidence != (run == 0) {
				t.Errorf("run %d, %s: %+v", run+1, p, c)
			}
		}
		recs := r.mismatches(t, acct.ID)
		if len(recs) != 2 {
			t.Fatalf("run %d: mismatch evidence %+v; want one per provider", run+1, recs)
		}
		got := r.mismatchNotes(t, acct.ID)
		wantMismatchNotes(t, got, recs...)
		for _, m := range got {
			if m.Data.Detail.Meter != nil || m.Data.Verdict != string(reconcile.Unreadable) {
				t.Errorf("run %d: unreadable evidence told %+v", run+1, m.Data)
			}
		}
	}
}

// The store alone: a record and its notification are written together, once however often the
// same numbers are added; a record stored before its notification was (evidence older than the
// notifications) gets its notification when its numbers are found again; a match is stored with
// none.
func TestEvidence_AddWithItsNotification_OnceEachWhateverExistedFirst(t *testing.T) {
	env := testenv.New(t)
	db, ctx := env.Clients.DynamoDB, context.Background()
	notes := env.Names.Table(resources.TableNotifications)
	s := &reconcile.EvidenceStore{DB: db, Table: env.Names.Table(resources.TableEvidence), Notifications: notes}
	meter := int64(7)
	drift := reconcile.Record{Account: "acct_e", Cycle: "2026-11", Feature: "events", Provider: "stripe", Ledger: 10, Sent: 10,
		Meter: &meter, Verdict: reconcile.UnderBilled, Cause: "lost", AtMs: 1_000}
	note := func(rec reconcile.Record) notify.Notification {
		ledger := rec.Ledger
		return notify.Notification{Kind: notify.ReconcileMismatch, Account: rec.Account, Feature: rec.Feature, Cycle: rec.Cycle,
			Subject: rec.Subject(), AtMs: rec.AtMs,
			Detail: notify.Detail{Provider: rec.Provider, Verdict: string(rec.Verdict), Ledger: &ledger, Meter: rec.Meter}}
	}
	for i, want := range []bool{true, false} {
		added, err := s.Add(ctx, drift, note(drift))
		if err != nil || added != want {
			t.Fatalf("add %d: added %v, %v; want %v", i+1, added, err, want)
		}
	}
	wantMismatchNotes(t, mismatchNotes(t, db, notes, "acct_e"), drift)

	older := drift
	older.Sent, older.Verdict = 7, reconcile.ClosedCycleDrift
	if added, err := s.Add(ctx, older); err != nil || !added {
		t.Fatalf("the older record: %v %v", added, err)
	}
	if added, err := s.Add(ctx, older, note(older)); err != nil || added {
		t.Fatalf("the older record found again: added %v, %v; want false", added, err)
	}
	wantMismatchNotes(t, mismatchNotes(t, db, notes, "acct_e"), drift, older)

	match := drift
	match.Meter, match.Verdict = &match.Ledger, reconcile.Match
	if added, err := s.Add(ctx, match); err != nil || !added {
		t.Fatalf("the match: %v %v", added, err)
	}
	wantMismatchNotes(t, mismatchNotes(t, db, notes, "acct_e"), drift, older)
	if got, err := s.List(ctx, "acct_e", "2026-11"); err != nil || len(got) != 3 {
		t.Errorf("evidence %+v, %v; want three rows", got, err)
	}
}
