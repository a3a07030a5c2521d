package event

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
)

// Envelope is the queue message for one accepted event. It carries everything the worker needs
// to be deterministic on every delivery: the account, the instant the event was accepted, and the
// event's exact bytes.
type Envelope struct {
	AccountID    string          `json:"accountId" jsonbody:"required"`
	EventID      string          `json:"eventId" jsonbody:"required"`
	ReceivedAtMs int64           `json:"receivedAtMs" jsonbody:"required"`
	Event        json.RawMessage `json:"event" jsonbody:"required"`
}

// EncodeEnvelope renders an envelope as a queue message body: the standard base64 of its JSON.
// The body is plain ASCII, so no queue can refuse or rewrite it — SQS takes only #x9, #xA, #xD
// and #x20–#xD7FF, #xE000–#xFFFD, #x10000–#x10FFFF, and the local emulator refuses everything
// past the Basic Multilingual Plane — and the MD5 SQS returns is of exactly the bytes sent. The
// event's bytes are copied in as they are, not re-encoded.
func EncodeEnvelope(env Envelope) (string, error) {
	var err error
	b := []byte(`{"accountId":`)
	if b, err = jsontext.AppendQuote(b, env.AccountID); err != nil {
		return "", fmt.Errorf("encode envelope: account id: %w", err)
	}
	b = append(b, `,"eventId":`...)
	if b, err = jsontext.AppendQuote(b, env.EventID); err != nil {
		return "", fmt.Errorf("encode envelope: event id: %w", err)
	}
	b = append(b, `,"receivedAtMs":`...)
	b = strconv.AppendInt(b, env.ReceivedAtMs, 10)
	b = append(b, `,"event":`...)
	b = append(b, env.Event...)
	b = append(b, '}')
	if err := jsonbody.Check(b); err != nil {
		return "", fmt.Errorf("encode envelope of event %q: %w", env.EventID, err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// DecodeEnvelope parses a queue message body: base64 of the envelope's JSON, as EncodeEnvelope
// writes it, or the envelope's JSON itself, as ingest wrote it before. A base64 body never
// starts with '{', so the two cannot be confused, and messages queued before a deploy are still
// processed after it.
func DecodeEnvelope(body string) (Envelope, Event, error) {
	raw := []byte(body)
	if len(body) == 0 || body[0] != '{' {
		decoded, err := base64.StdEncoding.Strict().DecodeString(body)
		if err != nil {
			return Envelope{}, Event{}, errors.New("decode envelope: the message body is neither base64 nor JSON")
		}
		raw = decoded
	}
	var env Envelope
	if err := jsonbody.Decode(raw, &env); err != nil {
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
