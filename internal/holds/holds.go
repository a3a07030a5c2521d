// Package holds makes a usage limit a promise rather than a check. A job holds part of the
// account's limit before it starts — the check and the hold are one DynamoDB transaction on the
// budget row of (account, feature, cycle) — is charged step by step against its hold and capped
// at it, and pays at settlement only for what it used; the rest goes back to the budget. A hold
// whose worker stops charging loses its lease and is settled by the sweeper, as EXPIRED, at the
// usage it recorded.
//
// The decisions (admit, chargeStep, settle) are pure functions in decide.go; Service runs them
// against durable state read from the Store, and resolves every cancelled transaction by reading
// that state again, never from the error's reasons.
package holds

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Limits of the holds, with their units.
const (
	// LeaseDuration is how long a hold stays RUNNING without a sign of life: every charge renews
	// it, and the sweeper settles a hold whose lease has run out.
	LeaseDuration = 2 * time.Minute
	// DefaultRatePerMinute is how many new holds one account may open per minute.
	DefaultRatePerMinute = 120
	// rateWindow is the rate limit's fixed window.
	rateWindow = time.Minute
	// Retention is how long a settled hold and a charge step are kept after their last write:
	// as long as they exist, a repeated job key or step key finds them instead of acting again.
	Retention = 400 * 24 * time.Hour
	// MaxAmount bounds one hold, one step and one settlement, in units of the feature. It keeps
	// every sum the budget row carries far below 2^53, where DynamoDB numbers (and the local
	// emulator's float64) stop being exact integers.
	MaxAmount = 1_000_000_000_000
	// MaxKeyLength bounds job and step keys, in bytes.
	MaxKeyLength = 255
)

// Status of a hold. RUNNING is the only state that takes charges; SETTLED and EXPIRED are final.
type Status string

// Statuses.
const (
	Running Status = "RUNNING"
	Settled Status = "SETTLED"
	Expired Status = "EXPIRED"
)

// Final reports whether the hold is settled (by its worker or by the sweeper).
func (s Status) Final() bool { return s == Settled || s == Expired }

// Hold is a part of an account's limit promised to one running job.
type Hold struct {
	ID        string
	AccountID string
	// Key is the client's job key; (AccountID, Key) determines ID.
	Key     string
	Feature string
	// Cycle is the billing cycle whose budget row the hold sits on, fixed at admission.
	Cycle string
	// Amount is what the hold holds: the most the job can be charged.
	Amount int64
	// Limit is the limit the hold was admitted under, kept for the record: a later plan change
	// never touches a running hold.
	Limit plans.Limit
	// Used is what the charges recorded; after settlement, the final usage it was settled at.
	Used   int64
	Status Status
	// LeaseExpiresAtMs is when the hold expires unless a charge renews it.
	LeaseExpiresAtMs int64
	// Charged and Released are set by settlement: Charged + Released = Amount.
	Charged     int64
	Released    int64
	SettledAtMs int64
	CreatedAtMs int64
	UpdatedAtMs int64
	// Rev counts the hold's writes; every write is conditioned on the revision it read.
	Rev int64
}

// Settlement is the final result of a hold, stored on it once and answered to every settle.
func (h Hold) Settlement() Settlement {
	return Settlement{HoldID: h.ID, Status: h.Status, Used: h.Used, Charged: h.Charged, Released: h.Released}
}

// LeaseExpired reports whether the hold's lease has run out at nowMs.
func (h Hold) LeaseExpired(nowMs int64) bool { return nowMs >= h.LeaseExpiresAtMs }

// Step is one charge step's answer, stored under its key so a retried step gets the same answer
// and charges nothing again.
type Step struct {
	HoldID string
	Key    string
	// Requested is what the step asked to charge.
	Requested int64
	// Charged is what it was charged: Requested, or less when the hold ran out (Capped).
	Charged int64
	Capped  bool
	// Used is the hold's recorded usage after the step, and Amount what the hold holds.
	Used   int64
	Amount int64
	Status Status
	// LeaseExpiresAtMs is the lease the step renewed.
	LeaseExpiresAtMs int64
	CreatedAtMs      int64
}

// Settlement is what settling a hold did.
type Settlement struct {
	HoldID string
	// Status is SETTLED (by its worker) or EXPIRED (by the sweeper).
	Status Status
	// Used is the final usage the hold was settled at.
	Used int64
	// Charged moved to the budget's used; Released went back to the budget.
	Charged  int64
	Released int64
}

