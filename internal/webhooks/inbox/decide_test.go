package inbox_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

func TestClaim_LeaseAndBackoffDecideWhoMayClaim(t *testing.T) {
	const now = int64(1_000_000)
	for _, c := range []struct {
		name string
		e    inbox.Event
		want inbox.ClaimDecision
	}{
		{"received", inbox.Event{Status: inbox.Received, NextAttemptAtMs: now}, inbox.ClaimDecision{Verdict: inbox.ClaimIt}},
		{"failed, backoff over", inbox.Event{Status: inbox.Failed, NextAttemptAtMs: now}, inbox.ClaimDecision{Verdict: inbox.ClaimIt}},
		{"failed, backoff running", inbox.Event{Status: inbox.Failed, NextAttemptAtMs: now + 1}, inbox.ClaimDecision{Verdict: inbox.NotDue, RetryAtMs: now + 1}},
		{"processing, lease live", inbox.Event{Status: inbox.Processing, Attempts: 1, LeaseExpiresAtMs: now + 1}, inbox.ClaimDecision{Verdict: inbox.Leased, RetryAtMs: now + 1}},
		{"processing, lease lapsed", inbox.Event{Status: inbox.Processing, Attempts: 1, LeaseExpiresAtMs: now}, inbox.ClaimDecision{Verdict: inbox.ClaimIt}},
		{"processing, the last attempt's lease lapsed", inbox.Event{Status: inbox.Processing, Attempts: inbox.MaxAttempts, LeaseExpiresAtMs: now}, inbox.ClaimDecision{Verdict: inbox.GiveUp}},
		{"applied", inbox.Event{Status: inbox.Applied}, inbox.ClaimDecision{Verdict: inbox.AlreadyFinal}},
		{"ignored", inbox.Event{Status: inbox.Ignored}, inbox.ClaimDecision{Verdict: inbox.AlreadyFinal}},
		{"dead", inbox.Event{Status: inbox.Dead}, inbox.ClaimDecision{Verdict: inbox.AlreadyFinal}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := inbox.Claim(c.e, now); got != c.want {
				t.Errorf("Claim = %+v; want %+v", got, c.want)
			}
		})
	}
}

// Failures back off 5 s, 30 s, 2 min, 10 min, 1 h; the sixth failed attempt is DEAD.
func TestAfterFailure_BacksOffThenDead(t *testing.T) {
	want := []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour}
	for attempt := 1; attempt <= inbox.MaxAttempts; attempt++ {
		status, next := inbox.AfterFailure(inbox.Event{Attempts: attempt}, 0)
		if attempt == inbox.MaxAttempts {
			if status != inbox.Dead {
				t.Errorf("attempt %d: %s; want DEAD", attempt, status)
			}
			continue
		}
		if status != inbox.Failed || time.Duration(next)*time.Millisecond != want[attempt-1] {
			t.Errorf("attempt %d: %s, next in %s; want FAILED, %s", attempt, status, time.Duration(next)*time.Millisecond, want[attempt-1])
		}
	}
	if inbox.MaxAttempts != 6 {
		t.Errorf("MaxAttempts %d; the contract says 6", inbox.MaxAttempts)
	}
}

func TestParseTime_ExactOrRefused(t *testing.T) {
	for _, c := range []struct {
		in     string
		wantNs int64
		ok     bool
	}{
		{"2026-10-21T02:29:24.481368869+11:00", time.Date(2026, 10, 20, 15, 29, 24, 481368869, time.UTC).UnixNano(), true},
		{"2026-10-21T02:29:23.403633+11:00", time.Date(2026, 10, 20, 15, 29, 23, 403633000, time.UTC).UnixNano(), true},
		{"2026-10-20T15:29:23Z", time.Date(2026, 10, 20, 15, 29, 23, 0, time.UTC).UnixNano(), true},
		{"2026-10-20T15:29:23.1234567891Z", 0, false}, // ten fraction digits: only by rounding
		{"1969-12-31T23:59:59Z", 0, false},
		{"2026-10-20 15:29:23Z", 0, false},
		{"", 0, false},
	} {
		got, err := inbox.ParseTime(c.in)
		if c.ok != (err == nil) || (c.ok && got.UnixNano() != c.wantNs) {
			t.Errorf("ParseTime(%q) = %d, %v; want %d ok=%v", c.in, got.UnixNano(), err, c.wantNs, c.ok)
		}
		if err != nil && !errors.Is(err, inbox.ErrTimeUnreadable) {
			t.Errorf("ParseTime(%q): %v is not ErrTimeUnreadable", c.in, err)
		}
	}
}

