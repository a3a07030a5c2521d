package httpapi

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrymeter/ferry/internal/inbox"
	"github.com/ferrymeter/ferry/internal/inbox/webhooks"
	kindewebhook "github.com/ferrymeter/ferry/internal/provider/kinde/webhook"
	stripewebhook "github.com/ferrymeter/ferry/internal/provider/stripe/webhook"
)

// Headers of the webhook routes.
const (
	// HeaderWebhookID is Kinde's per-delivery id, the same on every attempt. It is not signed,
	// so it is recorded on the receipt and never used as the dedupe key.
	HeaderWebhookID = "webhook-id"
	// HeaderStripeSignature carries Stripe's timestamped HMAC of the body.
	HeaderStripeSignature = "Stripe-Signature"
)

// Problem kinds of the webhook inbox.
const (
	kindSignature = "invalid-signature"
	kindNotEvent  = "not-an-event"
)

// requireMediaType refuses a body whose Content-Type is not want (parameters such as charset
// are allowed).
func requireMediaType(r *http.Request, want string) error {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == want {
		return nil
	}
	return newProblem(http.StatusUnsupportedMediaType, kindUnsupported, "Unsupported media type",
		fmt.Sprintf("Send the delivery as %s, not %q.", want, ct))
}

// storedBody is a webhook's answer: the stored event's id and whether this delivery was a copy.
// It is sent only once the delivery is stored; it never means applied.
type storedBody struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

// kindeWebhook is POST /v1/webhooks/kinde: a JWT body signed with a key of Kinde's JWKS.
func (a *API) kindeWebhook(w http.ResponseWriter, r *http.Request) error {
	if err := requireMediaType(r, "application/jwt"); err != nil {
		return err
	}
	body, err := readBody(r, inbox.MaxPayloadBytes)
	if err != nil {
		return err
	}
	stored, err := a.deps.Webhooks.Kinde(r.Context(), body, r.Header.Get(HeaderWebhookID))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, storedBody{ID: stored.ID, Duplicate: stored.Duplicate})
}

// stripeWebhook is POST /v1/webhooks/stripe: a JSON event with a Stripe-Signature header.
func (a *API) stripeWebhook(w http.ResponseWriter, r *http.Request) error {
	if err := requireMediaType(r, "application/json"); err != nil {
		return err
	}
	body, err := readBody(r, inbox.MaxPayloadBytes)
	if err != nil {
		return err
	}
	// The header is a comma-separated list (t=…,v1=…[,v1=…]); API Gateway's payload v2 joins a
	// header's values with commas and the Lambda adapter splits them again, so join them back.
	signature := strings.Join(r.Header.Values(HeaderStripeSignature), ",")
	stored, err := a.deps.Webhooks.Stripe(r.Context(), body, signature)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, storedBody{ID: stored.ID, Duplicate: stored.Duplicate})
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

// strictQuery refuses a parameter the route does not take, or one given twice: a misspelt
// filter must not silently list everything.
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
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return badRequest(strings.Join(problems, "; ")+".").with("errors", problems)
	}
	return nil
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

// inboxProblem maps the inbox's errors to problems; ok is false for any other error.
func inboxProblem(err error) (p *Problem, ok bool) {
	var kinde *kindewebhook.UnverifiableError
	var stripe *stripewebhook.UnverifiableError
	var notEvent *stripewebhook.NotAnEventError
	var invalid *inbox.InvalidError
	switch {
	case errors.As(err, &kinde):
		return newProblem(http.StatusUnauthorized, kindSignature, "Signature not verified",
			"The delivery was not stored: "+kinde.Reason+"."), true
	case errors.As(err, &stripe):
		return newProblem(http.StatusUnauthorized, kindSignature, "Signature not verified",
			"The delivery was not stored: "+stripe.Reason+"."), true
	case errors.As(err, &notEvent):
		return newProblem(http.StatusBadRequest, kindNotEvent, "Not a billing event",
			"The delivery was not stored: "+notEvent.Reason+"."), true
	case errors.As(err, &invalid):
		return badRequest(invalid.Error()+".").with("errors", invalid.Problems), true
	case errors.Is(err, kindewebhook.ErrKeysUnavailable), errors.Is(err, webhooks.ErrNotConfigured):
		return newProblem(http.StatusServiceUnavailable, kindUnavailable, "Service unavailable",
			"The delivery cannot be verified right now, so it was not stored; the provider's retry will be.").
			header("Retry-After", strconv.Itoa(retryAfterUnavailableSeconds)), true
	case errors.Is(err, inbox.ErrUnavailable):
		return newProblem(http.StatusServiceUnavailable, kindUnavailable, "Service unavailable",
			"The delivery could not be stored; retry it (nothing was stored).").
			header("Retry-After", strconv.Itoa(retryAfterUnavailableSeconds)), true
	case errors.Is(err, inbox.ErrNotFound):
		return notFound("No billing event with this id."), true
	case errors.Is(err, inbox.ErrBusy):
		return newProblem(http.StatusServiceUnavailable, kindUnavailable, "Service unavailable",
			"The billing event kept changing; nothing was replayed. Retry it.").
			header("Retry-After", strconv.Itoa(retryAfterUnavailableSeconds)), true
	}
	return nil, false
}
