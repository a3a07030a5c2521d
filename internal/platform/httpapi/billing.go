package httpapi

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// storedBody is a webhook's answer: the stored event's id and whether this delivery was a copy.
// It is sent only once the delivery is stored; it never means applied.
type storedBody struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

// storeWebhook stores the delivery the server's verifier authenticated (the function's
// SignatureVerifier checked its signature, media type and size for this route) and answers 200.
func (a *API) storeWebhook(w http.ResponseWriter, r *http.Request) error {
	p, _ := PrincipalFrom(r.Context())
	body, err := readBody(r, maxSignedBodyBytes)
	if err != nil {
		return err
	}
	stored, err := a.deps.Webhooks.Store(r.Context(), p.Provider, r.Header, body)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, storedBody{ID: stored.ID, Duplicate: stored.Duplicate})
}

// kindeWebhook is POST /v1/webhooks/kinde: a JWT body signed with a key of Kinde's JWKS.
func (a *API) kindeWebhook(w http.ResponseWriter, r *http.Request) error { return a.storeWebhook(w, r) }

// stripeWebhook is POST /v1/webhooks/stripe: a JSON event with a Stripe-Signature header.
func (a *API) stripeWebhook(w http.ResponseWriter, r *http.Request) error {
	return a.storeWebhook(w, r)
}

// billingEventBody is a stored billing event as the API shows it.
type billingEventBody struct {
	ID              string  `json:"id"`
	Source          string  `json:"source"`
	ProviderEventID string  `json:"providerEventId"`
	Type            string  `json:"type"`
	OccurredAt      *string `json:"occurredAt"`
	FirstSeenAt     string  `json:"firstSeenAt"`
	LastSeenAt      string  `json:"lastSeenAt"`
	SeenCount       int     `json:"seenCount"`
	Status          string  `json:"status"`
	Attempts        int     `json:"attempts"`
	AccountID       *string `json:"accountId"`
	Result          string  `json:"result,omitempty"`
	Reason          string  `json:"reason,omitempty"`
	NextAttemptAt   string  `json:"nextAttemptAt,omitempty"`
	// Receipts are shown by GET /v1/billing-events/{id} only.
	Receipts []receiptBody `json:"receipts,omitempty"`
}

type receiptBody struct {
	ReceivedAt    string `json:"receivedAt"`
	Duplicate     bool   `json:"duplicate"`
	WebhookID     string `json:"webhookId,omitempty"`
	KeyID         string `json:"keyId,omitempty"`
	PayloadSHA256 string `json:"payloadSha256"`
}

func newBillingEventBody(e inbox.Event) billingEventBody {
	b := billingEventBody{
		ID: e.ID, Source: string(e.Source), ProviderEventID: e.EventID, Type: e.Type,
		FirstSeenAt: rfc3339(e.FirstSeenAtMs), LastSeenAt: rfc3339(e.LastSeenAtMs), SeenCount: e.SeenCount,
		Status: string(e.Status), Attempts: e.Attempts, AccountID: nonEmpty(e.AccountID), Result: e.Result, Reason: e.Reason,
	}
	if e.OccurredAtMs != 0 {
		t := rfc3339(e.OccurredAtMs)
		b.OccurredAt = &t
	}
	if e.Status == inbox.Failed {
		b.NextAttemptAt = rfc3339(e.NextAttemptAtMs)
	}
	return b
}

// scope is who the caller may see events of.
func scope(r *http.Request) inbox.Scope {
	p, _ := PrincipalFrom(r.Context())
	if p.Operator {
		return inbox.Scope{Operator: true}
	}
	return inbox.Scope{AccountID: p.Account.ID}
}

// listParams are the query parameters GET /v1/billing-events takes.
var listParams = []string{"account", "status", "cursor", "limit"}

// strictQuery refuses a parameter the route does not take, one given twice, or one given
// empty: a misspelt or blank filter must not silently list everything.
func strictQuery(r *http.Request, allowed []string) error {
	var problems []string
	for name, values := range r.URL.Query() {
		known := false
		for _, a := range allowed {
			known = known || a == name
		}
		takes := "no query parameters"
		if len(allowed) > 0 {
			takes = strings.Join(allowed, ", ")
		}
		switch {
		case !known:
			problems = append(problems, fmt.Sprintf("unknown query parameter %q (this route takes %s)", name, takes))
		case len(values) > 1:
			problems = append(problems, fmt.Sprintf("query parameter %q is given %d times", name, len(values)))
		case values[0] == "":
			problems = append(problems, fmt.Sprintf("query parameter %q is empty; leave it out instead", name))
		}
	}
	sort.Strings(problems)
	return problem.Fields(problems)
}

// listBillingEvents is GET /v1/billing-events: an account's own events, or (operator) every
// event or one account's; optionally in one status; newest first, paged by cursor.
func (a *API) listBillingEvents(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, listParams); err != nil {
		return err
	}
	q := r.URL.Query()
	limit := 0
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || strconv.Itoa(n) != raw {
			return badRequest(fmt.Sprintf("limit must be a whole number from 1 to %d.", inbox.MaxPageSize))
		}
		if n == 0 {
			return badRequest(fmt.Sprintf("limit must be a whole number from 1 to %d.", inbox.MaxPageSize))
		}
		limit = n
	}
	page, err := a.deps.BillingEvents.List(r.Context(), inbox.ListInput{
		Scope: scope(r), AccountID: q.Get("account"), Status: q.Get("status"), Cursor: q.Get("cursor"), Limit: limit,
	})
	if err != nil {
		return err
	}
	items := make([]billingEventBody, 0, len(page.Events))
	for _, e := range page.Events {
		items = append(items, newBillingEventBody(e))
	}
	var next *string
	if page.Next != "" {
		next = &page.Next
	}
	return writeJSON(w, http.StatusOK, map[string]any{"items": items, "next": next})
}

// getBillingEvent is GET /v1/billing-events/{id}: the event and its receipts. Another account's
// event answers exactly as an unknown id does.
func (a *API) getBillingEvent(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, nil); err != nil {
		return err
	}
	e, receipts, err := a.deps.BillingEvents.Get(r.Context(), scope(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	b := newBillingEventBody(e)
	b.Receipts = make([]receiptBody, 0, len(receipts))
	for _, rc := range receipts {
		b.Receipts = append(b.Receipts, receiptBody{
			ReceivedAt: rfc3339(rc.ReceivedAtMs), Duplicate: rc.Duplicate, WebhookID: rc.WebhookID, KeyID: rc.KeyID, PayloadSHA256: rc.PayloadSHA256,
		})
	}
	return writeJSON(w, http.StatusOK, b)
}

// replayBillingEvent is POST /v1/billing-events/{id}/replay: back to RECEIVED, 202. The body,
// if any, must be empty or an empty JSON object.
func (a *API) replayBillingEvent(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, nil); err != nil {
		return err
	}
	var none struct{}
	if err := decodeOptionalJSON(r, &none); err != nil {
		return err
	}
	e, err := a.deps.BillingEvents.Replay(r.Context(), scope(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, newBillingEventBody(e))
}