// Events are ordered by their time to the nanosecond; equal times by (source, id), the same way
// whatever the order they arrive in.
func TestOrderKey_OrdersByTimeThenIdentity(t *testing.T) {
	at := func(s string) inbox.EventTime {
		t.Helper()
		v, err := inbox.ParseTime(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ordered := []string{
		inbox.OrderKey(at("2026-10-21T02:29:23.403633000+11:00"), inbox.Kinde, "event_b"),
		inbox.OrderKey(at("2026-10-20T15:29:23.403633001Z"), inbox.Kinde, "event_a"), // 1 ns later
		inbox.OrderKey(at("2026-10-20T15:29:24Z"), inbox.Kinde, "event_a"),
		inbox.OrderKey(at("2026-10-20T15:29:24Z"), inbox.Kinde, "event_b"), // a tie: the id decides
		inbox.OrderKey(at("2026-10-20T15:29:24Z"), inbox.Stripe, "evt_0"),
		inbox.OrderKey(at("2261-12-31T23:59:59Z"), inbox.Kinde, "event_late"), // more digits
	}
	for i := 1; i < len(ordered); i++ {
		if ordered[i-1] >= ordered[i] {
			t.Errorf("%q does not sort before %q", ordered[i-1], ordered[i])
		}
	}
}

// decideInput is an ApplyInput for an account on free with the default catalog.
func decideInput(f inbox.Facts, acct *accounts.Account) inbox.ApplyInput {
	in := inbox.ApplyInput{
		Event: inbox.Event{ID: "bev_test", Source: inbox.Kinde, EventID: "event_1"},
		Facts: f, Catalog: plans.Default(), Account: acct, NowMs: 1,
		Link:   inbox.CustomerRef{Kind: accounts.KindeCustomer, ID: "customer_1"},
		Cycles: map[string]allowance.Cycle{"credits": {AccountID: "acct_1", Feature: "credits", Label: "2026-11"}},
	}
	return in
}

func TestDecide_EachKind(t *testing.T) {
	t1 := time.Date(2026, 11, 15, 12, 3, 0, 0, time.UTC)
	when, _ := inbox.ParseTime(t1.Format(time.RFC3339Nano))
	earlier, _ := inbox.ParseTime(t1.Add(-time.Minute).Format(time.RFC3339Nano))
	customer := []inbox.CustomerRef{{Kind: accounts.KindeCustomer, ID: "customer_1"}}
	free := func() *accounts.Account {
		return &accounts.Account{ID: "acct_1", Plan: "free", Status: accounts.Active, Known: true}
	}
	newerThan := func(k string) *accounts.Account {
		a := free()
		a.PlanChangeKey, a.StatusChangeKey = k, k
		return a
	}
	key := inbox.OrderKey(when, inbox.Kinde, "event_1")
	laterKey := inbox.OrderKey(when, inbox.Kinde, "event_2") // same time, greater id: newer
	for _, c := range []struct {
		name       string
		facts      inbox.Facts
		acct       *accounts.Account
		status     inbox.Status
		reason     string
		plan       string
		setStatus  accounts.Status
		grants     string
		markCycle  string
		resultPart string
		// tells is the notifications the decision puts with its commit ("kind from→to", …).
		tells string
	}{
		{name: "plan change, newer", facts: inbox.Facts{Kind: inbox.PlanChange, Type: "customer.plan_changed", Customers: customer, PlanKeys: []string{"customer_pro_plan"}, Time: when},
			acct: free(), status: inbox.Applied, plan: "plus", grants: "free 10 opening, plus 490 plan entered", resultPart: "plan set to plus",
			tells: "account.plan_changed free→plus"},
		{name: "plan change, a newer one already stored", facts: inbox.Facts{Kind: inbox.PlanChange, Customers: customer, PlanKeys: []string{"customer_pro_plan"}, Time: when},
			acct: newerThan(laterKey), status: inbox.Ignored, reason: inbox.ReasonNewerPlan},
		{name: "plan change, this very one stored (a replay)", facts: inbox.Facts{Kind: inbox.PlanChange, Customers: customer, PlanKeys: []string{"customer_pro_plan"}, Time: when},
			acct: newerThan(key), status: inbox.Applied, resultPart: "already applied"},
		{name: "cancellation, back to the default plan", facts: inbox.Facts{Kind: inbox.PlanChange, Customers: customer, ToDefault: true, Time: when},
			acct: &accounts.Account{ID: "acct_1", Plan: "plus", Status: accounts.Active, Known: true}, status: inbox.Applied, plan: "free",
			grants: "plus 500 opening, free 0 plan entered", tells: "account.plan_changed plus→free"},
		{name: "cancellation of an account on the default plan: the plan is set, nothing to tell", facts: inbox.Facts{Kind: inbox.PlanChange, Customers: customer, ToDefault: true, Time: when},
			acct: free(), status: inbox.Applied, plan: "free", grants: "free 10 opening"},
		{name: "plan change to a plan the catalog does not know", facts: inbox.Facts{Kind: inbox.PlanChange, Customers: customer, PlanKeys: []string{"customer_gold"}, Time: when},
			acct: free(), status: inbox.Ignored, reason: `the Kinde plan key "customer_gold" names no plan in the catalog`},
		{name: "payment, already active: the status is set, nothing to tell", facts: inbox.Facts{Kind: inbox.Payment, Customers: customer, PlanKeys: []string{"customer_pro_plan"}, Time: when},
			acct: free(), status: inbox.Applied, setStatus: accounts.Active, grants: "free 10 opening, plus 490 payment"},
		{name: "payment of a past_due account", facts: inbox.Facts{Kind: inbox.Payment, Customers: customer, Time: when},
			acct: &accounts.Account{ID: "acct_1", Plan: "free", Status: accounts.PastDue, Known: true}, status: inbox.Applied, setStatus: accounts.Active,
			tells: "account.status_changed past_due→active"},
		{name: "payment older than the status change", facts: inbox.Facts{Kind: inbox.Payment, Customers: customer, PlanKeys: []string{"customer_pro_plan"}, Time: earlier},
			acct: newerThan(key), status: inbox.Applied, grants: "free 10 opening, plus 490 payment", resultPart: "status unchanged"},
		{name: "payment naming no plan", facts: inbox.Facts{Kind: inbox.Payment, Customers: customer, Time: when},
			acct: free(), status: inbox.Applied, setStatus: accounts.Active, resultPart: "names no plan"},
		{name: "payment failed", facts: inbox.Facts{Kind: inbox.PaymentFailed, Customers: customer, Time: when},
			acct: free(), status: inbox.Applied, setStatus: accounts.PastDue, tells: "account.status_changed active→past_due"},
		{name: "invoice overdue", facts: inbox.Facts{Kind: inbox.InvoiceOverdue, Customers: customer, Time: when},
			acct: free(), status: inbox.Applied, setStatus: accounts.Inactive, tells: "account.status_changed active→inactive"},
		{name: "payment failed, older than the status change", facts: inbox.Facts{Kind: inbox.PaymentFailed, Customers: customer, Time: earlier},
			acct: newerThan(key), status: inbox.Ignored, reason: inbox.ReasonNewerStatus},
		{name: "payment failed, this very one stored (a replay)", facts: inbox.Facts{Kind: inbox.PaymentFailed, Customers: customer, Time: when},
			acct: newerThan(key), status: inbox.Applied, resultPart: "already applied"},
		{name: "invoice overdue, this very one stored (a replay)", facts: inbox.Facts{Kind: inbox.InvoiceOverdue, Customers: customer, Time: when},
			acct: newerThan(key), status: inbox.Applied, resultPart: "already applied"},
		{name: "payment, this very one stored (a replay)", facts: inbox.Facts{Kind: inbox.Payment, Customers: customer, Time: when},
			acct: newerThan(key), status: inbox.Applied, resultPart: "status already applied"},
		{name: "meter usage", facts: inbox.Facts{Kind: inbox.MeterUsage, Customers: customer, FeatureCode: "tokens", Time: when},
			acct: free(), status: inbox.Applied, markCycle: "2026-11"},
		{name: "unknown customer", facts: inbox.Facts{Kind: inbox.PlanChange, Customers: customer, PlanKeys: []string{"customer_pro_plan"}, Time: when},
			status: inbox.Ignored, reason: `no account is linked to kindeCustomerId "customer_1"`},
		{name: "unhandled type", facts: inbox.Facts{Kind: inbox.Unhandled, Type: "user.created", Customers: customer, Time: when},
			acct: free(), status: inbox.Ignored, reason: "Ferry does not handle user.created events"},
		{name: "an unreadable payload", facts: inbox.Facts{Kind: inbox.PlanChange, Problem: "the event's event_timestamp cannot be read exactly"},
			acct: free(), status: inbox.Ignored, reason: "cannot be read exactly"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := inbox.Decide(decideInput(c.facts, c.acct))
			if d.Status != c.status || !strings.Contains(d.Reason, c.reason) {
				t.Fatalf("%s %q; want %s %q", d.Status, d.Reason, c.status, c.reason)
			}
			if c.status == inbox.Applied && !strings.Contains(d.Result, c.resultPart) {
				t.Errorf("result %q; want it to say %q", d.Result, c.resultPart)
			}
			var plan string
			var status accounts.Status
			if d.Change != nil {
				plan, status = d.Change.Plan, d.Change.Status
			}
			if plan != c.plan || status != c.setStatus {
				t.Errorf("change: plan %q status %q; want %q %q", plan, status, c.plan, c.setStatus)
			}
			// The change carries what it replaces, as read: its commit is held to it.
			if ch := d.Change; ch != nil && ((ch.Plan != "" && ch.FromPlan != c.acct.Plan) || (ch.Status != "" && ch.FromStatus != c.acct.Status)) {
				t.Errorf("change decided from plan %q status %q; want the account as read, %q %q", ch.FromPlan, ch.FromStatus, c.acct.Plan, c.acct.Status)
			}
			var rows []string
			for _, g := range d.Grants {
				for _, r := range g.Add {
					rows = append(rows, r.Plan+" "+itoa(r.Amount)+" "+string(r.Reason))
				}
			}
			if strings.Join(rows, ", ") != c.grants {
				t.Errorf("grants [%s]; want [%s]", strings.Join(rows, ", "), c.grants)
			}
			if (d.Mark != nil) != (c.markCycle != "") || (d.Mark != nil && (d.Mark.Cycle != c.markCycle || d.Mark.Feature != "tokens")) {
				t.Errorf("mark %+v; want cycle %q feature tokens", d.Mark, c.markCycle)
			}
			var tells []string
			for _, n := range d.Notes {
				tells = append(tells, string(n.Kind)+" "+n.Detail.From+"→"+n.Detail.To)
				// Keyed by the event and the account (see accountChanged), stamped with the
				// decision's instant, naming the stored event.
				if n.Account != "acct_1" || n.Subject != "bev_test#acct_1" || n.AtMs != 1 || n.Detail.Event != "bev_test" {
					t.Errorf("note %+v", n)
				}
			}
			if got := strings.Join(tells, ", "); got != c.tells {
				t.Errorf("tells [%s]; want [%s]", got, c.tells)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
