// Package inbox is Ferry's webhook inbox: billing events that Kinde and Stripe send over a
// network that repeats, delays and drops them, stored before they are answered and applied so
// that the plan and the allowance come out right whatever arrives, in whatever order, and
// wherever a worker stops.
//
// The pipeline (seed "Bottle"):
//
//  1. Intake stores each verified delivery with a conditional insert keyed by (source, the
//     provider's signed event id); a copy adds 1 to the event's seen count; every delivery
//     writes a receipt. The answer (200) means stored, never applied.
//  2. A worker claims a stored event under a 30 s lease and applies its effect and its APPLIED
//     (or IGNORED) mark in one DynamoDB transaction, guarded by the versions it decided from; a
//     cancelled transaction is resolved by reading durable state again.
//  3. Effects are safe to repeat: a plan change applies only if it is newer, by event time, than
//     the change the account is on; allowance grants are keyed rows (account, cycle, plan), so
//     a payment and its plan change grant once whichever comes first. A change of the plan or
//     the status tells the platform (account.plan_changed, account.status_changed) in the
//     transaction that applies it, so it is told exactly when it lands.
//  4. Failures back off (5 s, 30 s, 2 min, 10 min, 1 h) and end DEAD after six attempts, with a
//     metric, an alarm and billing_event.dead (with no account when none is known). A nudge
//     queue starts the worker; a sweep every minute finds what a lost nudge or a dead worker
//     left behind.
//
// The decisions (Claim, AfterFailure, Decide) are pure functions in decide.go; the Worker runs
// them against state read from the Store.
package inbox

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Source is the billing provider an event came from.
type Source string

// Sources.
const (
	Kinde  Source = "kinde"
	Stripe Source = "stripe"
)

// Valid reports whether s is a known source.
func (s Source) Valid() bool { return s == Kinde || s == Stripe }

// Status of a stored event.
type Status string

// Statuses. RECEIVED and FAILED wait for a claim (FAILED until its next attempt is due);
// PROCESSING is claimed under a lease; APPLIED, IGNORED and DEAD are final (a replay puts any
// of them back to RECEIVED).
const (
	Received   Status = "RECEIVED"
	Processing Status = "PROCESSING"
	Applied    Status = "APPLIED"
	Ignored    Status = "IGNORED"
	Failed     Status = "FAILED"
	Dead       Status = "DEAD"
)

// Statuses lists every status.
var Statuses = []Status{Received, Processing, Applied, Ignored, Failed, Dead}

// Final reports whether the status ends the event's processing.
func (s Status) Final() bool { return s == Applied || s == Ignored || s == Dead }

// Valid reports whether s is a status.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Limits of the inbox, with their units.
const (
	// LeaseDuration is how long a claim keeps other workers off an event.
	LeaseDuration = 30 * time.Second
	// MaxAttempts is how many claims an event gets before it is DEAD.
	MaxAttempts = 6
	// Retention is how long events, payloads and receipts are kept: far past every provider's
	// retry horizon (Kinde about 36 hours, Stripe 3 days) and past the 30 days Stripe keeps
	// events retrievable, so any copy a provider can still send finds its event.
	Retention = 90 * 24 * time.Hour
	// MaxPayloadBytes bounds a delivery's body.
	MaxPayloadBytes = 256 << 10
	// MaxEventIDBytes bounds a provider's event id (the dedupe key).
	MaxEventIDBytes = 255
	// MaxReceiptsShown bounds the receipts an event's read returns (its seen count says how many
	// there are).
	MaxReceiptsShown = 100
	// DefaultPageSize and MaxPageSize bound a page of GET /v1/billing-events.
	DefaultPageSize = 50
	MaxPageSize     = 100
	// maxDelaySeconds is SQS's longest message delay.
	maxDelaySeconds = 900
)

// Backoff is the wait after a failed attempt: after attempt n (1-based) the next is due
// Backoff[n-1] later. The attempt after the last wait is the last one.
var Backoff = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour}

// ID is the stored event's id for a provider event: opaque, fixed-length and derived from
// (source, provider event id), so every copy of a delivery names the same event.
func ID(source Source, providerEventID string) string {
	sum := sha256.Sum256([]byte(string(source) + "\n" + providerEventID))
	return idPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:])[:idChars])
}

const (
	idPrefix = "bev_"
	idChars  = 26
)

