package drain

import (
	"errors"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/alerts/send"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Limits of a delivery, with their units.
const (
	// MaxAttempts bounds the attempts of one delivery; after the last failure it is DEAD.
	MaxAttempts = 10
	// BackoffBase is the backoff window after the first failure; each further failure doubles
	// it, up to BackoffCap. The wait is drawn from the window with full jitter (see the package
	// comment for the schedule).
	BackoffBase = 30 * time.Second
	BackoffCap  = time.Hour
	// ClaimFor is how long a claim keeps other notifiers off a delivery: far longer than one
	// attempt (send.DefaultTimeout) and the write of its outcome.
	ClaimFor = 2 * time.Minute
	// SendMargin is the claim time that must be left to start an attempt: a notifier paused past
	// it lets the claim lapse rather than send alongside the notifier that takes it over.
	SendMargin = send.DefaultTimeout + 20*time.Second
	// Retention is how long a finished delivery (DELIVERED or DEAD), and a notification once
	// fanned out, stay readable before the table's TTL removes them.
	Retention = 30 * 24 * time.Hour
)

// Record is one delivery as the notifier decides on it: what its log shows, and the claim and
// revision its writes are conditioned on.
type Record struct {
	notify.Delivery
	// LogOrder orders the endpoint's delivery log: the notification's instant, then its id.
	LogOrder string
	// ClaimOwner names the notifier whose claim it is under, while SENDING; ClaimUntilMs is
	// when that claim lapses.
	ClaimOwner   string
	ClaimUntilMs int64
	// Rev counts the delivery's writes; every rewrite is conditioned on the revision it read.
	Rev int64
}

// Targets are the endpoints a notification is fanned out to: every endpoint that wants its kind
// and account, in the order given.
func Targets(n notify.Stored, all []endpoints.Endpoint) []endpoints.Endpoint {
	var out []endpoints.Endpoint
	for _, ep := range all {
		if ep.Wants(n.Kind, n.Account) {
			out = append(out, ep)
		}
	}
	return out
}

// NewRecord is the delivery of notification n to the endpoint endpointID, as the fan-out writes
// it at nowMs: PENDING, due at once, no attempt yet.
func NewRecord(n notify.Stored, endpointID string, nowMs int64) Record {
	return Record{
		Delivery: notify.Delivery{
			Notification: n.ID, Endpoint: endpointID, Kind: n.Kind, Account: n.Account,
			Status: notify.DeliveryPending, NextAttemptAtMs: nowMs, CreatedAtMs: nowMs, UpdatedAtMs: nowMs,
		},
		LogOrder: notify.ListOrder(n.AtMs, n.ID),
	}
}

// Claimable reports whether a notifier may claim the delivery at nowMs: PENDING and due, or
// SENDING under a claim that has lapsed (its notifier died or stalled).
func (r Record) Claimable(nowMs int64) bool {
	switch r.Status {
	case notify.DeliveryPending:
		return r.NextAttemptAtMs <= nowMs
	case notify.DeliverySending:
		return r.ClaimUntilMs <= nowMs
	}
	return false
}

// Claimed is the delivery as owner claims it at nowMs: SENDING until the deadline, one more
// attempt.
func (r Record) Claimed(owner string, nowMs int64) Record {
	c := r
	c.Status, c.ClaimOwner, c.ClaimUntilMs = notify.DeliverySending, owner, nowMs+ClaimFor.Milliseconds()
	c.Attempts++
	c.UpdatedAtMs = nowMs
	return c
}

// MaySend reports whether the claim still has enough time left at nowMs to start an attempt.
func (r Record) MaySend(nowMs int64) bool {
	return r.Status == notify.DeliverySending && nowMs+SendMargin.Milliseconds() < r.ClaimUntilMs
}

// Outcome is what one look at a delivery came to.
type Outcome string

// Outcomes.
const (
	OutcomeDelivered Outcome = "delivered"
	OutcomeRetrying  Outcome = "retrying"
	OutcomeDead      Outcome = "dead"
	// OutcomeSkipped: the delivery was not claimable (finished, claimed by another notifier, not
	// yet due, gone).
	OutcomeSkipped Outcome = "skipped"
	// OutcomeLapsed: the claim ran too short to send; the delivery is left to the next notifier.
	OutcomeLapsed Outcome = "lapsed"
)

// AfterDelivered is the delivery once its endpoint accepted the attempt.
func (r Record) AfterDelivered(out send.Outcome, nowMs int64) Record {
	d := r.finished(nowMs)
	d.Status, d.DeliveredAtMs, d.NextAttemptAtMs = notify.DeliveryDelivered, nowMs, 0
	d.LastStatus, d.LastAnswer, d.LastError = out.Status, answerText(out), ""
	return d
}

// AfterFailure is the delivery after a failed attempt: PENDING again after wait, or DEAD once the
// attempts are spent or the failure would repeat on every attempt.
func (r Record) AfterFailure(out send.Outcome, wait time.Duration, nowMs int64) (Record, Outcome) {
	f := r
	f.ClaimOwner, f.ClaimUntilMs, f.UpdatedAtMs = "", 0, nowMs
	f.LastStatus, f.LastAnswer, f.LastError = out.Status, answerText(out), errorText(out.Err)
	if !out.Retryable || r.Attempts >= MaxAttempts {
		f = f.finished(nowMs)
		f.Status, f.NextAttemptAtMs = notify.DeliveryDead, 0
		return f, OutcomeDead
	}
	f.Status, f.NextAttemptAtMs = notify.DeliveryPending, nowMs+wait.Milliseconds()
	return f, OutcomeRetrying
}

// Abandoned is the delivery DEAD without an attempt, for why (its endpoint was removed or
// disabled, its notification is no longer stored): nothing it could be sent to or with is left.
func (r Record) Abandoned(why string, nowMs int64) Record {
	a := r.finished(nowMs)
	a.Status, a.NextAttemptAtMs, a.LastError = notify.DeliveryDead, 0, why
	return a
}

// finished clears the claim of a delivery that reached a final state at nowMs.
func (r Record) finished(nowMs int64) Record {
	f := r
	f.ClaimOwner, f.ClaimUntilMs, f.UpdatedAtMs = "", 0, nowMs
	return f
}

// ErrInFlight: the delivery is being sent under a live claim; a replay now would race it.
var ErrInFlight = problem.New(problem.Conflict, "the delivery is being sent",
	"The delivery is being sent right now; replay it once this attempt has ended.")

// ErrNoDelivery: no delivery of that notification to that endpoint (or its notification is no
// longer stored).
var ErrNoDelivery = problem.New(problem.NotFound, "delivery not found",
	"No delivery of this notification to this endpoint.")

// ErrBusy: the delivery kept changing while a replay tried to move it.
var ErrBusy = problem.New(problem.Unavailable, "the delivery kept changing",
	"The delivery kept changing; nothing was replayed. Retry it.")

// IsInFlight reports whether err says the delivery is being sent.
func IsInFlight(err error) bool { return errors.Is(err, ErrInFlight) }

// IsNoDelivery reports whether err says there is no such delivery.
func IsNoDelivery(err error) bool { return errors.Is(err, ErrNoDelivery) }

// Replayed is the delivery as an operator's replay at nowMs leaves it: PENDING, due at once,
// with a fresh set of attempts, one more replay counted. The last attempt's answer stays until
// the next attempt replaces it. A delivery under a live claim is refused (ErrInFlight); every
// other state is replayed, DELIVERED included: sending it again is what a replay is for.
func (r Record) Replayed(nowMs int64) (Record, error) {
	if r.Status == notify.DeliverySending && r.ClaimUntilMs > nowMs {
		return Record{}, ErrInFlight
	}
	p := r
	p.Status, p.Attempts, p.Replays = notify.DeliveryPending, 0, r.Replays+1
	p.NextAttemptAtMs, p.UpdatedAtMs, p.DeliveredAtMs = nowMs, nowMs, 0
	p.ClaimOwner, p.ClaimUntilMs = "", 0
	return p, nil
}

// due reports whether the delivery still needs a notifier, and when: its next attempt, or its
// claim's deadline.
func (r Record) due() (int64, bool) {
	switch r.Status {
	case notify.DeliveryPending:
		return r.NextAttemptAtMs, true
	case notify.DeliverySending:
		return r.ClaimUntilMs, true
	}
	return 0, false
}

// BackoffWindow is the window the wait after the failures-th failure (1-based) is drawn from:
// BackoffBase doubled after each failure, at most BackoffCap.
func BackoffWindow(failures int) time.Duration {
	w := BackoffBase
	for i := 1; i < failures && w < BackoffCap; i++ {
		w *= 2
	}
	return min(w, BackoffCap)
}

// Jitter draws a wait from [0, window] with u, a uniformly random 64-bit number: the high word of
// (window+1)·u, so every value of the window is as likely, u = 0 gives 0 and the largest u gives
// the whole window.
func Jitter(window time.Duration, u uint64) time.Duration {
	if window <= 0 {
		return 0
	}
	hi, _ := bits.Mul64(uint64(window)+1, u)
	return time.Duration(hi)
}

// answerText is an attempt's answer as the log keeps it: valid UTF-8 (DynamoDB strings must be),
// marked when send cut it.
func answerText(out send.Outcome) string {
	s := strings.ToValidUTF8(string(out.Answer), "\uFFFD")
	if out.AnswerCut {
		s += "…"
	}
	return s
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sortedIDs are the endpoints' ids, sorted: the notification's record of whom it went to.
func sortedIDs(eps []endpoints.Endpoint) []string {
	ids := make([]string, 0, len(eps))
	for _, ep := range eps {
		ids = append(ids, ep.ID)
	}
	slices.Sort(ids)
	return ids
}
