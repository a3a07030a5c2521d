// Package outbox is Ferry's transactional outbox to Stripe. Stripe meters take deltas, and a
// delta sent twice counts twice, so a delta is never sent from the work that computed it: the
// reporter writes an outbox row in the same DynamoDB transaction that moves the account's
// lastSent, and a drainer sends rows later, off every request path.
//
// A row's key is (account, feature, cycle, total): the total the row brings the meter to, fixed
// where the number stops changing. That key is the meter event's identifier, which Stripe
// deduplicates over at least 24 hours, so a row sent twice (a drainer that died after Stripe
// accepted it) still moves the meter once. A repair row is keyed by the reconciler's evidence
// instead. Identifiers never come from a job, an attempt or a request.
//
// A drainer claims a row with a deadline before sending it (two drainers never send one row at
// once; a claim whose drainer died expires and the row is taken over), backs off exponentially
// after a failure, and dead-letters the row after a bounded number of tries (DEAD, with a metric,
// an alarm, and the outbox.dead notification written with the DEAD mark). The decisions are plain functions here; Table and Drainer apply them.
package outbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Status of a row.
type Status string

// Statuses. PENDING and SENDING still have to reach Stripe; the others are final, except that a
// SENT row can later be CANCELLED by the reconciler (an over-billing repair).
const (
	Pending   Status = "PENDING"
	Sending   Status = "SENDING"
	Sent      Status = "SENT"
	Dead      Status = "DEAD"
	Review    Status = "REVIEW"
	Cancelled Status = "CANCELLED"
)

// Due reports whether a row still has to be sent.
func (s Status) Due() bool { return s == Pending || s == Sending }

// Kind of row.
type Kind string

// Kinds.
const (
	// KindReport is the reporter's row: it brings the meter from the last total sent to Total.
	KindReport Kind = "report"
	// KindRepair is the reconciler's row: it brings the meter to the ledger, keyed by the
	// evidence that found it short.
	KindRepair Kind = "repair"
)

// Limits of the outbox, with their units.
const (
	// MaxAttempts bounds the sends of one row; after the last failure it is DEAD.
	MaxAttempts = 8
	// BackoffBase is the wait after the first failure; each further failure doubles it, up to
	// BackoffCap: 30 s, 1, 2, 4, 8, 16, 32 minutes (about an hour of Stripe outage ridden out).
	BackoffBase = 30 * time.Second
	BackoffCap  = time.Hour
	// ClaimFor is how long a claim keeps other drainers off a row: far longer than one send
	// (the Stripe client gives up after 10 s).
	ClaimFor = 2 * time.Minute
	// SendMargin is the claim time that must be left to start a send: a drainer that was
	// paused past it lets the claim lapse rather than race the drainer that takes it over.
	SendMargin = 30 * time.Second
	// LateSendGrace is how long after its cycle's end an unsent row may still be sent: Stripe
	// accepts events dated in a past period and waits about an hour before it finalizes the
	// period's invoice. Past it the row goes to the review list instead.
	LateSendGrace = time.Hour
)

// Row is one meter event owed to Stripe.
type Row struct {
	Account string
	Feature string
	Cycle   string
	// Key is the row's key within its cycle: "total#<total>" for a report, "repair#<evidence>"
	// for a repair.
	Key  string
	Kind Kind
	// Total is the meter's total after this row (reports); Delta what it moves the meter by.
	Total int64
	Delta int64
	// Absolute says the meter event carries the figure itself (Total), for a Stripe meter that
	// takes its last event's value (MAX, UNIQUE_COUNT and LATEST meters); otherwise it carries
	// Delta, for a meter that sums its events.
	Absolute bool
	// EventName and Customer are the meter event's; MeterID names the meter it lands on.
	EventName string
	MeterID   string
	Customer  string
	// TimestampMs dates the meter event inside its cycle, fixed when the row is written.
	TimestampMs int64
	CycleEndMs  int64
	Status      Status
	Attempts    int
	// NextAttemptAtMs is when a PENDING row may be sent; ClaimUntilMs when a SENDING row's claim
	// lapses.
	NextAttemptAtMs int64
	ClaimUntilMs    int64
	ClaimOwner      string
	LastError       string
	SentAtMs        int64
	CancelledAtMs   int64
	CreatedAtMs     int64
	UpdatedAtMs     int64
	// Rev counts the row's writes; every rewrite is conditioned on the revision it read.
	Rev int64
}

// ReportKey is the key of the report row that brings a cycle's meter to total. epoch counts the
// times the reconciler took Stripe's meter down by cancelling events (which lowers lastSent, so
// a later total could repeat one already used); it is 0 until then and leaves the key as is.
func ReportKey(total, epoch int64) string {
	if epoch == 0 {
		return fmt.Sprintf("total#%016d", total)
	}
	return fmt.Sprintf("total#%016d#e%d", total, epoch)
}

// AbsoluteKey is the key of the report row that sends the figure total absolute, as the seq-th
// Stripe report of the cycle (the report state counts them, in the transaction that writes the
// row): a figure can come back to a value sent before (a LATEST value, a correction), and the
// meter event that brings it back must not carry the identifier Stripe already deduplicated.
func AbsoluteKey(total, seq int64) string { return fmt.Sprintf("total#%016d#s%d", total, seq) }

