package httpapi

import (
	"errors"
	"fmt"
	"mime"
	"net/http"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// checkJSON refuses a body declared as something other than JSON. A missing Content-Type is
// accepted: curl users forget it, and the body is validated as JSON anyway.
func checkJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && mt != "application/cloudevents+json" && mt != "application/cloudevents-batch+json") {
		return failure(problem.UnsupportedMediaType, fmt.Sprintf("Send JSON (application/json or application/cloudevents+json), not %q.", ct))
	}
	return nil
}

func (a *API) account(r *http.Request) accounts.Account {
	p, _ := PrincipalFrom(r.Context())
	return p.Account
}

// postEvent is POST /v1/events, in either content mode of the CloudEvents HTTP binding:
// structured (the event's JSON format as the body) or binary (the attributes in ce-* headers,
// the data as the body, Content-Type the data's type).
func (a *API) postEvent(w http.ResponseWriter, r *http.Request) error {
	binary := event.IsBinary(r.Header)
	if binary && isMediaType(r, event.StructuredContentType) {
		return badRequest("The request has ce-* headers (binary mode) and an " + event.StructuredContentType +
			" body (structured mode); send the event in one mode.")
	}
	if !binary {
		if err := checkJSON(r); err != nil {
			return err
		}
	}
	body, err := readBody(r, event.MaxEventBytes)
	if err != nil {
		return err
	}
	var accepted ingest.Accepted
	if binary {
		accepted, err = a.deps.Ingest.AcceptBinary(r.Context(), a.account(r), r.Header, body)
	} else {
		accepted, err = a.deps.Ingest.Accept(r.Context(), a.account(r), body)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, map[string]string{"id": accepted.ID, "status": "queued"})
}

// isMediaType reports whether the request's Content-Type is the media type mt.
func isMediaType(r *http.Request, mt string) bool {
	got, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && got == mt
}

// postBatch is POST /v1/events/batch: a JSON array of events (the HTTP binding's structured
// batch mode, application/cloudevents-batch+json, or plain application/json).
func (a *API) postBatch(w http.ResponseWriter, r *http.Request) error {
	if event.IsBinary(r.Header) {
		return badRequest("A batch is a JSON array of events in the body; binary mode (ce-* headers) is for POST /v1/events.")
	}
	if err := checkJSON(r); err != nil {
		return err
	}
	body, err := readBody(r, event.MaxBatchBytes)
	if err != nil {
		return err
	}
	results, err := a.deps.Ingest.AcceptBatch(r.Context(), a.account(r), body)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, map[string]any{"results": results})
}

type eventBody struct {
	ID                string        `json:"id"`
	Status            ledger.Status `json:"status"`
	Cycle             string        `json:"cycle"`
	ReceivedAt        string        `json:"receivedAt"`
	BillingAcceptedAt string        `json:"billingAcceptedAt,omitempty"`
	Reason            string        `json:"reason,omitempty"`
}

// getEvent is GET /v1/events/{id}: an account's event (its own; the operator names the account
// with account=). Another account's event answers exactly as an unknown id does.
func (a *API) getEvent(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, []string{"account"}); err != nil {
		return err
	}
	accountID, err := eventScope(r)
	if err != nil {
		return err
	}
	e, err := a.deps.Events.Get(r.Context(), accountID, r.PathValue("id"))
	if errors.Is(err, ledger.ErrNotFound) {
		return errNoEvent
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newEventBody(e))
}

type usageBody struct {
	Feature   string      `json:"feature"`
	Cycle     string      `json:"cycle"`
	Limit     plans.Limit `json:"limit"`
	Used      int64       `json:"used"`
	Held      int64       `json:"held"`
	Remaining *int64      `json:"remaining"`
	// Corrections is the sum of the cycle's correction rows: the meter holds used + corrections.
	Corrections int64 `json:"corrections"`
	// Grants are an allowance feature's grant rows in the cycle (allowance features only).
	Grants []grantBody `json:"grants,omitempty"`
}
