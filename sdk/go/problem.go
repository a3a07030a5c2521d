package ferry

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ProblemTypePrefix starts every problem type Ferry answers: the kind follows it.
const ProblemTypePrefix = "tag:ferrymeter.dev,2026:problem:"

// Kind is a kind of problem, the last part of its type URI.
type Kind string

// The kinds of problem Ferry answers (its problem table, internal/platform/httpapi/problem.go).
const (
	KindInternal             Kind = "internal"
	KindInvalidRequest       Kind = "invalid-request"
	KindUnauthorized         Kind = "unauthorized"
	KindNotFound             Kind = "not-found"
	KindMethodNotAllowed     Kind = "method-not-allowed"
	KindUnsupportedMediaType Kind = "unsupported-media-type"
	KindTooLarge             Kind = "too-large"
	KindConflict             Kind = "conflict"
	KindAgreementLocked      Kind = "agreement-locked"
	KindLimitReached         Kind = "limit-reached"
	KindLimitUnknown         Kind = "limit-unknown"
	KindRateLimited          Kind = "rate-limited"
	KindUnavailable          Kind = "unavailable"
	KindIdempotencyInFlight  Kind = "idempotency-in-flight"
	KindIdempotencyKeyReused Kind = "idempotency-key-reused"
	KindHoldNotRunning       Kind = "hold-not-running"
	KindKeyReused            Kind = "key-reused"
	KindAccountInactive      Kind = "account-inactive"
	KindOutcomeUnknown       Kind = "outcome-unknown"
	KindInvalidHeader        Kind = "invalid-header"
	KindInvalidSignature     Kind = "invalid-signature"
	KindForbidden            Kind = "forbidden"
	KindUnsupported          Kind = "unsupported"
	KindBusy                 Kind = "busy"
	KindRequestTimeout       Kind = "request-timeout"
)

// ProblemError is an RFC 9457 problem document Ferry answered, as an error. Every kind this client
// knows comes wrapped in its own type (which embeds *ProblemError); an unknown kind, or an answer that
// is not a problem document, is a bare *ProblemError.rror.
type ProblemError struct {
	// Kind is the part of Type after ProblemTypePrefix ("" for a type of another form).
	Kind   Kind
	Type   string
	Title  string
	Status int
	Detail string
	// Extensions are the document's other members, by name ("remaining", "errors", …).
	Extensions map[string]json.RawMessage
	// RetryAfter is the answer's Retry-After, when it had one.
	RetryAfter time.Duration
}

func (p *ProblemError) Error() string {
	if p.Detail == "" {
		return fmt.Sprintf("ferry: %d %s", p.Status, p.Title)
	}
	return fmt.Sprintf("ferry: %d %s: %s", p.Status, p.Title, p.Detail)
}

func (p *ProblemError) problem() *ProblemError { return p }

// Extension decodes the extension member name into v, reporting whether it was present.
func (p *ProblemError) Extension(name string, v any) bool {
	raw, ok := p.Extensions[name]
	return ok && json.Unmarshal(raw, v) == nil
}

// AsProblem returns the problem document in err's chain, whatever its kind.
func AsProblem(err error) (*ProblemError, bool) {
	var pe interface{ problem() *ProblemError }
	if errors.As(err, &pe) {
		return pe.problem(), true
	}
	return nil, false
}

// KindOf is the kind of the problem in err's chain ("" when there is none).
func KindOf(err error) Kind {
	if p, ok := AsProblem(err); ok {
		return p.Kind
	}
	return ""
}

func isKind(err error, k Kind) bool { return KindOf(err) == k }

// One error type per kind. Each embeds the *ProblemError; the kinds with extension members carry
// them decoded.
type (
	// InternalError: something failed on Ferry's side; the detail never shows the cause.
	InternalError struct{ *ProblemError }
	// InvalidRequestError: the input was refused and nothing was stored. Errors lists every
	// problem with an account's fields; Results answers each item of a batch none of whose
	// items was valid.
	InvalidRequestError struct {
		*ProblemError
		Errors  []string
		Results []BatchItemResult
	}
	// UnauthorizedError: no key, or not the key this route needs.
	UnauthorizedError struct{ *ProblemError }
	// NotFoundError: no such resource, or another account's.
	NotFoundError struct{ *ProblemError }
	// MethodNotAllowedError: the path does not take the method.
	MethodNotAllowedError struct{ *ProblemError }
	// UnsupportedMediaTypeError: the body's media type is not one the route reads.
	UnsupportedMediaTypeError struct{ *ProblemError }
	// TooLargeError: the body is over the route's limit.
	TooLargeError struct{ *ProblemError }
	// ConflictError: the request conflicts with the resource (an id that exists, a hold no
	// longer running). Field names the linked id another account holds, when that is why.
	ConflictError struct {
		*ProblemError
		Field string
	}
	// AgreementLockedError: the agreement start is fixed after the account's first usage.
	AgreementLockedError struct{ *ProblemError }
	// LimitReachedError: the limit has no room; nothing moved. Remaining is what is left;
	// Needed, on a refused hold, what it asked for.
	LimitReachedError struct {
		*ProblemError
		Remaining int
		Needed    int
	}
	// LimitUnknownError: the limit cannot be known, so nothing is promised (fail closed).
	LimitUnknownError struct{ *ProblemError }
	// RateLimitedError: too many new holds; RetryAfterSeconds says when one may be admitted.
	RateLimitedError struct {
		*ProblemError
		RetryAfterSeconds int
	}
	// UnavailableError: a dependency is unavailable and nothing was done.
	UnavailableError struct{ *ProblemError }
	// IdempotencyInFlightError: a request with the same Idempotency-Key is still running.
	IdempotencyInFlightError struct{ *ProblemError }
	// IdempotencyKeyReusedError: the Idempotency-Key belongs to a different request.
	IdempotencyKeyReusedError struct{ *ProblemError }
	// HoldNotRunningError: the hold is settled or expired; the job must stop. HoldStatus says
	// which.
	HoldNotRunningError struct {
		*ProblemError
		HoldStatus HoldStatus
	}
	// KeyReusedError: a job or step key was sent again with a different request.
	KeyReusedError struct{ *ProblemError }
	// AccountInactiveError: the account is inactive and records no new usage.
	AccountInactiveError struct{ *ProblemError }
	// OutcomeUnknownError: the write may or may not have landed; sending the same event ids
	// again is safe, and the client does so.
	OutcomeUnknownError struct{ *ProblemError }
	// InvalidHeaderError: the request's head is not valid HTTP.
	InvalidHeaderError struct{ *ProblemError }
	// InvalidSignatureError: a webhook delivery whose signature cannot be verified.
	InvalidSignatureError struct{ *ProblemError }
	// ForbiddenError: a console request refused as sent.
	ForbiddenError struct{ *ProblemError }
	// UnsupportedError: the stack lacks what the request needs.
	UnsupportedError struct{ *ProblemError }
	// BusyError: as many runs as may run at once are running.
	BusyError struct{ *ProblemError }
	// RequestTimeoutError: the request's body did not arrive within the server's bound; nothing
	// was done, and the client sends it again.
	RequestTimeoutError struct{ *ProblemError }
)

