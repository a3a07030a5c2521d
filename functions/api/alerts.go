package api

import (
	"context"
	"net/http"
	"time"

	"github.com/ferrymeter/ferry/internal/alerts/drain"
	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/alerts/send"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Bounds of the delivery log's pages. A page the route asks for without a limit is the store's
// default.
const maxDeliveriesPage = 100

// DeliveryLog is what the delivery-log routes read and replay through: package drain's Store.
// Its errors carry their problem kinds — not found for a delivery it does not have
// (drain.ErrNoDelivery), conflict for one being sent right now (drain.ErrInFlight), invalid for a
// cursor it never handed out — which the one problem table answers as 404, 409 and 400.
type DeliveryLog interface {
	// Log is a page of the endpoint's deliveries, newest first, and the cursor of the next page
	// ("" at the end); limit 0 is the store's default page.
	Log(ctx context.Context, endpointID, cursor string, limit int) ([]notify.Delivery, string, error)
	// Replay sends the delivery again from a fresh set of attempts.
	Replay(ctx context.Context, endpointID, notificationID string, nowMs int64) (notify.Delivery, error)
}

// WebhookEndpoints serves the routes of the webhook endpoints the operator registers.
type WebhookEndpoints struct {
	Store *endpoints.Store
	// Policy is where an endpoint's URL may point (see send.CheckURL): https only, and in ferry
	// dev http on loopback too.
	Policy send.Policy
	// Deliveries is the notifications' delivery log.
	Deliveries DeliveryLog
	Now        func() time.Time
}

// newWebhookEndpoints composes the routes of the webhook endpoints: the endpoints table, the URL
// policy the deployment's settings ask for, and the delivery log.
func newWebhookEndpoints(c *compose.Composer) *WebhookEndpoints {
	loopback, err := c.Settings().Bool(resources.EnvAlertsAllowLoopback)
	c.Fail(err)
	return &WebhookEndpoints{
		Store:      &endpoints.Store{DB: c.DynamoDB(), Table: c.Table(resources.TableWebhookEndpoints, resources.ReadWrite)},
		Policy:     send.Policy{AllowLoopback: loopback},
		Deliveries: &drain.Store{DB: c.DynamoDB(), Table: c.Table(resources.TableNotifications, resources.ReadWrite)},
		Now:        c.Now,
	}
}

// handlers are the webhook endpoints' route handlers, by route key.
func (h *WebhookEndpoints) handlers() httpapi.Handlers {
	return httpapi.Handlers{
		"POST /v1/webhook-endpoints":                                       h.create,
		"GET /v1/webhook-endpoints":                                        h.list,
		"GET /v1/webhook-endpoints/{id}":                                   h.get,
		"PATCH /v1/webhook-endpoints/{id}":                                 h.update,
		"DELETE /v1/webhook-endpoints/{id}":                                h.delete,
		"POST /v1/webhook-endpoints/{id}/rotate-secret":                    h.rotate,
		"GET /v1/webhook-endpoints/{id}/deliveries":                        h.deliveries,
		"POST /v1/webhook-endpoints/{id}/deliveries/{notification}/replay": h.replay,
	}
}

// endpointBody is an endpoint as the API shows it: never a secret's value, only when each
// secret that still signs was made and when it stops.
type endpointBody struct {
	ID  string `json:"id"`
	URL string `json:"url"`
	// Kinds and Accounts are [] for every kind and every account.
	Kinds       []string     `json:"kinds"`
	Accounts    []string     `json:"accounts"`
	Description *string      `json:"description"`
	Disabled    bool         `json:"disabled"`
	Secrets     []secretBody `json:"secrets"`
	CreatedAt   string       `json:"createdAt"`
	UpdatedAt   string       `json:"updatedAt"`
}

// secretBody describes one signing secret; ExpiresAt is null for the current one.
type secretBody struct {
	CreatedAt string  `json:"createdAt"`
	ExpiresAt *string `json:"expiresAt"`
}

func newEndpointBody(e endpoints.Endpoint, nowMs int64) endpointBody {
	b := endpointBody{
		ID: e.ID, URL: e.URL, Kinds: nonNil(e.Kinds), Accounts: nonNil(e.Accounts), Description: nonEmpty(e.Description),
		Disabled: e.Disabled, Secrets: []secretBody{}, CreatedAt: httpapi.RFC3339(e.CreatedAtMs), UpdatedAt: httpapi.RFC3339(e.UpdatedAtMs),
	}
	for _, s := range e.Signing(nowMs) {
		sb := secretBody{CreatedAt: httpapi.RFC3339(s.CreatedAtMs)}
		if s.ExpiresAtMs != 0 {
			at := httpapi.RFC3339(s.ExpiresAtMs)
			sb.ExpiresAt = &at
		}
		b.Secrets = append(b.Secrets, sb)
	}
	return b
}

// createdEndpointBody is a new endpoint with its secret, shown in this answer only.
type createdEndpointBody struct {
	endpointBody
	Secret string `json:"secret"`
}

// rotatedEndpointBody is an endpoint after a rotation: the new secret, shown in this answer
// only, and when the one it replaced stops signing.
type rotatedEndpointBody struct {
	endpointBody
	Secret                  string  `json:"secret"`
	PreviousSecretExpiresAt *string `json:"previousSecretExpiresAt"`
}

type createEndpointRequest struct {
	URL         string   `json:"url" jsonbody:"required"`
	Kinds       []string `json:"kinds"`
	Accounts    []string `json:"accounts"`
	Description string   `json:"description"`
}

// create is POST /v1/webhook-endpoints: register an endpoint. 201 with its first secret, which
// no other answer shows (an Idempotency-Key replay repeats this answer). A refused registration
// is a 400 naming every problem, and stores nothing.
func (h *WebhookEndpoints) create(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	var req createEndpointRequest
	if err := httpapi.DecodeJSON(r, &req); err != nil {
		return err
	}
	nowMs := h.Now().UnixMilli()
	e, secret, err := h.Store.Create(r.Context(), endpoints.Registration{
		URL: req.URL, Kinds: req.Kinds, Accounts: req.Accounts, Description: req.Description,
	}, h.Policy, nowMs)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/webhook-endpoints/"+e.ID)
	w.Header().Set("Cache-Control", "no-store")
	return httpapi.WriteJSON(w, http.StatusCreated, createdEndpointBody{endpointBody: newEndpointBody(e, nowMs), Secret: secret})
}

// list is GET /v1/webhook-endpoints: every endpoint, oldest first (at most
// endpoints.MaxEndpoints, one page).
func (h *WebhookEndpoints) list(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	all, err := h.Store.List(r.Context())
	if err != nil {
		return err
	}
	nowMs := h.Now().UnixMilli()
	items := make([]endpointBody, 0, len(all))
	for _, e := range all {
		items = append(items, newEndpointBody(e, nowMs))
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "next": nil})
}

