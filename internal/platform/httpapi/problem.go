package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// ProblemContentType is the media type of every error answer (RFC 9457).
const ProblemContentType = "application/problem+json"

// problemTypePrefix makes problem type URIs: tag URIs (RFC 4151) name the problem kinds without
// promising a page behind them.
const problemTypePrefix = "tag:ferrymeter.dev,2026:problem:"

// Waits a problem asks clients for, by kind.
const (
	// retryAfterUnavailable is what a 503 asks clients to wait.
	retryAfterUnavailable = time.Second
	// retryAfterLimitUnknown is what a fail-closed 503 asks clients to wait: about the time the
	// provider is given between attempts.
	retryAfterLimitUnknown = 5 * time.Second
	// retryAfterBusy is what a busy answer asks clients to wait: about a short lab's run.
	retryAfterBusy = 10 * time.Second
)

// answer is how one kind of error is answered.
type answer struct {
	// slug names the problem type: problemTypePrefix + slug.
	slug   string
	title  string
	status int
	// retryAfter is the Retry-After of every answer of the kind, unless the error says otherwise.
	retryAfter time.Duration
	// header is a header every answer of the kind carries.
	header [2]string
}

// answers is the one table from a kind of error to the problem document its callers get. Domain
// errors say their kind and what the caller may be told (problem.Describe); this table says how
// HTTP answers it. An error of no kind is a 500 whose cause is never shown.
var answers = map[problem.Kind]answer{
	problem.Internal:             {slug: "internal", title: "Internal error", status: http.StatusInternalServerError},
	problem.Invalid:              {slug: "invalid-request", title: "Invalid request", status: http.StatusBadRequest},
	problem.Unauthenticated:      {slug: "unauthorized", title: "Unauthorized", status: http.StatusUnauthorized, header: [2]string{"WWW-Authenticate", `Bearer realm="ferry"`}},
	problem.NotFound:             {slug: "not-found", title: "Not found", status: http.StatusNotFound},
	problem.MethodNotAllowed:     {slug: "method-not-allowed", title: "Method not allowed", status: http.StatusMethodNotAllowed},
	problem.UnsupportedMediaType: {slug: "unsupported-media-type", title: "Unsupported media type", status: http.StatusUnsupportedMediaType},
	problem.TooLarge:             {slug: "too-large", title: "Request too large", status: http.StatusRequestEntityTooLarge},
	problem.Conflict:             {slug: "conflict", title: "Conflict", status: http.StatusConflict},
	problem.AgreementLocked:      {slug: "agreement-locked", title: "Agreement start is fixed", status: http.StatusConflict},
	problem.LimitReached:         {slug: "limit-reached", title: "Limit reached", status: http.StatusPaymentRequired},
	problem.LimitUnknown:         {slug: "limit-unknown", title: "Limit unknown", status: http.StatusServiceUnavailable, retryAfter: retryAfterLimitUnknown},
	problem.RateLimited:          {slug: "rate-limited", title: "Too many new holds", status: http.StatusTooManyRequests},
	problem.Unavailable:          {slug: "unavailable", title: "Service unavailable", status: http.StatusServiceUnavailable, retryAfter: retryAfterUnavailable},
	problem.InFlight:             {slug: "idempotency-in-flight", title: "Request in flight", status: http.StatusConflict, retryAfter: idempotency.RetryAfterInFlight},
	problem.IdempotencyKeyReused: {slug: "idempotency-key-reused", title: "Idempotency-Key reused", status: http.StatusUnprocessableEntity},
	problem.HoldNotRunning:       {slug: "hold-not-running", title: "Hold is not running", status: http.StatusConflict},
	problem.KeyReused:            {slug: "key-reused", title: "Key reused", status: http.StatusUnprocessableEntity},
	// An inactive account records no new usage: its own type, never limit-reached.
	problem.AccountInactive: {slug: "account-inactive", title: "Account inactive", status: http.StatusPaymentRequired},
	// A queue write that may have landed: never "not accepted" (503), and a retry with the same
	// event id is safe.
	problem.OutcomeUnknown: {slug: "outcome-unknown", title: "Outcome unknown", status: http.StatusBadGateway, retryAfter: retryAfterUnavailable},
	// A request head HTTP refuses; RequestHeadProblem answers 431, 501 and 505 with the same kind.
	problem.InvalidHeader: {slug: "invalid-header", title: "Invalid request head", status: http.StatusBadRequest},
	// A billing provider's delivery whose signature does not verify: nothing was stored. No
	// WWW-Authenticate: the provider authenticates by signature, not by a bearer key.
	problem.SignatureInvalid: {slug: "invalid-signature", title: "Signature not verified", status: http.StatusUnauthorized},
	// A console request refused as sent: no CSRF token, or another site's.
	problem.Forbidden: {slug: "forbidden", title: "Forbidden", status: http.StatusForbidden},
	// What the stack cannot do at all (a lab that needs ferry dev's stand-ins).
	problem.Unsupported: {slug: "unsupported", title: "Not supported here", status: http.StatusNotImplemented},
	// As many runs as may run at once are running (the console's labs).
	problem.Busy: {slug: "busy", title: "Too many at once", status: http.StatusTooManyRequests, retryAfter: retryAfterBusy},
	// A body that stalled past the server's bound (ferry dev's server; API Gateway in AWS).
	problem.RequestTimeout: {slug: "request-timeout", title: "Request timeout", status: http.StatusRequestTimeout},
}

