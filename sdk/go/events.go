package ferry

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
)

// MaxBatchEvents is the most events one batch request carries (the route's limit).
const MaxBatchEvents = 100

// specVersion is the CloudEvents version Ferry reads.
const specVersion = "1.0"

// prepare fills what the client owns in an event: its spec version and, when the caller gave
// none, its id — minted here, once, before the first attempt.
func prepare(ev *CloudEvent) {
	if ev.Specversion == nil {
		ev.Specversion = specVersion
	}
	if ev.Id == "" {
		ev.Id = NewEventID()
	}
}

// SendEvent sends one usage event (POST /v1/events) and answers once it is durably queued. An
// event without an id gets one; every retry sends the same id and Idempotency-Key, so the event
// counts once. A 402 (*LimitReachedError, *AccountInactiveError) is the advisory gate's answer.
func (c *Client) SendEvent(ctx context.Context, ev CloudEvent) (*EventAccepted, error) {
	prepare(&ev)
	body, err := encodeEvents([]CloudEvent{ev}, false)
	if err != nil {
		return nil, err
	}
	k := newRawCall(http.MethodPost, "/v1/events", body)
	var out EventAccepted
	if _, err := c.do(ctx, k, &out); err != nil {
		return nil, fmt.Errorf("send event %s: %w", ev.Id, err)
	}
	return &out, nil
}

// SendBatch sends up to MaxBatchEvents events in one request (POST /v1/events/batch). The
// answer has one result per event, in order: queued, duplicate (an id already earlier in the
// batch) or invalid (with its detail; the others still queue). Events without an id get one.
func (c *Client) SendBatch(ctx context.Context, events []CloudEvent) (*BatchAccepted, error) {
	if len(events) == 0 || len(events) > MaxBatchEvents {
		return nil, fmt.Errorf("ferry: a batch holds 1 to %d events, not %d", MaxBatchEvents, len(events))
	}
	batch := make([]CloudEvent, len(events))
	copy(batch, events)
	for i := range batch {
		prepare(&batch[i])
	}
	return c.sendPrepared(ctx, batch)
}

// sendPrepared sends a batch whose events all have their ids.
func (c *Client) sendPrepared(ctx context.Context, batch []CloudEvent) (*BatchAccepted, error) {
	body, err := encodeEvents(batch, true)
	if err != nil {
		return nil, err
	}
	k := newRawCall(http.MethodPost, "/v1/events/batch", body)
	var out BatchAccepted
	if _, err := c.do(ctx, k, &out); err != nil {
		return nil, fmt.Errorf("send a batch of %d events (first %s): %w", len(batch), batch[0].Id, err)
	}
	return &out, nil
}

// GetEvent reads where an event is in processing (GET /v1/events/{id}).
func (c *Client) GetEvent(ctx context.Context, id string) (*EventStatus, error) {
	var out EventStatus
	if err := c.get(ctx, "/v1/events/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// FailedEvents iterates over the account's REJECTED or UNINSERTABLE events, newest first
// (GET /v1/events), one page after another.
func (c *Client) FailedEvents(ctx context.Context, params ListFailedEventsParams) iter.Seq2[EventStatus, error] {
	q := url.Values{"status": {string(params.Status)}}
	setQuery(q, "account", params.Account)
	setQuery(q, "cursor", params.Cursor)
	setQuery(q, "limit", params.Limit)
	return pages[EventStatus](ctx, c, "/v1/events", q)
}

// RedriveEvent queues an UNINSERTABLE event again from the archive (operator).
func (c *Client) RedriveEvent(ctx context.Context, id, account string) (map[string]any, error) {
	var out map[string]any
	err := c.mutate(ctx, http.MethodPost, "/v1/events/"+url.PathEscape(id)+"/redrive", map[string]string{"account": account}, &out)
	return out, err
}