// RepairKey is the key of a repair row for the evidence named evidenceKey.
func RepairKey(evidenceKey string) string { return "repair#" + evidenceKey }

// Identifier is the meter event identifier Stripe sees for a row: the row's full key, written
// out ("acct_42:events:2026-10:8457", or "…:repair:<evidence>"), or, when that is longer than
// Stripe allows, a hash of it. Either way it is a function of durable state only.
func Identifier(account, feature, cycle, key string) string {
	suffix := key
	if t, ok := strings.CutPrefix(key, "total#"); ok {
		t, epoch, _ := strings.Cut(t, "#")
		n, err := strconv.ParseInt(t, 10, 64)
		if err == nil {
			suffix = strconv.FormatInt(n, 10)
			if epoch != "" {
				suffix += ":" + epoch
			}
		}
	} else if r, ok := strings.CutPrefix(key, "repair#"); ok {
		suffix = "repair:" + r
	}
	id := account + ":" + feature + ":" + cycle + ":" + suffix
	if len(id) <= maxIdentifierLength {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "ferry-" + hex.EncodeToString(sum[:20])
}

// maxIdentifierLength is Stripe's limit on a meter event identifier.
const maxIdentifierLength = 100

// Identifier is the row's meter event identifier.
func (r Row) Identifier() string { return Identifier(r.Account, r.Feature, r.Cycle, r.Key) }

// Value is the meter event's value: the figure for an absolute row, else the delta.
func (r Row) Value() int64 {
	if r.Absolute {
		return r.Total
	}
	return r.Delta
}

// Backoff is the wait before the next send after the attempt-th failure (1-based).
func Backoff(attempt int) time.Duration {
	d := BackoffBase
	for i := 1; i < attempt && d < BackoffCap; i++ {
		d *= 2
	}
	return min(d, BackoffCap)
}

// Claimable reports whether a drainer may claim the row at nowMs: a PENDING row whose next
// attempt is due, or a SENDING row whose claim has lapsed (its drainer died or stalled).
func (r Row) Claimable(nowMs int64) bool {
	switch r.Status {
	case Pending:
		return r.NextAttemptAtMs <= nowMs
	case Sending:
		return r.ClaimUntilMs <= nowMs
	}
	return false
}

// Claimed is the row as a drainer claims it: SENDING until the deadline, one more attempt.
func (r Row) Claimed(owner string, nowMs int64) Row {
	c := r
	c.Status, c.ClaimOwner, c.ClaimUntilMs = Sending, owner, nowMs+ClaimFor.Milliseconds()
	c.Attempts++
	c.UpdatedAtMs = nowMs
	return c
}

// MaySend reports whether a claim still has enough time left at nowMs to start a send.
func (r Row) MaySend(nowMs int64) bool {
	return r.Status == Sending && nowMs+SendMargin.Milliseconds() < r.ClaimUntilMs
}

// Outcome of one send.
type Outcome string

// Outcomes.
const (
	OutcomeSent     Outcome = "sent"
	OutcomeRetrying Outcome = "retrying"
	OutcomeDead     Outcome = "dead"
	OutcomeReview   Outcome = "review"
	// OutcomeSkipped: the row was not claimable (sent, claimed by another drainer, not yet due).
	OutcomeSkipped Outcome = "skipped"
	// OutcomeLapsed: the claim ran too short to send; the row is left to the next drainer.
	OutcomeLapsed Outcome = "lapsed"
)

// AfterFailure is the row after a failed send: PENDING with the next attempt backed off, or DEAD
// once the attempts are spent or the failure is for good (Stripe refused the request itself).
func (r Row) AfterFailure(cause string, retryable bool, retryAfter time.Duration, nowMs int64) (Row, Outcome) {
	f := r
	f.LastError, f.UpdatedAtMs, f.ClaimOwner, f.ClaimUntilMs = cause, nowMs, "", 0
	if !retryable || r.Attempts >= MaxAttempts {
		f.Status = Dead
		return f, OutcomeDead
	}
	wait := max(Backoff(r.Attempts), retryAfter)
	f.Status, f.NextAttemptAtMs = Pending, nowMs+wait.Milliseconds()
	return f, OutcomeRetrying
}

// AfterSend is the row once Stripe accepted its event.
func (r Row) AfterSend(nowMs int64) Row {
	s := r
	s.Status, s.SentAtMs, s.UpdatedAtMs, s.ClaimOwner, s.ClaimUntilMs, s.LastError = Sent, nowMs, nowMs, "", 0, ""
	return s
}

// TooLate reports whether the row's cycle ended longer ago than LateSendGrace at nowMs.
func (r Row) TooLate(nowMs int64) bool {
	return r.CycleEndMs > 0 && nowMs >= r.CycleEndMs+LateSendGrace.Milliseconds()
}

// dueAt is when a row next needs a drainer (0 for a final row): its next attempt, or its claim's
// deadline.
func (r Row) dueAt() int64 {
	switch r.Status {
	case Pending:
		return r.NextAttemptAtMs
	case Sending:
		return r.ClaimUntilMs
	}
	return 0
}
