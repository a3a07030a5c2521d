package drain_test

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/alerts/drain"
	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/alerts/send"
)

// The limits are the ones the package comment documents.
func TestLimits_AreTheDocumentedOnes(t *testing.T) {
	if drain.MaxAttempts != 10 || drain.BackoffBase != 30*time.Second || drain.BackoffCap != time.Hour ||
		drain.ClaimFor != 2*time.Minute || drain.SendMargin != 30*time.Second {
		t.Errorf("limits moved: attempts %d, backoff %v..%v, claim %v, margin %v", drain.MaxAttempts, drain.BackoffBase,
			drain.BackoffCap, drain.ClaimFor, drain.SendMargin)
	}
	if drain.SendMargin <= send.DefaultTimeout || drain.ClaimFor <= drain.SendMargin {
		t.Error("a claim must outlast its margin, and the margin one attempt")
	}
}

// The windows double from 30 s up to the hour, and the tries span the documented horizon: at most
// 3 h 3.5 min of waiting across MaxAttempts tries.
func TestBackoffWindow_DoublesUpToTheCap(t *testing.T) {
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute,
		16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	var horizon time.Duration
	for i, w := range want {
		if got := drain.BackoffWindow(i + 1); got != w {
			t.Errorf("window after failure %d: %v; want %v", i+1, got, w)
		}
		horizon += drain.BackoffWindow(i + 1)
	}
	if len(want) != drain.MaxAttempts-1 || horizon != 3*time.Hour+3*time.Minute+30*time.Second {
		t.Errorf("%d waits spanning at most %v", len(want), horizon)
	}
	if got := drain.BackoffWindow(60); got != time.Hour {
		t.Errorf("window after failure 60: %v", got)
	}
}

// Full jitter: the wait is anywhere from zero to the whole window, never beyond.
func TestJitter_CoversTheWindowAndNoMore(t *testing.T) {
	w := 2 * time.Minute
	cases := []struct {
		name string
		u    uint64
		want time.Duration
	}{
		{"the smallest draw waits nothing", 0, 0},
		{"the largest draw waits the whole window", math.MaxUint64, w},
		{"a middle draw waits half", 1 << 63, w / 2},
	}
	for _, c := range cases {
		if got := drain.Jitter(w, c.u); got != c.want {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
	}
	if got := drain.Jitter(0, math.MaxUint64); got != 0 {
		t.Errorf("an empty window: %v", got)
	}
}

func record(status string) drain.Record {
	return drain.Record{Delivery: notify.Delivery{Notification: "ntf_x", Endpoint: "ep_a", Status: status, NextAttemptAtMs: 1_000}}
}

// A delivery may be claimed when its next attempt is due, or when the claim on it lapsed.
func TestRecord_Claimable(t *testing.T) {
	sending := record(notify.DeliverySending)
	sending.ClaimUntilMs = 5_000
	cases := []struct {
		name  string
		r     drain.Record
		nowMs int64
		want  bool
	}{
		{"pending and due", record(notify.DeliveryPending), 1_000, true},
		{"pending, not yet due", record(notify.DeliveryPending), 999, false},
		{"sending under a live claim", sending, 4_999, false},
		{"sending under a lapsed claim", sending, 5_000, true},
		{"delivered", record(notify.DeliveryDelivered), 9_999, false},
		{"dead", record(notify.DeliveryDead), 9_999, false},
	}
	for _, c := range cases {
		if got := c.r.Claimable(c.nowMs); got != c.want {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
	}
}

// After a failure: PENDING after the wait while tries are left and trying again can help; DEAD
// after the last try or for a failure that would repeat.
func TestRecord_AfterFailure(t *testing.T) {
	failed := send.Outcome{Status: http.StatusBadGateway, Answer: []byte("upstream \xff down"), Retryable: true, Err: errors.New("status 502")}
	cases := []struct {
		name     string
		attempts int
		out      send.Outcome
		want     drain.Outcome
		status   string
	}{
		{"a retryable failure with tries left", 1, failed, drain.OutcomeRetrying, notify.DeliveryPending},
		{"the last try", drain.MaxAttempts, failed, drain.OutcomeDead, notify.DeliveryDead},
		{"a failure that would repeat", 1, send.Outcome{Err: send.ErrInvalidSecret}, drain.OutcomeDead, notify.DeliveryDead},
	}
	for _, c := range cases {
		r := record(notify.DeliveryPending).Claimed("n1", 10_000)
		r.Attempts = c.attempts
		next, out := r.AfterFailure(c.out, 45*time.Second, 11_000)
		if out != c.want || next.Status != c.status || next.ClaimOwner != "" || next.ClaimUntilMs != 0 || next.LastError == "" {
			t.Errorf("%s: %s, %+v", c.name, out, next)
		}
		if out == drain.OutcomeRetrying && next.NextAttemptAtMs != 11_000+45_000 {
			t.Errorf("%s: next attempt at %d", c.name, next.NextAttemptAtMs)
		}
		if c.out.Status != 0 && next.LastAnswer != "upstream \uFFFD down" {
			t.Errorf("%s: answer %q; want it kept as valid UTF-8", c.name, next.LastAnswer)
		}
	}
}

// A replay starts the delivery over from any state but a live claim.
func TestRecord_Replayed(t *testing.T) {
	for _, status := range []string{notify.DeliveryPending, notify.DeliveryDelivered, notify.DeliveryDead} {
		r := record(status)
		r.Attempts, r.Replays, r.DeliveredAtMs = 4, 1, 900
		got, err := r.Replayed(20_000)
		if err != nil || got.Status != notify.DeliveryPending || got.Attempts != 0 || got.Replays != 2 ||
			got.NextAttemptAtMs != 20_000 || got.DeliveredAtMs != 0 {
			t.Errorf("replay of a %s delivery: %+v, %v", status, got, err)
		}
	}
	live := record(notify.DeliveryPending).Claimed("n1", 10_000)
	if _, err := live.Replayed(10_001); !errors.Is(err, drain.ErrInFlight) {
		t.Errorf("replay under a live claim: %v; want ErrInFlight", err)
	}
	if got, err := live.Replayed(live.ClaimUntilMs); err != nil || got.ClaimOwner != "" || got.Status != notify.DeliveryPending {
		t.Errorf("replay after the claim lapsed: %+v, %v", got, err)
	}
}

// The fan-out's choice: enabled endpoints that want the kind and the account.
func TestTargets(t *testing.T) {
	n := notify.Stored{ID: "ntf_x", Kind: notify.LimitReached, Account: "acct_1"}
	all := []endpoints.Endpoint{
		{ID: "every"},
		{ID: "limits", Kinds: []string{string(notify.LimitReached)}},
		{ID: "thresholds", Kinds: []string{string(notify.ThresholdCrossed)}},
		{ID: "acct_1", Accounts: []string{"acct_1"}},
		{ID: "acct_2", Accounts: []string{"acct_2"}},
		{ID: "off", Disabled: true},
	}
	var got []string
	for _, ep := range drain.Targets(n, all) {
		got = append(got, ep.ID)
	}
	if want := []string{"every", "limits", "acct_1"}; !slices.Equal(got, want) {
		t.Errorf("targets %v; want %v", got, want)
	}
}
