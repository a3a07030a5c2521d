// Package ingest is the front door for usage events: validate, run the advisory gate, and answer
// only once the event is durably queued. The gate is a courtesy — a fast 402 for an account known
// to be at its limit — and it fails open on any dependency error, because a courtesy check must
// never lose a customer's event. The worker is where the limit is enforced.
package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/event"
	"github.com/ferrymeter/ferry/internal/metrics"
	"github.com/ferrymeter/ferry/internal/plans"
	"github.com/ferrymeter/ferry/internal/problem"
	"github.com/ferrymeter/ferry/internal/usage"
)

// Errors of ingest, each with its kind.
var (
	// ErrTooLarge: the body is over the route's limit. Callers are told the whole message,
	// which says by how much.
	ErrTooLarge = problem.New(problem.TooLarge, "request body too large", "")
	// ErrQueueUnavailable: the event could not be queued; nothing was accepted.
	ErrQueueUnavailable = problem.New(problem.Unavailable, "the event queue is unavailable",
		"The event could not be queued and was not accepted; retry it.")
)

// RefusedError is the gate's refusal: the account is known to be unable to take the event.
type RefusedError struct {
	Detail    string
	Remaining int64
	Limit     int64
}

func (e *RefusedError) Error() string { return e.Detail }

// Kind implements problem.Error.
func (e *RefusedError) Kind() problem.Kind { return problem.LimitReached }

// Public implements problem.Describer: the caller learns what is left.
func (e *RefusedError) Public() problem.Public {
	return problem.Public{Detail: e.Detail, Facts: map[string]any{"remaining": e.Remaining}}
}

// Queue carries envelopes to the worker.
type Queue interface {
	Send(ctx context.Context, env event.Envelope) error
	// SendBatch queues every envelope or returns an error; on error some may have been queued,
	// which is safe: the worker collapses redeliveries by event id.
	SendBatch(ctx context.Context, envs []event.Envelope) error
}

// Ledger tells which events already have a ledger entry.
type Ledger interface {
	Known(ctx context.Context, accountID string, eventIDs []string) (map[string]bool, error)
}

// Service accepts events.
type Service struct {
	Queue   Queue
	Ledger  Ledger
	Usage   usage.Table
	Catalog plans.Catalog
	Metrics metrics.Recorder
	Log     *slog.Logger
	Now     func() time.Time
}

// Accepted is the answer for one queued event.
type Accepted struct {
	ID string
}

// Accept validates and queues one event.
func (s *Service) Accept(ctx context.Context, acct accounts.Account, body []byte) (Accepted, error) {
	if len(body) > event.MaxEventBytes {
		return Accepted{}, fmt.Errorf("%w: the event is %d bytes; the limit is %d", ErrTooLarge, len(body), event.MaxEventBytes)
	}
	ev, err := event.Parse(body)
	if err != nil {
		return Accepted{}, err
	}
	now := s.Now()
	if err := s.gate(ctx, acct, now, []string{ev.ID()}); err != nil {
		return Accepted{}, err
	}
	env := event.Envelope{AccountID: acct.ID, EventID: ev.ID(), ReceivedAtMs: now.UnixMilli(), Event: ev.Canonical}
	if err := s.Queue.Send(ctx, env); err != nil {
		s.Log.Error("queue write failed", "account", acct.ID, "eventId", ev.ID(), "err", err)
		return Accepted{}, fmt.Errorf("%w: %v", ErrQueueUnavailable, err)
	}
	s.Metrics.Count(metrics.EventsQueued, 1)
	return Accepted{ID: ev.ID()}, nil
}

// Item statuses in a batch answer.
const (
	ItemQueued    = "queued"
	ItemDuplicate = "duplicate"
	ItemInvalid   = "invalid"
)

