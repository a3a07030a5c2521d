// Package problem names the kinds of failure Ferry reports to the callers of its operations, and
// gives refused input its one shape. Domain packages give their errors a kind (and say what the
// caller may be told); the HTTP layer maps each kind to a problem document in one table
// (internal/platform/httpapi/problem.go). Nothing here knows HTTP, so a domain package can say "the limit
// is reached" without saying "402".
package problem

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind is what went wrong, as a caller needs to know it to act: fix the input, authenticate,
// wait and retry, stop.
type Kind int

// Kinds. The zero Kind is Internal: an error nobody classified is a fault on Ferry's side, and
// its cause is never shown.
const (
	Internal Kind = iota
	// Invalid: the input is refused; nothing was stored. Fix it and send it again.
	Invalid
	// Unauthenticated: no credentials, or not the right ones for the route.
	Unauthenticated
	// NotFound: no such resource for this caller.
	NotFound
	// MethodNotAllowed: the path exists, the method does not.
	MethodNotAllowed
	// UnsupportedMediaType: the body is declared as something Ferry does not read.
	UnsupportedMediaType
	// TooLarge: the body is over the route's limit.
	TooLarge
	// Conflict: the resource already exists.
	Conflict
	// AgreementLocked: the account's agreement start is fixed by its first usage.
	AgreementLocked
	// LimitReached: the limit has no room for the request. Nothing moved.
	LimitReached
	// LimitUnknown: the limit cannot be known, so nothing is promised (fail closed).
	LimitUnknown
	// RateLimited: too many requests of this kind; retry after the window.
	RateLimited
	// Unavailable: a dependency did not answer or stayed contended; nothing was done. Retry.
	Unavailable
	// InFlight: a request with the same Idempotency-Key is still running.
	InFlight
	// IdempotencyKeyReused: the Idempotency-Key belongs to a different request.
	IdempotencyKeyReused
	// HoldNotRunning: the hold is settled or expired and takes no more charges.
	HoldNotRunning
	// KeyReused: a job or step key was sent again with a different request.
	KeyReused
	// AccountInactive: the account is inactive and records no new usage. Nothing moved.
	AccountInactive
	// OutcomeUnknown: a write to a dependency failed after it may have landed. Retrying with
	// the same identity (an event id) is safe, and the only way to be sure.
	OutcomeUnknown
	// InvalidHeader: the request's head is not valid HTTP (a control character in a header).
	InvalidHeader
	// SignatureInvalid: a billing provider's delivery whose signature cannot be verified;
	// nothing was stored.
	SignatureInvalid
	// Forbidden: the caller is who it says, and the request may still not run as sent (a console
	// request that changes something without its session's CSRF token, or sent from another
	// site).
	Forbidden
	// Unsupported: the stack lacks what the request needs (a lab that needs ferry dev's
	// stand-ins, asked of a deployed stack); nothing was done, and retrying will not help.
	Unsupported
	// Busy: the operation is bounded in how many may run at once, and that many are running;
	// nothing was done, and a retry later can run.
	Busy
	// RequestTimeout: the request's body did not arrive within the server's bound; nothing was
	// done. Send it again.
	RequestTimeout

	numKinds
)

// Kinds lists every kind, Internal first.
func Kinds() []Kind {
	all := make([]Kind, numKinds)
	for k := range numKinds {
		all[k] = k
	}
	return all
}

var kindNames = [numKinds]string{
	Internal: "internal", Invalid: "invalid", Unauthenticated: "unauthenticated", NotFound: "not-found",
	MethodNotAllowed: "method-not-allowed", UnsupportedMediaType: "unsupported-media-type", TooLarge: "too-large",
	Conflict: "conflict", AgreementLocked: "agreement-locked", LimitReached: "limit-reached",
	LimitUnknown: "limit-unknown", RateLimited: "rate-limited", Unavailable: "unavailable", InFlight: "in-flight",
	IdempotencyKeyReused: "idempotency-key-reused", HoldNotRunning: "hold-not-running", KeyReused: "key-reused",
	AccountInactive: "account-inactive", OutcomeUnknown: "outcome-unknown", InvalidHeader: "invalid-header", SignatureInvalid: "signature-invalid",
	Forbidden: "forbidden", Unsupported: "unsupported", Busy: "busy", RequestTimeout: "request-timeout",
}

func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Error is an error that knows its kind.
type Error interface {
	error
	Kind() Kind
}

// Public is what the caller of an operation may be told about its failure.
type Public struct {
	// Detail explains this occurrence in a sentence meant for the caller.
	Detail string
	// Facts are named values the caller can act on ("remaining", "needed").
	Facts map[string]any
	// RetryAfter, when set, is how long the caller should wait before trying again.
	RetryAfter time.Duration
}

// Describer is an Error that says more than its kind.
type Describer interface {
	Error
	Public() Public
}

// Describe returns the kind of err (Internal when nothing in its chain has one) and what its
// caller may be told. Without a detail of its own, an error's detail is its whole message.
func Describe(err error) (Kind, Public) {
	var e Error
	if !errors.As(err, &e) {
		return Internal, Public{}
	}
	var p Public
	if d, ok := e.(Describer); ok {
		p = d.Public()
	}
	if p.Detail == "" {
		p.Detail = err.Error()
	}
	return e.Kind(), p
}

// KindOf is the kind of err: Describe without the description.
func KindOf(err error) Kind {
	k, _ := Describe(err)
	return k
}

// New returns a sentinel error of a kind, compared with errors.Is: message is what logs say,
// detail what the caller is told ("" tells the caller the whole wrapped message).
func New(kind Kind, message, detail string) error {
	return &sentinel{kind: kind, message: message, detail: detail}
}

type sentinel struct {
	kind            Kind
	message, detail string
}

func (s *sentinel) Error() string  { return s.message }
func (s *sentinel) Kind() Kind     { return s.kind }
func (s *sentinel) Public() Public { return Public{Detail: s.detail} }

// InputError is the one shape of refused input: every problem found, all at once, so a client
// fixes them in one round. Nothing was stored.
type InputError struct {
	// Problems lists every problem, each a short clause ("amount must be an integer from 1 to …").
	Problems []string
	// Facts are named values shown beside the problems (a batch's per-item results).
	Facts map[string]any
	// fields marks problems found field by field (a Validate), which callers also get as a list.
	fields bool
}

// Fields is what an input's Validate returns: nil when problems is empty, otherwise an
// *InputError listing them, which callers get joined and as a list.
func Fields(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return &InputError{Problems: problems, fields: true}
}

// Input refuses an input as a whole (not JSON, not an event, a malformed header) for one reason.
func Input(reason string) *InputError { return &InputError{Problems: []string{reason}} }

// Error joins the problems.
func (e *InputError) Error() string { return strings.Join(e.Problems, "; ") }

// Kind implements Error.
func (e *InputError) Kind() Kind { return Invalid }

// Public implements Describer: the joined problems, and the list itself when they were found
// field by field.
func (e *InputError) Public() Public {
	p := Public{Detail: e.Error(), Facts: e.Facts}
	if e.fields {
		p.Facts = map[string]any{"errors": e.Problems}
		for k, v := range e.Facts {
			p.Facts[k] = v
		}
	}
	return p
}

// IsInvalid reports whether err is refused input.
func IsInvalid(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}