// internalDetail is the whole detail of a 500: its cause is logged, never shown.
const internalDetail = "Something went wrong on our side; nothing about the request is shown here. Retry later."

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Extras are named extension members (e.g. "remaining").
	Extras map[string]any `json:"-"`
	// headers to add to the answer (Retry-After, WWW-Authenticate, Allow).
	headers map[string]string
}

// MarshalJSON flattens the extension members into the document.
func (p Problem) MarshalJSON() ([]byte, error) {
	doc := map[string]any{"type": p.Type, "title": p.Title, "status": p.Status}
	if p.Detail != "" {
		doc["detail"] = p.Detail
	}
	for k, v := range p.Extras {
		doc[k] = v
	}
	return json.Marshal(doc)
}

// Error makes a Problem usable as an error returned by a handler.
func (p *Problem) Error() string { return p.Title + ": " + p.Detail }

// newProblem is the problem document of a kind, as the table answers it, with this occurrence's
// public description.
func newProblem(kind problem.Kind, pub problem.Public) *Problem {
	a, ok := answers[kind]
	if !ok {
		a, pub = answers[problem.Internal], problem.Public{}
	}
	p := &Problem{Type: problemTypePrefix + a.slug, Title: a.title, Status: a.status, Detail: pub.Detail, Extras: pub.Facts}
	if a.status == http.StatusInternalServerError {
		p.Detail, p.Extras = internalDetail, nil
	}
	if a.header[0] != "" {
		p.Header(a.header[0], a.header[1])
	}
	if wait := max(pub.RetryAfter, 0); wait > 0 || a.retryAfter > 0 {
		if wait == 0 {
			wait = a.retryAfter
		}
		p.Header("Retry-After", strconv.Itoa(int(wait/time.Second)))
	}
	return p
}

// Failure is a problem of a kind that a handler raises itself, with its detail.
func Failure(kind problem.Kind, detail string) *Problem {
	return newProblem(kind, problem.Public{Detail: detail})
}

// Header adds a header the problem answer carries (Allow, Retry-After).
func (p *Problem) Header(k, v string) *Problem {
	if p.headers == nil {
		p.headers = map[string]string{}
	}
	p.headers[k] = v
	return p
}

// BadRequest refuses the request as a whole, with a detail.
func BadRequest(detail string) error { return problem.Input(detail) }

func NotFound(detail string) *Problem { return Failure(problem.NotFound, detail) }

func Unauthorized(detail string) *Problem { return Failure(problem.Unauthenticated, detail) }

// problemFor maps an error to its problem document through the table: the one place that knows
// which kind of error is which HTTP status.
func problemFor(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	return newProblem(problem.Describe(err))
}

// writeProblem answers with a problem document; a 500 logs its cause first.
func writeProblem(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	p := problemFor(err)
	if p.Status >= http.StatusInternalServerError {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", p.Status, "err", err)
	}
	for k, v := range p.headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", ProblemContentType)
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// MethodNotAllowed answers every request with the 405 problem and an Allow header naming the
// methods the path serves: for the local stack's own paths (/healthz, /openapi.yaml), which the
// route table does not list.
func MethodNotAllowed(log *slog.Logger, allowed ...string) http.Handler {
	allow := strings.Join(allowed, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := Failure(problem.MethodNotAllowed, fmt.Sprintf("%s is not allowed on %s.", r.Method, r.URL.Path))
		writeProblem(w, r, log, p.Header("Allow", allow))
	})
}
