// Package ingest is the front door for usage events: validate, run the advisory gate, and answer
// only once the event is durably queued. The gate is a courtesy — a fast 402 for an account known
// to be at its limit — and it fails open on any dependency error, because a courtesy check must
// never lose a customer's event. The worker is where the limit is enforced.
package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Errors of ingest, each with its kind.
var (
	// ErrTooLarge: the body is over the route's limit. Callers are told the whole message,
	// which says by how much.
	ErrTooLarge = problem.New(problem.TooLarge, "request body too large", "")
	// ErrQueueUnavailable: the event could not be queued, and nothing was: the queue refused
	// the write or was never reached. A Queue wraps it only when that is proven.
	ErrQueueUnavailable = problem.New(problem.Unavailable, "the event queue is unavailable",
		"The event could not be queued and was not accepted; retry it.")
	// ErrOutcomeUnknown: the queue write failed after it may have landed, so the event may be
	// queued. Retrying with the same event id is safe — the worker collapses deliveries by event
	// id — and is the only way to be sure; "not accepted" would be a lie.
	ErrOutcomeUnknown = problem.New(problem.OutcomeUnknown, "the queue did not confirm the event",
		"The queue did not confirm the event, which may or may not have been queued. Retry with the same event id: "+
			"an event that was queued is processed once, however often it is sent.")
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

// Queue carries envelopes to the worker. An error wraps ErrQueueUnavailable only when nothing
// was queued; any other error means the outcome is unknown (some or all may have been queued,
// which a retry makes safe: the worker collapses redeliveries by event id).
type Queue interface {
	Send(ctx context.Context, env event.Envelope) error
	// SendBatch queues every envelope or returns an error.
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

// Accept validates and queues one event in its JSON format (structured mode).
func (s *Service) Accept(ctx context.Context, acct accounts.Account, body []byte) (Accepted, error) {
	if len(body) > event.MaxEventBytes {
		return Accepted{}, fmt.Errorf("%w: the event is %d bytes; the limit is %d", ErrTooLarge, len(body), event.MaxEventBytes)
	}
	ev, err := event.Parse(body)
	if err != nil {
		return Accepted{}, err
	}
	return s.accept(ctx, acct, ev)
}

// AcceptBinary validates and queues one event sent in HTTP binary mode: its attributes in the
// ce-* headers, its data as the body.
func (s *Service) AcceptBinary(ctx context.Context, acct accounts.Account, header http.Header, body []byte) (Accepted, error) {
	if len(body) > event.MaxEventBytes {
		return Accepted{}, fmt.Errorf("%w: the event's data is %d bytes; the limit is %d", ErrTooLarge, len(body), event.MaxEventBytes)
	}
	ev, err := event.FromBinary(header, body)
	if errors.Is(err, event.ErrTooLarge) {
		return Accepted{}, fmt.Errorf("%w: %v", ErrTooLarge, err)
	}
	if err != nil {
		return Accepted{}, err
	}
	return s.accept(ctx, acct, ev)
}

func (s *Service) accept(ctx context.Context, acct accounts.Account, ev event.Event) (Accepted, error) {
	now := s.Now()
	if err := s.gate(ctx, acct, now, []string{ev.ID()}); err != nil {
		return Accepted{}, err
	}
	env := event.Envelope{AccountID: acct.ID, EventID: ev.ID(), ReceivedAtMs: now.UnixMilli(), Event: ev.Canonical}
	if err := s.Queue.Send(ctx, env); err != nil {
		return Accepted{}, s.queueFailed(acct, 1, err)
	}
	s.Metrics.Count(metrics.EventsQueued, 1)
	return Accepted{ID: ev.ID()}, nil
}

// queueFailed says what a failed queue write means for the client: nothing happened (503), or
// the outcome is unknown (502) — never "not accepted" for a write that may have landed.
func (s *Service) queueFailed(acct accounts.Account, events int, err error) error {
	if errors.Is(err, ErrQueueUnavailable) {
		s.Log.Error("queue write failed; nothing was queued", "account", acct.ID, "events", events, "err", err)
		return err
	}
	s.Log.Error("queue write failed after it may have landed; outcome unknown", "account", acct.ID, "events", events, "err", err)
	return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
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
	// The batch as a whole is read strictly first: invalid UTF-8, a lone surrogate or a
	// duplicate member anywhere makes the body invalid JSON, before any item is looked at.
	if err := jsonbody.Check(body); err != nil {
		return nil, problem.Input(err.Error())
	}
	trimmed := bytes.Trim(body, " \t\r\n") // JSON's whitespace: Check passed, so nothing else surrounds the array
	var items []jsontext.Value
	if trimmed[0] != '[' || json.Unmarshal(trimmed, &items) != nil {
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
		return nil, s.queueFailed(acct, len(envs), err)
	}
	s.Metrics.Count(metrics.EventsQueued, len(queuedAt))
	return results, nil
}

// idOf pulls an id out of an invalid item, if it has a usable one, for the answer: only a
// string id as sent, never one the answer would have to alter.
func idOf(raw jsontext.Value) string {
	var probe struct {
		ID jsontext.Value `json:"id"`
	}
	if json.Unmarshal(raw, &probe) != nil || probe.ID.Kind() != '"' {
		return ""
	}
	var id string
	if json.Unmarshal(probe.ID, &id) != nil || len(id) > event.MaxIDLength || !utf8.ValidString(id) {
		return ""
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return ""
		}
	}
	return id
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

// refusal is the gate's verdict on the account, nil when it may send: accounts.ErrInactive for
// an account the status rule stops (accounts.Account.CanSpend), *RefusedError at the limit.
func (s *Service) refusal(ctx context.Context, acct accounts.Account, now time.Time) error {
	if err := acct.CanSpend(); err != nil {
		return err
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
