package outbox

import (
	"strings"
	"testing"
	"time"
)

func TestBackoff_DoublesFrom30SecondsToTheCap(t *testing.T) {
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute,
		16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	for i, w := range want {
		if got := Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
}

func TestAfterFailure_BacksOffThenDeadLettersAfterTheLastTry(t *testing.T) {
	r := Row{Status: Sending, Attempts: 1}
	next, out := r.AfterFailure("500", true, 0, 1_000)
	if out != OutcomeRetrying || next.Status != Pending || next.NextAttemptAtMs != 1_000+Backoff(1).Milliseconds() {
		t.Errorf("first failure: %s %+v", out, next)
	}
	// A 429's Retry-After is honoured when it asks for longer.
	next, _ = r.AfterFailure("429", true, 10*time.Minute, 1_000)
	if next.NextAttemptAtMs != 1_000+(10*time.Minute).Milliseconds() {
		t.Errorf("Retry-After not honoured: %+v", next)
	}
	r.Attempts = MaxAttempts
	if next, out := r.AfterFailure("500", true, 0, 1_000); out != OutcomeDead || next.Status != Dead || next.Status.Due() {
		t.Errorf("last try: %s %+v", out, next)
	}
	// A request Stripe refused for good is dead at once.
	r.Attempts = 1
	if _, out := r.AfterFailure("400", false, 0, 1_000); out != OutcomeDead {
		t.Errorf("refused for good: %s", out)
	}
}

func TestClaimable_PendingWhenDue_SendingOnlyAfterItsDeadline(t *testing.T) {
	for name, c := range map[string]struct {
		row  Row
		want bool
	}{
		"pending, due":               {Row{Status: Pending, NextAttemptAtMs: 100}, true},
		"pending, backing off":       {Row{Status: Pending, NextAttemptAtMs: 101}, false},
		"sending, claim running":     {Row{Status: Sending, ClaimUntilMs: 101}, false},
		"sending, claim lapsed":      {Row{Status: Sending, ClaimUntilMs: 100}, true},
		"sent":                       {Row{Status: Sent}, false},
		"dead":                       {Row{Status: Dead}, false},
		"cancelled":                  {Row{Status: Cancelled}, false},
		"review":                     {Row{Status: Review}, false},
		"sending, claim just lapsed": {Row{Status: Sending, ClaimUntilMs: 99}, true},
	} {
		if got := c.row.Claimable(100); got != c.want {
			t.Errorf("%s: claimable %v, want %v", name, got, c.want)
		}
	}
}

func TestMaySend_OnlyWithTheMarginLeft(t *testing.T) {
	c := Row{Status: Pending}.Claimed("d", 0)
	if !c.MaySend(0) || c.MaySend(ClaimFor.Milliseconds()-SendMargin.Milliseconds()) {
		t.Errorf("claim %+v", c)
	}
}

func TestIdentifier_TheRowKeyWrittenOut_HashedPastStripesLimit(t *testing.T) {
	for key, want := range map[string]string{
		ReportKey(8457, 0):          "acct_42:events:2026-10:8457",
		ReportKey(8457, 2):          "acct_42:events:2026-10:8457:e2",
		RepairKey("8457-8031-8031"): "acct_42:events:2026-10:repair:8457-8031-8031",
	} {
		if got := Identifier("acct_42", "events", "2026-10", key); got != want {
			t.Errorf("Identifier(%s) = %s, want %s", key, got, want)
		}
	}
	long := Identifier(strings.Repeat("a", 64), strings.Repeat("f", 40), "2026-10", ReportKey(1, 0))
	if len(long) > maxIdentifierLength || !strings.HasPrefix(long, "ferry-") {
		t.Errorf("long identifier %q", long)
	}
	if long != Identifier(strings.Repeat("a", 64), strings.Repeat("f", 40), "2026-10", ReportKey(1, 0)) {
		t.Error("the hashed identifier is not a function of the key")
	}
}
