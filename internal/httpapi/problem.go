package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/event"
	"github.com/ferrymeter/ferry/internal/idempotency"
	"github.com/ferrymeter/ferry/internal/ingest"
	"github.com/ferrymeter/ferry/internal/ledger"
)

// ProblemContentType is the media type of every error answer (RFC 9457).
const ProblemContentType = "application/problem+json"

// problemTypePrefix makes problem type URIs: tag URIs (RFC 4151) name the problem kinds without
// promising a page behind them.
const problemTypePrefix = "tag:ferrymeter.dev,2026:problem:"

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

// Problem kinds.
const (
	kindInvalid      = "invalid-request"
	kindUnauthorized = "unauthorized"
	kindNotFound     = "not-found"
	kindMethod       = "method-not-allowed"
	kindConflict     = "conflict"
	kindAgreement    = "agreement-locked"
	kindTooLarge     = "too-large"
	kindLimitReached = "limit-reached"
	kindUnavailable  = "unavailable"
	kindInternal     = "internal"
	kindUnsupported  = "unsupported-media-type"
	kindInFlight     = "idempotency-in-flight"
	kindKeyReused    = "idempotency-key-reused"
)

// Problem kinds of the usage holds.
const (
	kindRateLimited    = "rate-limited"
	kindLimitUnknown   = "limit-unknown"
	kindHoldNotRunning = "hold-not-running"
	kindHoldKeyReused  = "key-reused"
)

func newProblem(status int, kind, title, detail string) *Problem {
	return &Problem{Type: problemTypePrefix + kind, Title: title, Status: status, Detail: detail}
}

func (p *Problem) with(key string, v any) *Problem {
	if p.Extras == nil {
		p.Extras = map[string]any{}
	}
	p.Extras[key] = v
	return p
}

func (p *Problem) header(k, v string) *Problem {
	if p.headers == nil {
		p.headers = map[string]string{}
	}
	p.headers[k] = v
	return p
}

// Error makes a Problem usable as an error returned by a handler.
func (p *Problem) Error() string { return p.Title + ": " + p.Detail }

// badRequest is a 400 with a detail.
func badRequest(detail string) *Problem {
	return newProblem(http.StatusBadRequest, kindInvalid, "Invalid request", detail)
}

func notFound(detail string) *Problem {
	return newProblem(http.StatusNotFound, kindNotFound, "Not found", detail)
}

func unauthorized(detail string) *Problem {
	return newProblem(http.StatusUnauthorized, kindUnauthorized, "Unauthorized", detail).header("WWW-Authenticate", `Bearer realm="ferry"`)
}

// retryAfterUnavailableSeconds is what a 503 asks clients to wait.
const retryAfterUnavailableSeconds = 1

// problemFor maps an error to its problem document: the one place that knows which domain error
// is which HTTP status. Anything unrecognised is a 500 whose detail never shows the cause.
func problemFor(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	if p, ok := holdsProblem(err); ok {
		return p
	}
	if p, ok := meterProblem(err); ok {
		return p
	}
	var refused *ingest.RefusedError
	var batchInvalid *ingest.BatchInvalidError
	var invalidAccount *accounts.InvalidError
	var invalidEvent *event.InvalidError
	var invalidKey *idempotency.KeyError
	var linkTaken *accounts.LinkTakenError
	switch {
	case errors.As(err, &linkTaken):
		return newProblem(http.StatusConflict, kindConflict, "Conflict",
			"The "+linkTaken.Kind.Field()+" "+strconv.Quote(linkTaken.ID)+" is linked to another account; unlink it there first.").
			with("field", linkTaken.Kind.Field())
	case errors.Is(err, accounts.ErrLinkContended):
		return newProblem(http.StatusServiceUnavailable, kindUnavailable, "Service unavailable",
			"The account's linked ids changed while this request ran, so nothing was changed; retry it.").
			header("Retry-After", strconv.Itoa(retryAfterUnavailableSeconds))
	case errors.As(err, &invalidKey):
		return badRequest(invalidKey.Error() + ".")
	case errors.Is(err, idempotency.ErrInFlight):
		return newProblem(http.StatusConflict, kindInFlight, "Request in flight",
			"A request with this Idempotency-Key is still being processed; retry after it completes.").
			header("Retry-After", strconv.Itoa(int(idempotency.RetryAfterInFlight/time.Second)))
	case errors.Is(err, idempotency.ErrKeyReused):
		return newProblem(http.StatusUnprocessableEntity, kindKeyReused, "Idempotency-Key reused",
			"This Idempotency-Key was used with a different request (method, path or body); send a new key for a new request.")
	case errors.Is(err, idempotency.ErrUnavailable):
		return newProblem(http.StatusServiceUnavailable, kindUnavailable, "Service unavailable",
			"The Idempotency-Key could not be checked, so nothing was done; retry it.").
			header("Retry-After", strconv.Itoa(retryAfterUnavailableSeconds))
	case errors.As(err, &invalidAccount):
		return badRequest(invalidAccount.Error()).with("errors", invalidAccount.Problems)
	case errors.As(err, &invalidEvent):
		return badRequest(invalidEvent.Reason)
	case errors.As(err, &batchInvalid):
		return badRequest(batchInvalid.Detail).with("results", batchInvalid.Results)
	case errors.As(err, &refused):
		return newProblem(http.StatusPaymentRequired, kindLimitReached, "Limit reached", refused.Detail).
			with("remaining", refused.Remaining)
	case errors.Is(err, accounts.ErrUnauthenticated):
		return unauthorized("The API key is not valid.")
	case errors.Is(err, accounts.ErrNotFound), errors.Is(err, ledger.ErrNotFound):
		return notFound("No such resource.")
	case errors.Is(err, accounts.ErrExists):
		return newProblem(http.StatusConflict, kindConflict, "Conflict", "An account with this id already exists.")
	case errors.Is(err, accounts.ErrAgreementLocked):
		return newProblem(http.StatusConflict, kindAgreement, "Agreement start is fixed",
			"The agreement start cannot change after the account's first usage.")
	case errors.Is(err, ingest.ErrTooLarge):
		return newProblem(http.StatusRequestEntityTooLarge, kindTooLarge, "Request too large", err.Error())
	case errors.Is(err, ingest.ErrQueueUnavailable):
		return newProblem(http.StatusServiceUnavailable, kindUnavailable, "Service unavailable",
			"The event could not be queued and was not accepted; retry it.").
			header("Retry-After", strconv.Itoa(retryAfterUnavailableSeconds))
	}
	return newProblem(http.StatusInternalServerError, kindInternal, "Internal error",
		"Something went wrong on our side; nothing about the request is shown here. Retry later.")
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