// kinds maps each known kind to its error type.
var kinds = map[Kind]func(p *ProblemError) error{
	KindInternal: func(p *ProblemError) error { return &InternalError{p} },
	KindInvalidRequest: func(p *ProblemError) error {
		e := &InvalidRequestError{ProblemError: p}
		p.Extension("errors", &e.Errors)
		p.Extension("results", &e.Results)
		return e
	},
	KindUnauthorized:         func(p *ProblemError) error { return &UnauthorizedError{p} },
	KindNotFound:             func(p *ProblemError) error { return &NotFoundError{p} },
	KindMethodNotAllowed:     func(p *ProblemError) error { return &MethodNotAllowedError{p} },
	KindUnsupportedMediaType: func(p *ProblemError) error { return &UnsupportedMediaTypeError{p} },
	KindTooLarge:             func(p *ProblemError) error { return &TooLargeError{p} },
	KindConflict: func(p *ProblemError) error {
		e := &ConflictError{ProblemError: p}
		p.Extension("field", &e.Field)
		return e
	},
	KindAgreementLocked: func(p *ProblemError) error { return &AgreementLockedError{p} },
	KindLimitReached: func(p *ProblemError) error {
		e := &LimitReachedError{ProblemError: p}
		p.Extension("remaining", &e.Remaining)
		p.Extension("needed", &e.Needed)
		return e
	},
	KindLimitUnknown: func(p *ProblemError) error { return &LimitUnknownError{p} },
	KindRateLimited: func(p *ProblemError) error {
		e := &RateLimitedError{ProblemError: p}
		p.Extension("retryAfter", &e.RetryAfterSeconds)
		return e
	},
	KindUnavailable:          func(p *ProblemError) error { return &UnavailableError{p} },
	KindIdempotencyInFlight:  func(p *ProblemError) error { return &IdempotencyInFlightError{p} },
	KindIdempotencyKeyReused: func(p *ProblemError) error { return &IdempotencyKeyReusedError{p} },
	KindHoldNotRunning: func(p *ProblemError) error {
		e := &HoldNotRunningError{ProblemError: p}
		p.Extension("holdStatus", &e.HoldStatus)
		return e
	},
	KindKeyReused:        func(p *ProblemError) error { return &KeyReusedError{p} },
	KindAccountInactive:  func(p *ProblemError) error { return &AccountInactiveError{p} },
	KindOutcomeUnknown:   func(p *ProblemError) error { return &OutcomeUnknownError{p} },
	KindInvalidHeader:    func(p *ProblemError) error { return &InvalidHeaderError{p} },
	KindInvalidSignature: func(p *ProblemError) error { return &InvalidSignatureError{p} },
	KindForbidden:        func(p *ProblemError) error { return &ForbiddenError{p} },
	KindUnsupported:      func(p *ProblemError) error { return &UnsupportedError{p} },
	KindBusy:             func(p *ProblemError) error { return &BusyError{p} },
	KindRequestTimeout:   func(p *ProblemError) error { return &RequestTimeoutError{p} },
}

// problemFromAnswer turns a non-2xx answer into the error of its kind. An answer that is not a
// problem document (a proxy's HTML page, an empty 502) is a *ProblemError with the HTTP status.
func problemFromAnswer(status int, header http.Header, body []byte) error {
	p := &ProblemError{Status: status, Title: http.StatusText(status)}
	if wait, ok := serverWait(header); ok {
		p.RetryAfter = wait
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil {
		if s := strings.TrimSpace(string(body)); s != "" && len(s) <= 200 {
			p.Detail = s
		}
		return p
	}
	for name, raw := range members {
		var dst any
		switch name {
		case "type":
			dst = &p.Type
		case "title":
			dst = &p.Title
		case "status":
			dst = &p.Status
		case "detail":
			dst = &p.Detail
		default:
			if p.Extensions == nil {
				p.Extensions = map[string]json.RawMessage{}
			}
			p.Extensions[name] = raw
			continue
		}
		_ = json.Unmarshal(raw, dst)
	}
	if kind, ok := strings.CutPrefix(p.Type, ProblemTypePrefix); ok {
		p.Kind = Kind(kind)
	}
	if wrap, ok := kinds[p.Kind]; ok {
		return wrap(p)
	}
	return p
}
