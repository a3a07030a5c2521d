package holds_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/notifytest"
)

// refusedNotes are the account's hold.refused notifications as stored, each as its message;
// no notifier runs here, so each must still be NEW.
func refusedNotes(t *testing.T, h *apptest.Harness, account string) []notify.Message {
	t.Helper()
	var out []notify.Message
	for _, n := range notifytest.Read(t, h.Env) {
		if n.Stored.Account != account || n.Stored.Kind != notify.HoldRefused {
			continue
		}
		if n.Stored.Status != notify.StatusNew {
			t.Errorf("notification %s is stored as %+v; want it NEW", n.Stored.ID, n.Stored)
		}
		out = append(out, n.Message)
	}
	return out
}

// wantRefused fails unless the account has exactly one hold.refused notification for the cycle,
// keyed by (account, feature, cycle), with the figures the refusal read, and returns it.
func wantRefused(t *testing.T, h *apptest.Harness, account, cycle string, limit, used, requested int64) notify.Message {
	t.Helper()
	var mine []notify.Message
	for _, m := range refusedNotes(t, h, account) {
		if m.Data.Cycle == cycle {
			mine = append(mine, m)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("%s %s: %d hold.refused notifications %+v; want one", account, cycle, len(mine), mine)
	}
	m := mine[0]
	id := notify.Notification{Kind: notify.HoldRefused, Account: account, Feature: "tokens", Cycle: cycle}.ID()
	if m.ID != id || m.Type != notify.HoldRefused || m.Data.Account != account || m.Data.Feature != "tokens" ||
		m.Data.Limit == nil || *m.Data.Limit != limit || m.Data.Used == nil || *m.Data.Used != used ||
		m.Data.Requested != requested || m.Data.Threshold != nil || m.Data.Verdict != "" || m.Timestamp == "" {
		t.Errorf("hold.refused reads %+v (data %+v); want id %s, limit %d, used %d, requested %d", m, m.Data, id, limit, used, requested)
	}
	return m
}

// A hold that fits tells nothing. The first hold the limit refuses tells hold.refused with the
// limit, the committed figure the refusal read and what the job asked for; the same request
// retried, another job refused, and a new process (which remembers nothing) refused again all
// leave that one notification as it was. The next cycle's first refusal is told again, once.
func TestReserve_RefusedAtTheLimit_ToldOncePerAccountFeatureAndCycle(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_told", "free", map[string]any{"tokens": 10_000})

	hold := mustStatus(t, reserve(t, h, key, "job-fits", 6_000), http.StatusCreated)
	cycle := hold["cycle"].(string)
	if got := refusedNotes(t, h, "acct_told"); len(got) != 0 {
		t.Fatalf("a hold that fits told %+v", got)
	}

	mustStatus(t, reserve(t, h, key, "job-big", 5_000), http.StatusPaymentRequired)
	first := wantRefused(t, h, "acct_told", cycle, 10_000, 6_000, 5_000)

	mustStatus(t, reserve(t, h, key, "job-big", 5_000), http.StatusPaymentRequired)
	mustStatus(t, reserve(t, h, key, "job-bigger", 7_000), http.StatusPaymentRequired)
	h = h.Restart(t)
	mustStatus(t, reserve(t, h, key, "job-biggest", 9_000), http.StatusPaymentRequired)
	if again := wantRefused(t, h, "acct_told", cycle, 10_000, 6_000, 5_000); again.Timestamp != first.Timestamp {
		t.Errorf("the notification was rewritten: %s, then %s", first.Timestamp, again.Timestamp)
	}

	h.Clock.Advance(31 * 24 * time.Hour)
	next := mustStatus(t, reserve(t, h, key, "job-next", 8_000), http.StatusCreated)["cycle"].(string)
	if next == cycle {
		t.Fatalf("31 days later the cycle is still %s", cycle)
	}
	mustStatus(t, reserve(t, h, key, "job-next-big", 3_000), http.StatusPaymentRequired)
	wantRefused(t, h, "acct_told", next, 10_000, 8_000, 3_000)
	if got := refusedNotes(t, h, "acct_told"); len(got) != 2 {
		t.Errorf("%d hold.refused notifications over two cycles; want two", len(got))
	}
}

// failPutItems fails the next n PutItem calls (the notification's write: a reservation that is
// refused writes nothing else on its own) with fault, and lets every other call through.
func failPutItems(n int, fault instrument.Fault) instrument.FaultPlan {
	left := n
	return func(op string, _, _ int) instrument.Fault {
		if op == "PutItem" && left > 0 {
			left--
			return fault
		}
		return instrument.NoFault
	}
}

// The refusal is decided, and its notification cannot be written: the answer is a 503 that asks
// for a retry (nothing was held), not a 402 that would end the request and lose the notification.
// The retry is refused and tells it, once. A write that landed but whose answer was lost is the
// same 503, and its retry finds the notification there and writes no second one.
func TestReserve_RefusalNotTold_Answers503AndTheRetryTellsIt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault instrument.Fault
	}{
		{"write failed", instrument.CrashBefore},
		{"answer lost", instrument.CrashAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, faults := withFaults(t)
			key := h.CreateAccount(t, "acct_untold", "free", map[string]any{"tokens": 1_000})
			cycle := mustStatus(t, reserve(t, h, key, "job-fits", 600), http.StatusCreated)["cycle"].(string)

			faults.SetPlan(failPutItems(1, tc.fault))
			r := h.Do(t, http.MethodPost, "/v1/holds", key, map[string]any{"key": "job-big", "feature": "tokens", "amount": 500})
			if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
				t.Fatalf("untold refusal answered %d %s; want a 503 with Retry-After", r.Status, r.Body)
			}
			if len(faults.Fired()) != 1 {
				t.Fatalf("fired %v", faults.Fired())
			}
			wantUsage(t, h, key, 0, 600)
			if tc.fault == instrument.CrashBefore {
				if got := refusedNotes(t, h, "acct_untold"); len(got) != 0 {
					t.Fatalf("the failed write stored %+v", got)
				}
			}

			mustStatus(t, reserve(t, h, key, "job-big", 500), http.StatusPaymentRequired)
			wantRefused(t, h, "acct_untold", cycle, 1_000, 600, 500)
			wantUsage(t, h, key, 0, 600)
		})
	}
}
