package event

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
)

// MaxPackedEvents is how many events one packed message carries, and one unit of the worker
// holds: the worker claims, checkpoints and meters them in one TransactWriteItems of at most 100
// items, which also holds the meter row, its report mark and the unit's analytics rows item.
const MaxPackedEvents = 97

// maxDecodedEvents is how many events a packed message may carry when read: packs of 98 were
// queued before units carried their rows item, and are still billed (their rows are written one
// by one, after the claim).
const maxDecodedEvents = 98

// Packed is one queue message carrying several accepted events of one account, accepted
// together (the batch route): every event shares the account and the instant. Its bytes never
// change between deliveries, so everything the worker derives from it — the batch's identity,
// which of its events fit under the cap, the archive object's key and body — is the same on
// every retry.
type Packed struct {
	AccountID    string
	ReceivedAtMs int64
	Events       []json.RawMessage
}

// packedWire is a packed message as queued: Packed with its format version.
type packedWire struct {
	Packed       int               `json:"packed" jsonbody:"required"`
	AccountID    string            `json:"accountId" jsonbody:"required"`
	ReceivedAtMs int64             `json:"receivedAtMs" jsonbody:"required"`
	Events       []json.RawMessage `json:"events" jsonbody:"required"`
}

// packedPrefix starts the JSON of a packed message; an envelope's JSON starts with
// {"accountId":…,"eventId": and never with this.
const packedPrefix = `{"packed":1,`

// EncodePacked renders a packed message body: the standard base64 of its JSON, like
// EncodeEnvelope, with the events' bytes copied in as they are.
func EncodePacked(p Packed) (string, error) {
	var err error
	b := []byte(packedPrefix + `"accountId":`)
	if b, err = jsontext.AppendQuote(b, p.AccountID); err != nil {
		return "", fmt.Errorf("encode packed message: account id: %w", err)
	}
	b = append(b, `,"receivedAtMs":`...)
	b = strconv.AppendInt(b, p.ReceivedAtMs, 10)
	b = append(b, `,"events":[`...)
	for i, ev := range p.Events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, ev...)
	}
	b = append(b, "]}"...)
	if err := jsonbody.Check(b); err != nil {
		return "", fmt.Errorf("encode packed message: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// Message is one decoded queue message: one envelope, or the envelopes of a packed message in
// the order they were packed.
type Message struct {
	Envelopes []Envelope
	Events    []Event
	// Packed is set for a packed message; Raw is its JSON, the bytes its identity derives from.
	Packed bool
	Raw    []byte
}

// DecodeMessage parses a queue message body of either shape: an envelope (DecodeEnvelope) or a
// packed message. A packed message is read strictly: every event valid, of at most
// maxDecodedEvents, no event id twice.
func DecodeMessage(body string) (Message, error) {
	raw := []byte(body)
	if len(body) > 0 && body[0] != '{' {
		decoded, err := base64.StdEncoding.Strict().DecodeString(body)
		if err != nil {
			return Message{}, errors.New("decode message: the message body is neither base64 nor JSON")
		}
		raw = decoded
	}
	if !bytes.HasPrefix(raw, []byte(packedPrefix)) {
		env, ev, err := DecodeEnvelope(body)
		if err != nil {
			return Message{}, err
		}
		return Message{Envelopes: []Envelope{env}, Events: []Event{ev}}, nil
	}
	var pk packedWire
	if err := jsonbody.Decode(raw, &pk); err != nil {
		return Message{}, fmt.Errorf("decode packed message: %w", err)
	}
	if pk.AccountID == "" || pk.ReceivedAtMs <= 0 || len(pk.Events) == 0 || len(pk.Events) > maxDecodedEvents {
		return Message{}, fmt.Errorf("decode packed message: missing accountId or receivedAtMs, or not 1–%d events", maxDecodedEvents)
	}
	m := Message{Packed: true, Raw: raw}
	seen := make(map[string]bool, len(pk.Events))
	for i, rawEv := range pk.Events {
		ev, err := Parse(rawEv)
		if err != nil {
			return Message{}, fmt.Errorf("decode packed message: event %d: %w", i, err)
		}
		if seen[ev.ID()] {
			return Message{}, fmt.Errorf("decode packed message: event id %q twice", ev.ID())
		}
		seen[ev.ID()] = true
		m.Envelopes = append(m.Envelopes, Envelope{AccountID: pk.AccountID, EventID: ev.ID(), ReceivedAtMs: pk.ReceivedAtMs, Event: ev.Canonical})
		m.Events = append(m.Events, ev)
	}
	return m, nil
}