// get is GET /v1/webhook-endpoints/{id}.
func (h *WebhookEndpoints) get(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	e, err := h.Store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, newEndpointBody(e, h.Now().UnixMilli()))
}

// updateEndpointRequest is a PATCH body: an absent member is left as it is.
type updateEndpointRequest struct {
	URL      *string   `json:"url"`
	Kinds    *[]string `json:"kinds"`
	Accounts *[]string `json:"accounts"`
	// Description "" removes it.
	Description *string `json:"description" jsonbody:"empty"`
	Disabled    *bool   `json:"disabled"`
}

// update is PATCH /v1/webhook-endpoints/{id}: change the URL, the kinds, the accounts, the
// description or whether it is disabled. The secrets are never touched.
func (h *WebhookEndpoints) update(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	var req updateEndpointRequest
	if err := httpapi.DecodeJSON(r, &req); err != nil {
		return err
	}
	nowMs := h.Now().UnixMilli()
	e, err := h.Store.Update(r.Context(), r.PathValue("id"), endpoints.Patch{
		URL: req.URL, Kinds: req.Kinds, Accounts: req.Accounts, Description: req.Description, Disabled: req.Disabled,
	}, h.Policy, nowMs)
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, newEndpointBody(e, nowMs))
}

// delete is DELETE /v1/webhook-endpoints/{id}: 204; a second delete is a 404.
func (h *WebhookEndpoints) delete(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	if err := httpapi.DecodeOptionalEmpty(r); err != nil {
		return err
	}
	if err := h.Store.Delete(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// rotate is POST /v1/webhook-endpoints/{id}/rotate-secret: a new current secret, shown in this
// answer only; the one it replaces signs for endpoints.RotationOverlap more. A rotation that
// raced another write is a 409 and changed nothing.
func (h *WebhookEndpoints) rotate(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	if err := httpapi.DecodeOptionalEmpty(r); err != nil {
		return err
	}
	nowMs := h.Now().UnixMilli()
	e, secret, err := h.Store.Rotate(r.Context(), r.PathValue("id"), nowMs)
	if err != nil {
		return err
	}
	b := rotatedEndpointBody{endpointBody: newEndpointBody(e, nowMs), Secret: secret}
	for _, s := range e.Secrets {
		if s.ExpiresAtMs != 0 {
			at := httpapi.RFC3339(s.ExpiresAtMs)
			b.PreviousSecretExpiresAt = &at
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	return httpapi.WriteJSON(w, http.StatusOK, b)
}

// deliveryBody is one delivery as the log shows it.
type deliveryBody struct {
	Notification string      `json:"notification"`
	Endpoint     string      `json:"endpoint"`
	Kind         notify.Kind `json:"kind"`
	// Account is absent for a notification of no account (a billing_event.dead of an event no
	// account is known for).
	Account  string `json:"account,omitempty"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	// The last attempt: its HTTP status (absent when there was no answer), the start of its
	// answer, and what went wrong.
	LastStatus    int    `json:"lastStatus,omitempty"`
	LastAnswer    string `json:"lastAnswer,omitempty"`
	LastError     string `json:"lastError,omitempty"`
	NextAttemptAt string `json:"nextAttemptAt,omitempty"`
	DeliveredAt   string `json:"deliveredAt,omitempty"`
	Replays       int    `json:"replays"`
	CreatedAt     string `json:"createdAt"`
	UpdatedAt     string `json:"updatedAt"`
}

func newDeliveryBody(d notify.Delivery) deliveryBody {
	b := deliveryBody{
		Notification: d.Notification, Endpoint: d.Endpoint, Kind: d.Kind, Account: d.Account, Status: d.Status, Attempts: d.Attempts,
		LastStatus: d.LastStatus, LastAnswer: d.LastAnswer, LastError: d.LastError, Replays: d.Replays,
		CreatedAt: httpapi.RFC3339(d.CreatedAtMs), UpdatedAt: httpapi.RFC3339(d.UpdatedAtMs),
	}
	if d.NextAttemptAtMs != 0 {
		b.NextAttemptAt = httpapi.RFC3339(d.NextAttemptAtMs)
	}
	if d.DeliveredAtMs != 0 {
		b.DeliveredAt = httpapi.RFC3339(d.DeliveredAtMs)
	}
	return b
}

// deliveries is GET /v1/webhook-endpoints/{id}/deliveries: the endpoint's delivery log, newest
// first, paged by cursor. An unknown endpoint is a 404, never an empty log.
func (h *WebhookEndpoints) deliveries(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, []string{"cursor", "limit"}); err != nil {
		return err
	}
	limit, err := httpapi.PageLimit(r, 0, maxDeliveriesPage)
	if err != nil {
		return err
	}
	e, err := h.Store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	page, next, err := h.Deliveries.Log(r.Context(), e.ID, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return err
	}
	items := make([]deliveryBody, 0, len(page))
	for _, d := range page {
		items = append(items, newDeliveryBody(d))
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "next": httpapi.NextCursor(next)})
}

// replay is POST /v1/webhook-endpoints/{id}/deliveries/{notification}/replay: send the delivery
// again, from a fresh set of attempts, with the same webhook-id (receivers that already have it
// can drop it). 202: the notifier sends it on its next run. 404 for an unknown endpoint or
// delivery, 409 while the delivery is being sent.
func (h *WebhookEndpoints) replay(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	if err := httpapi.DecodeOptionalEmpty(r); err != nil {
		return err
	}
	e, err := h.Store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	d, err := h.Deliveries.Replay(r.Context(), e.ID, r.PathValue("notification"), h.Now().UnixMilli())
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusAccepted, newDeliveryBody(d))
}