// ItemResult is one batch item's answer.
type ItemResult struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// AcceptBatch validates up to event.MaxBatchItems events, collapses repeated ids (the first copy
// wins), runs the gate once and queues the valid events. It answers for every item in order.
func (s *Service) AcceptBatch(ctx context.Context, acct accounts.Account, body []byte) ([]ItemResult, error) {
	if len(body) > event.MaxBatchBytes {
		return nil, fmt.Errorf("%w: the batch is %d bytes; the limit is %d", ErrTooLarge, len(body), event.MaxBatchBytes)
	}
	trimmed := bytes.TrimSpace(body)
	var items []json.RawMessage
	if len(trimmed) == 0 || trimmed[0] != '[' || json.Unmarshal(trimmed, &items) != nil {
		return nil, problem.Input("a batch is a JSON array of CloudEvents 1.0 events")
	}
	if len(items) == 0 {
		return nil, problem.Input("the batch is empty")
	}
	if len(items) > event.MaxBatchItems {
		return nil, problem.Input(fmt.Sprintf("the batch has %d events; the limit is %d", len(items), event.MaxBatchItems))
	}
	now := s.Now()
	results := make([]ItemResult, len(items))
	seen := make(map[string]bool, len(items))
	var envs []event.Envelope
	var queuedAt []int
	for i, raw := range items {
		ev, err := event.Parse(raw)
		if err != nil {
			results[i] = ItemResult{ID: idOf(raw), Status: ItemInvalid, Detail: err.Error()}
			continue
		}
		if seen[ev.ID()] {
			results[i] = ItemResult{ID: ev.ID(), Status: ItemDuplicate, Detail: "an earlier item of this batch has the same id"}
			continue
		}
		seen[ev.ID()] = true
		results[i] = ItemResult{ID: ev.ID(), Status: ItemQueued}
		envs = append(envs, event.Envelope{AccountID: acct.ID, EventID: ev.ID(), ReceivedAtMs: now.UnixMilli(), Event: ev.Canonical})
		queuedAt = append(queuedAt, i)
	}
	if len(envs) == 0 {
		// No item can be queued: the batch is refused, with why for each item.
		invalid := problem.Input("no event in the batch is valid")
		invalid.Facts = map[string]any{"results": results}
		return nil, invalid
	}
	ids := make([]string, len(envs))
	for i, env := range envs {
		ids[i] = env.EventID
	}
	if err := s.gate(ctx, acct, now, ids); err != nil {
		return nil, err
	}
	if err := s.Queue.SendBatch(ctx, envs); err != nil {
		s.Log.Error("queue batch write failed", "account", acct.ID, "events", len(envs), "err", err)
		return nil, fmt.Errorf("%w: %v", ErrQueueUnavailable, err)
	}
	s.Metrics.Count(metrics.EventsQueued, len(queuedAt))
	return results, nil
}

// idOf pulls an id out of an invalid item, if it has one, for the answer.
func idOf(raw json.RawMessage) string {
	var probe struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(raw, &probe) != nil {
		return ""
	}
	if s, ok := probe.ID.(string); ok && len(s) <= event.MaxIDLength {
		return s
	}
	return ""
}

// gate is the advisory check. It refuses only what is known: an inactive account, or a capped
// account whose budget row already reaches its limit — and only new work: when every event is
// already in the ledger (a client retrying what was accepted), they pass, and the worker acks
// them without moving anything. Any read error lets the events through.
func (s *Service) gate(ctx context.Context, acct accounts.Account, now time.Time, eventIDs []string) error {
	refusal := s.refusal(ctx, acct, now)
	if refusal == nil {
		return nil
	}
	known, err := s.Ledger.Known(ctx, acct.ID, eventIDs)
	if err != nil {
		s.Metrics.Count(metrics.GateFailedOpen, 1)
		s.Log.Warn("advisory gate could not read the ledger; failing open", "account", acct.ID, "err", err)
		return nil
	}
	for _, id := range eventIDs {
		if !known[id] {
			s.Metrics.Count(metrics.EventsRefused, len(eventIDs))
			return refusal
		}
	}
	return nil
}

// refusal is the gate's verdict on the account, nil when it may send.
func (s *Service) refusal(ctx context.Context, acct accounts.Account, now time.Time) *RefusedError {
	if acct.Status == accounts.Inactive {
		return &RefusedError{Detail: "The account is inactive; its events are not accepted."}
	}
	if acct.PlanOf(s.Catalog).Tier != plans.Capped {
		return nil
	}
	limit := acct.Limit(plans.FeatureEvents, s.Catalog)
	if limit.Unlimited {
		return nil
	}
	budget, err := s.Usage.ReadBudget(ctx, acct.ID, plans.FeatureEvents, acct.CycleAt(now).Label(), false)
	if err != nil {
		s.Metrics.Count(metrics.GateFailedOpen, 1)
		s.Log.Warn("advisory gate could not read the meter; failing open", "account", acct.ID, "err", err)
		return nil
	}
	if !limit.Check(budget.Committed, plans.EventAmount).Fits {
		return &RefusedError{
			Detail:    fmt.Sprintf("The account has used its %d events for this cycle.", limit.Max),
			Remaining: 0, Limit: limit.Max,
		}
	}
	return nil
}