// ID derives a hold's id from the account and the client's job key, so the same job key always
// names the same hold, a retried reservation finds it, and keys never collide across accounts.
// It is "hold_" and 26 characters of lower-case base32 (128 bits of SHA-256).
func ID(accountID, key string) string {
	sum := sha256.Sum256([]byte(accountID + "\x00" + key))
	return "hold_" + strings.ToLower(idEncoding.EncodeToString(sum[:16]))
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// ValidID reports whether id has the shape ID produces. Anything else names no hold.
func ValidID(id string) bool {
	const prefix = "hold_"
	if len(id) != len(prefix)+26 || !strings.HasPrefix(id, prefix) {
		return false
	}
	for _, c := range id[len(prefix):] {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// ReserveInput asks for a new hold.
type ReserveInput struct {
	// Key is the client's job key: the same key names the same hold.
	Key     string
	Feature string
	Amount  int64
}

// Validate returns every problem with the input at once.
func (in ReserveInput) Validate(catalog plans.Catalog) error {
	var problems []string
	problems = append(problems, validKey("key", in.Key)...)
	if in.Feature == "" {
		problems = append(problems, "feature is required")
	} else if !catalog.HasFeature(in.Feature) {
		problems = append(problems, fmt.Sprintf("feature %q is unknown (known: %s)", in.Feature, strings.Join(catalog.Features(), ", ")))
	}
	if in.Amount < 1 || in.Amount > MaxAmount {
		problems = append(problems, fmt.Sprintf("amount must be an integer from 1 to %d", int64(MaxAmount)))
	}
	return problem.Fields(problems)
}

// ChargeInput charges one step of a job against its hold.
type ChargeInput struct {
	HoldID string
	// Key is the step's key: a retried step with the same key charges nothing again.
	Key string
	// Amount is what the step used. Zero charges nothing and only renews the lease.
	Amount int64
}

// Validate returns every problem with the input at once.
func (in ChargeInput) Validate() error {
	problems := validKey("key", in.Key)
	if in.Amount < 0 || in.Amount > MaxAmount {
		problems = append(problems, fmt.Sprintf("amount must be an integer from 0 to %d", int64(MaxAmount)))
	}
	return problem.Fields(problems)
}

// SettleInput ends a job.
type SettleInput struct {
	HoldID string
	// Used is the job's final usage; nil settles at what the charges recorded.
	Used *int64
}

// Validate returns every problem with the input at once.
func (in SettleInput) Validate() error {
	var problems []string
	if in.Used != nil && (*in.Used < 0 || *in.Used > MaxAmount) {
		problems = append(problems, fmt.Sprintf("used must be an integer from 0 to %d", int64(MaxAmount)))
	}
	return problem.Fields(problems)
}

func validKey(field, key string) []string {
	switch {
	case key == "":
		return []string{field + " is required"}
	case len(key) > MaxKeyLength:
		return []string{fmt.Sprintf("%s must be at most %d bytes", field, MaxKeyLength)}
	case !utf8.ValidString(key):
		return []string{field + " must be valid UTF-8"}
	case strings.IndexFunc(key, unicode.IsControl) >= 0:
		return []string{field + " must not contain control characters"}
	}
	return nil
}

// Errors the service returns, each with its kind.
var (
	// ErrNotFound: no hold with this id for this account (another account's hold included).
	ErrNotFound = problem.New(problem.NotFound, "hold not found", "No hold with this id for this account.")
	// ErrBusy: the budget row stayed contended through every bounded retry; nothing was held.
	ErrBusy = problem.New(problem.Unavailable, "the budget is busy; nothing was held",
		"The budget was too busy to take the request; nothing was held or charged. Retry it with the same key.")
	// ErrRefusalUntold: the limit refused the hold and the refusal's notification (hold.refused)
	// could not be written; nothing was held. The retry is refused again, and tells it.
	ErrRefusalUntold = problem.New(problem.Unavailable, "hold refused, and the refusal could not be told",
		"Nothing was held, and the answer could not be recorded. Retry the request with the same key.")
)

// RefusedError is a reservation refused because the limit has no room for it. Nothing was held.
type RefusedError struct {
	Needed    int64
	Remaining int64
	Limit     int64
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("The job needs %d and %d is left.", e.Needed, e.Remaining)
}

// Kind implements problem.Error.
func (e *RefusedError) Kind() problem.Kind { return problem.LimitReached }

// Public implements problem.Describer: what is left, and what the job asked for.
func (e *RefusedError) Public() problem.Public {
	return problem.Public{Detail: e.Error(), Facts: map[string]any{"remaining": e.Remaining, "needed": e.Needed}}
}

// RateLimitedError is a reservation refused because the account opened too many holds this
// window. Nothing was held.
type RateLimitedError struct {
	PerMinute  int64
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("This account may open %d holds a minute; retry in %d s.", e.PerMinute, int64(e.RetryAfter/time.Second))
}

// Kind implements problem.Error.
func (e *RateLimitedError) Kind() problem.Kind { return problem.RateLimited }

// Public implements problem.Describer: when the window opens again, in whole seconds.
func (e *RateLimitedError) Public() problem.Public {
	seconds := int64(e.RetryAfter.Seconds())
	return problem.Public{Detail: e.Error(), Facts: map[string]any{"retryAfter": seconds}, RetryAfter: time.Duration(seconds) * time.Second}
}

// NotRunningError is a charge against a hold that is settled or expired: the job must stop.
type NotRunningError struct {
	HoldID string
	Status Status
}

func (e *NotRunningError) Error() string {
	return fmt.Sprintf("hold %s is %s and takes no more charges", e.HoldID, e.Status)
}

// Kind implements problem.Error.
func (e *NotRunningError) Kind() problem.Kind { return problem.HoldNotRunning }

// Public implements problem.Describer: the job is told to stop, and why.
func (e *NotRunningError) Public() problem.Public {
	return problem.Public{
		Detail: "The hold is " + string(e.Status) + " and takes no more charges; the job must stop.",
		Facts:  map[string]any{"holdStatus": e.Status},
	}
}

// KeyReusedError is a key sent again with a different request: a job key with another feature
// or amount, or a step key with another amount. The earlier request stands; nothing changed.
type KeyReusedError struct{ Detail string }

func (e *KeyReusedError) Error() string { return e.Detail }

// Kind implements problem.Error.
func (e *KeyReusedError) Kind() problem.Kind { return problem.KeyReused }
