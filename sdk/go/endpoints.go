package ferry

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"net/url"
)

// The webhook endpoints: where Ferry sends its notifications (threshold.crossed,
// limit.reached), their signing secrets and their delivery logs. These are operator routes: the
// client takes the operator key as Config.APIKey. Each mutating call sends one Idempotency-Key
// on all its attempts, so a retried registration or rotation answers the same endpoint and the
// same secret rather than a second one.

// endpointPath is the path of an endpoint, and of what is below it.
func endpointPath(id string, tail ...string) string {
	p := "/v1/webhook-endpoints/" + url.PathEscape(id)
	for _, t := range tail {
		p += t
	}
	return p
}

// errNoEndpointID refuses a call that names no endpoint, before anything is sent: the path
// would name the collection (or nothing) instead.
var errNoEndpointID = errors.New("ferry: the webhook endpoint's id is empty")

// CreateWebhookEndpoint registers an endpoint (POST /v1/webhook-endpoints) and returns it with
// its first signing secret ("whsec_…"), which no other answer shows: store it with the
// receiver. A refused registration is an *InvalidRequestError naming every problem; more than
// the endpoints Ferry keeps is a *ConflictError.
func (c *Client) CreateWebhookEndpoint(ctx context.Context, req CreateWebhookEndpointRequest) (*WebhookEndpointWithSecret, error) {
	var out WebhookEndpointWithSecret
	if err := c.mutate(ctx, http.MethodPost, "/v1/webhook-endpoints", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WebhookEndpoints iterates over every registered endpoint, oldest first (GET
// /v1/webhook-endpoints), never with a secret's value.
func (c *Client) WebhookEndpoints(ctx context.Context) iter.Seq2[WebhookEndpoint, error] {
	return pages[WebhookEndpoint](ctx, c, "/v1/webhook-endpoints", nil)
}

// GetWebhookEndpoint reads an endpoint: when each secret that signs was made and when it stops,
// never its value. An unknown id is a *NotFoundError.
func (c *Client) GetWebhookEndpoint(ctx context.Context, id string) (*WebhookEndpoint, error) {
	if id == "" {
		return nil, errNoEndpointID
	}
	var out WebhookEndpoint
	if err := c.get(ctx, endpointPath(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateWebhookEndpoint changes the members of req that are set (a Description of "" removes
// it; Disabled stops and resumes deliveries) and returns the endpoint as stored. The secrets
// are never changed here: see RotateWebhookEndpointSecret.
func (c *Client) UpdateWebhookEndpoint(ctx context.Context, id string, req UpdateWebhookEndpointRequest) (*WebhookEndpoint, error) {
	if id == "" {
		return nil, errNoEndpointID
	}
	var out WebhookEndpoint
	if err := c.mutate(ctx, http.MethodPatch, endpointPath(id), req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteWebhookEndpoint deletes an endpoint: it is sent nothing more. A second delete is a
// *NotFoundError (a retry of this call, under its Idempotency-Key, is not).
func (c *Client) DeleteWebhookEndpoint(ctx context.Context, id string) error {
	if id == "" {
		return errNoEndpointID
	}
	return c.mutate(ctx, http.MethodDelete, endpointPath(id), nil, nil)
}

// RotateWebhookEndpointSecret makes a new signing secret current and returns it (in this answer
// only). The secret it replaces keeps signing until PreviousSecretExpiresAt (24 hours): give the
// receiver the new one beside the old meanwhile. Two rotations racing each other cannot both
// land: the second is a *ConflictError and changed nothing.
func (c *Client) RotateWebhookEndpointSecret(ctx context.Context, id string) (*RotatedWebhookEndpoint, error) {
	if id == "" {
		return nil, errNoEndpointID
	}
	var out RotatedWebhookEndpoint
	if err := c.mutate(ctx, http.MethodPost, endpointPath(id, "/rotate-secret"), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WebhookDeliveries iterates over an endpoint's delivery log, newest notification first, page
// after page (params.Limit deliveries a page, at most 100): each delivery's status (PENDING,
// SENDING, DELIVERED, DEAD), attempts and the last attempt's answer.
func (c *Client) WebhookDeliveries(ctx context.Context, id string, params ListWebhookDeliveriesParams) iter.Seq2[WebhookDelivery, error] {
	if id == "" {
		return func(yield func(WebhookDelivery, error) bool) { yield(WebhookDelivery{}, errNoEndpointID) }
	}
	q := url.Values{}
	setQuery(q, "cursor", params.Cursor)
	setQuery(q, "limit", params.Limit)
	return pages[WebhookDelivery](ctx, c, endpointPath(id, "/deliveries"), q)
}

// ReplayWebhookDelivery puts an endpoint's delivery of a notification back to PENDING with a
// fresh set of attempts, whatever its status; the notifier sends it on its next run, with the
// same webhook-id. A delivery being sent right now is a *ConflictError: replay it once that
// attempt ends.
func (c *Client) ReplayWebhookDelivery(ctx context.Context, id, notification string) (*WebhookDelivery, error) {
	if id == "" {
		return nil, errNoEndpointID
	}
	if notification == "" {
		return nil, errors.New("ferry: the notification's id is empty")
	}
	var out WebhookDelivery
	if err := c.mutate(ctx, http.MethodPost, endpointPath(id, "/deliveries/", url.PathEscape(notification), "/replay"), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