// ValidID reports whether id can name a stored event.
func ValidID(id string) bool {
	if len(id) != len(idPrefix)+idChars || !strings.HasPrefix(id, idPrefix) {
		return false
	}
	for _, c := range id[len(idPrefix):] {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// ValidEventID reports whether a provider's event id can be a dedupe key: 1–255 bytes of
// printable, valid UTF-8. Kinde's (event_…) and Stripe's (evt_…) are far shorter.
func ValidEventID(id string) bool {
	if id == "" || len(id) > MaxEventIDBytes || !utf8.ValidString(id) {
		return false
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// EventTime is an instant as a provider stated it, to the nanosecond. The zero value is "not
// known".
type EventTime struct {
	ns  int64
	set bool
}

// Known reports whether the time was read.
func (t EventTime) Known() bool { return t.set }

// UnixNano is the time in nanoseconds since the epoch.
func (t EventTime) UnixNano() int64 { return t.ns }

// Ms is the time in epoch milliseconds, rounded down.
func (t EventTime) Ms() int64 { return t.ns / int64(time.Millisecond) }

// Time is the time as a time.Time (UTC).
func (t EventTime) Time() time.Time { return time.Unix(0, t.ns).UTC() }

// ErrTimeUnreadable is what ParseTime returns for a time that cannot be read exactly.
var ErrTimeUnreadable = errors.New("the time cannot be read exactly")

// maxFractionDigits is the finest fraction of a second an event time may state: nanoseconds.
// A finer one cannot be held exactly, and is refused rather than silently cut.
const maxFractionDigits = 9

// ParseTime reads an RFC 3339 time with any offset and up to nanoseconds, exactly. It refuses a
// time it could only read by rounding (more than nine fraction digits), one before 1970 or past
// 2262 (out of the nanosecond range), and anything that is not RFC 3339.
func ParseTime(s string) (EventTime, error) {
	if digits := fractionDigits(s); digits > maxFractionDigits {
		return EventTime{}, fmt.Errorf("%w: %q has %d fraction digits; at most %d (nanoseconds) can be kept", ErrTimeUnreadable, s, digits, maxFractionDigits)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return EventTime{}, fmt.Errorf("%w: %q is not an RFC 3339 time", ErrTimeUnreadable, s)
	}
	return fromTime(t, s)
}

func fromTime(t time.Time, text string) (EventTime, error) {
	// time.UnixNano is defined from 1678 to 2262; order keys need a non-negative count.
	if t.Before(time.Unix(0, 0)) || t.After(time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)) {
		return EventTime{}, fmt.Errorf("%w: %q is outside 1970–2261", ErrTimeUnreadable, text)
	}
	return EventTime{ns: t.UnixNano(), set: true}, nil
}

// fractionDigits counts the digits after the seconds' decimal point in an RFC 3339 time.
func fractionDigits(s string) int {
	i := strings.IndexByte(s, '.')
	if i < 0 {
		return 0
	}
	n := 0
	for _, c := range s[i+1:] {
		if c < '0' || c > '9' {
			break
		}
		n++
	}
	return n
}

// UnixSeconds is an event time given in whole seconds (Stripe's created).
func UnixSeconds(sec int64) (EventTime, error) {
	return fromTime(time.Unix(sec, 0), fmt.Sprintf("%d", sec))
}

// OrderKey orders billing events: by event time to the nanosecond, then — for equal times —
// by source and provider event id in byte order. A later event has a greater key; two events
// never tie, and the order does not depend on when either arrived, so every arrival order ends
// in the same state. The key sorts as a string, which is how DynamoDB compares it.
func OrderKey(t EventTime, source Source, providerEventID string) string {
	return fmt.Sprintf("%020d|%s|%s", t.UnixNano(), source, providerEventID)
}

// Delivery is one verified delivery, ready to store: everything in it but the receipt fields
// is covered by the provider's signature.
type Delivery struct {
	Source Source
	// EventID is the provider's signed event id (Kinde's event_id claim, Stripe's event.id): the
	// dedupe key.
	EventID string
	Type    string
	// OccurredAt is the event's time (Kinde event_timestamp, else timestamp; Stripe created);
	// unknown when the payload's time cannot be read exactly.
	OccurredAt EventTime
	// Payload is the verified event: Kinde's token claims, Stripe's event body.
	Payload []byte
	// APIVersion is the Stripe API version the event was rendered in.
	APIVersion string
	// Receipt fields, not covered by the signature.
	WebhookID  string // Kinde's webhook-id header
	KeyID      string // the key that signed a Kinde token
	ReceivedAt time.Time
}

// PayloadSHA256 is the hex SHA-256 of a payload, kept on the event and every receipt so a copy
// whose payload differs from the stored one shows.
func PayloadSHA256(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

// Event is one stored billing event.
type Event struct {
	ID      string
	Source  Source
	EventID string
	Type    string
	// OccurredAtMs is the event time (0: unknown); OrderKey orders it among billing events.
	OccurredAtMs int64
	OrderKey     string
	APIVersion   string
	Status       Status
	// Attempts counts claims since the event was stored or last replayed.
	Attempts  int
	SeenCount int
	Replays   int
	// Rev counts the writes to the event's status; every transition is conditioned on it.
	Rev              int64
	FirstSeenAtMs    int64
	LastSeenAtMs     int64
	UpdatedAtMs      int64
	LeaseExpiresAtMs int64
	NextAttemptAtMs  int64
	// AccountID is the account the event was last resolved to ("" before it is).
	AccountID string
	// Result says what an APPLIED event did; Reason why an event was IGNORED, FAILED or DEAD.
	Result        string
	Reason        string
	FinishedAtMs  int64
	PayloadSHA256 string
	ExpiresAt     int64
}

// Receipt is one delivery of an event.
type Receipt struct {
	ReceivedAtMs int64
	// Duplicate is false for the delivery that stored the event.
	Duplicate     bool
	WebhookID     string
	KeyID         string
	PayloadSHA256 string
}

// Stored is what intake answers: the event's id and whether the delivery was a copy.
type Stored struct {
	ID        string
	Duplicate bool
}

// Errors of the inbox. Adapters translate DynamoDB outcomes into these; each carries the kind
// its callers are answered by.
var (
	// ErrNotFound: no such event (or, for an account, not one of its own: the answer is the
	// same, so another account's event does not show it exists).
	ErrNotFound = problem.New(problem.NotFound, "billing event not found", "No billing event with this id.")
	// ErrOtherAccount: an account key named another account in a list.
	ErrOtherAccount = problem.New(problem.NotFound, "account not found", "No such account for this key; an account key lists its own events.")
	// ErrCancelled: a transaction or conditional write was refused. The store does not say
	// why; the caller reads durable state to find out. Callers never see it.
	ErrCancelled = errors.New("write cancelled")
	// ErrUnavailable: the event could not be stored (the provider should retry).
	ErrUnavailable = problem.New(problem.Unavailable, "the billing event could not be stored",
		"The delivery could not be stored; nothing was stored, so retry it.")
)

func sortStrings(s []string) { sort.Strings(s) }
