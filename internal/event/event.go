// Package event is the usage event Ferry accepts — a CloudEvents 1.0 JSON event, parsed and
// validated with the CloudEvents SDK — and the envelope that carries an accepted event from
// ingest through the queue to the worker.
package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	ce "github.com/cloudevents/sdk-go/v2/event"

	"github.com/ferrymeter/ferry/internal/problem"
)

// Size limits. An event is small metadata about usage, not a document; the limits keep every
// message well inside SQS's and every ledger item inside DynamoDB's.
const (
	MaxEventBytes = 64 << 10 // one event's JSON
	MaxBatchBytes = 1 << 20  // a batch request body
	MaxBatchItems = 100      // events in a batch
	MaxIDLength   = 256      // an event id
)

// Event is a validated CloudEvent and its canonical JSON, the exact bytes that travel through the
// queue and land in the archive.
type Event struct {
	CE        ce.Event
	Canonical json.RawMessage
}

// ID returns the event's id.
func (e Event) ID() string { return e.CE.ID() }

// IsInvalid reports whether err refuses an event (a *problem.InputError).
func IsInvalid(err error) bool { return problem.IsInvalid(err) }

// invalid refuses an event as a whole, for one reason.
func invalid(format string, args ...any) error {
	return problem.Input(fmt.Sprintf(format, args...))
}

// Parse validates one event's JSON.
func Parse(data []byte) (Event, error) {
	data = bytes.TrimSpace(data)
	if len(data) > MaxEventBytes {
		return Event{}, invalid("the event is %d bytes; the limit is %d", len(data), MaxEventBytes)
	}
	if !json.Valid(data) {
		return Event{}, invalid("the body is not valid JSON")
	}
	if len(data) == 0 || data[0] != '{' {
		return Event{}, invalid("an event is a JSON object")
	}
	var probe struct {
		SpecVersion *string `json:"specversion"`
		ID          *string `json:"id"`
	}
	_ = json.Unmarshal(data, &probe)
	switch {
	case probe.SpecVersion == nil:
		return Event{}, invalid("specversion is required (\"1.0\")")
	case *probe.SpecVersion != ce.CloudEventsVersionV1:
		return Event{}, invalid("specversion must be \"1.0\", not %q", *probe.SpecVersion)
	case probe.ID == nil || *probe.ID == "":
		return Event{}, invalid("id is required: a non-empty string, unique per event")
	}
	var e ce.Event
	if err := json.Unmarshal(data, &e); err != nil {
		return Event{}, invalid("not a CloudEvents 1.0 event: %v", err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, invalid("not a CloudEvents 1.0 event: %s", strings.TrimSpace(err.Error()))
	}
	if err := validID(e.ID()); err != nil {
		return Event{}, err
	}
	canonical, err := json.Marshal(e)
	if err != nil {
		return Event{}, invalid("not a CloudEvents 1.0 event: %v", err)
	}
	return Event{CE: e, Canonical: canonical}, nil
}

func validID(id string) error {
	if len(id) > MaxIDLength {
		return invalid("id is %d bytes; the limit is %d", len(id), MaxIDLength)
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return invalid("id must contain printable characters only")
		}
	}
	return nil
}

// Envelope is the queue message for one accepted event. It carries everything the worker needs
// to be deterministic on every delivery: the account, the instant the event was accepted, and the
// canonical event bytes.
type Envelope struct {
	AccountID    string          `json:"accountId"`
	EventID      string          `json:"eventId"`
	ReceivedAtMs int64           `json:"receivedAtMs"`
	Event        json.RawMessage `json:"event"`
}

// DecodeEnvelope parses a queue message body.
func DecodeEnvelope(body string) (Envelope, Event, error) {
	var env Envelope
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		return Envelope{}, Event{}, fmt.Errorf("decode envelope: %w", err)
	}
	if env.AccountID == "" || env.EventID == "" || env.ReceivedAtMs <= 0 || len(env.Event) == 0 {
		return Envelope{}, Event{}, errors.New("decode envelope: missing accountId, eventId, receivedAtMs or event")
	}
	ev, err := Parse(env.Event)
	if err != nil {
		return Envelope{}, Event{}, fmt.Errorf("decode envelope: %w", err)
	}
	if ev.ID() != env.EventID {
		return Envelope{}, Event{}, fmt.Errorf("decode envelope: eventId %q does not match the event's id %q", env.EventID, ev.ID())
	}
	return env, ev, nil
}
