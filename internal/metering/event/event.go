// Package event is the usage event Ferry accepts — a CloudEvents 1.0 event, in its JSON format
// (structured mode) or as ce-* headers and a body (HTTP binary mode) — and the envelope that
// carries an accepted event from ingest through the queue to the worker.
//
// Every event is read strictly (package jsonbody) and checked against the CloudEvents rules
// before anything moves, and nothing in it is ever rewritten: a structured event travels and is
// archived as the exact bytes the client sent; a binary event as the structured JSON of exactly
// the attributes and data bytes it was sent with.
package event

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Size limits. An event is small metadata about usage, not a document; the limits keep every
// message well inside SQS's and every ledger item inside DynamoDB's.
const (
	MaxEventBytes = 64 << 10 // one event's JSON (structured mode, as sent or as rendered from binary mode)
	MaxBatchBytes = 1 << 20  // a batch request body
	MaxBatchItems = 100      // events in a batch
	MaxIDLength   = 256      // an event id, in bytes
	// MaxExtensionNameLength bounds an extension attribute's name. The specification asks for
	// names of at most 20 characters (a SHOULD); Ferry accepts up to 64 and refuses longer ones.
	MaxExtensionNameLength = 64
	// maxReasonBytes bounds how much of a refused value a reason repeats.
	maxReasonBytes = 64
)

// Event is a validated CloudEvent and its JSON (structured mode), the exact bytes that travel
// through the queue and land in the archive.
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

// wire is a CloudEvent in its JSON format, as the strict decoder reads it. Every other member is
// an extension attribute.
type wire struct {
	SpecVersion     string         `json:"specversion" jsonbody:"required"`
	ID              string         `json:"id" jsonbody:"required"`
	Source          string         `json:"source" jsonbody:"required"`
	Type            string         `json:"type" jsonbody:"required"`
	Subject         *string        `json:"subject"`
	Time            *string        `json:"time"`
	DataContentType *string        `json:"datacontenttype"`
	DataSchema      *string        `json:"dataschema"`
	Data            jsontext.Value `json:"data"`
	// An empty data_base64 is an event whose data is zero bytes, a value of its own.
	DataBase64 *string                   `json:"data_base64" jsonbody:"empty"`
	Extensions map[string]jsontext.Value `json:",embed"`
}

// Parse validates one event in its JSON format (structured mode).
func Parse(data []byte) (Event, error) {
	data = bytes.Trim(data, " \t\r\n")
	if len(data) > MaxEventBytes {
		return Event{}, invalid("the event is %d bytes; the limit is %d", len(data), MaxEventBytes)
	}
	var w wire
	if err := jsonbody.Decode(data, &w); err != nil {
		return Event{}, problem.Input(err.Error())
	}
	attrs := attributes{
		specVersion: w.SpecVersion, id: w.ID, source: w.Source, typ: w.Type,
		subject: w.Subject, time: w.Time, dataContentType: w.DataContentType, dataSchema: w.DataSchema,
		extensions: map[string]any{},
	}
	for name, raw := range w.Extensions {
		v, err := extensionValue(name, raw)
		if err != nil {
			return Event{}, err
		}
		attrs.extensions[name] = v
	}
	e, err := attrs.event()
	if err != nil {
		return Event{}, err
	}
	if err := setStructuredData(&e, w); err != nil {
		return Event{}, err
	}
	if err := e.Validate(); err != nil {
		return Event{}, invalid("not a CloudEvents 1.0 event: %s", strings.TrimSpace(err.Error()))
	}
	return Event{CE: e, Canonical: append(json.RawMessage(nil), data...)}, nil
}

// attributes are an event's context attributes before they are checked.
type attributes struct {
	specVersion, id, source, typ               string
	subject, time, dataContentType, dataSchema *string
	extensions                                 map[string]any
}

// event checks every attribute against the CloudEvents rules and builds the SDK's event.
func (a attributes) event() (ce.Event, error) {
	if a.specVersion != ce.CloudEventsVersionV1 {
		return ce.Event{}, invalid(`specversion must be "1.0", not %s`, quoted(a.specVersion))
	}
	if err := validID(a.id); err != nil {
		return ce.Event{}, err
	}
	e := ce.New(ce.CloudEventsVersionV1)
	e.SetID(a.id)
	if err := checkString("source", a.source, true); err != nil {
		return ce.Event{}, err
	}
	if _, err := url.Parse(a.source); err != nil || !uriReferenceChars(a.source) {
		return ce.Event{}, invalid("source must be a URI-reference")
	}
	e.SetSource(a.source)
	if err := checkString("type", a.typ, true); err != nil {
		return ce.Event{}, err
	}
	e.SetType(a.typ)
	if a.subject != nil {
		if err := checkString("subject", *a.subject, true); err != nil {
			return ce.Event{}, err
		}
		e.SetSubject(*a.subject)
	}
	if a.time != nil {
		t, err := time.Parse(time.RFC3339Nano, *a.time)
		if err != nil {
			return ce.Event{}, invalid("time must be an RFC 3339 timestamp, like 2026-11-15T12:00:00Z")
		}
		e.SetTime(t)
	}
	if a.dataContentType != nil {
		if _, _, err := mime.ParseMediaType(*a.dataContentType); err != nil || checkString("datacontenttype", *a.dataContentType, true) != nil {
			return ce.Event{}, invalid("datacontenttype must be a media type, like application/json")
		}
		e.SetDataContentType(*a.dataContentType)
	}
	if a.dataSchema != nil {
		u, err := url.Parse(*a.dataSchema)
		if err != nil || !u.IsAbs() || checkString("dataschema", *a.dataSchema, true) != nil {
			return ce.Event{}, invalid("dataschema must be an absolute URI")
		}
		if err := e.Context.SetDataSchema(*a.dataSchema); err != nil {
			return ce.Event{}, invalid("dataschema must be an absolute URI")
		}
	}
	for name, v := range a.extensions {
		if err := validExtensionName(name); err != nil {
			return ce.Event{}, err
		}
		if s, ok := v.(string); ok {
			if err := checkString("extension "+name, s, false); err != nil {
				return ce.Event{}, err
			}
		}
		if err := e.Context.SetExtension(name, v); err != nil {
			return ce.Event{}, invalid("extension %s has a value CloudEvents does not allow", name)
		}
	}
	return e, nil
}

// setStructuredData sets the event's data from its JSON format: data (JSON, or the string of a
// non-JSON type) or data_base64 (bytes), never both.
func setStructuredData(e *ce.Event, w wire) error {
	switch {
	case w.Data != nil && w.DataBase64 != nil:
		return invalid("an event has data or data_base64, not both")
	case w.DataBase64 != nil:
		b, err := base64.StdEncoding.Strict().DecodeString(*w.DataBase64)
		if err != nil {
			return invalid("data_base64 must be base64 (RFC 4648, with padding)")
		}
		e.DataEncoded, e.DataBase64 = b, true
	case w.Data != nil:
		if isJSONType(e.DataContentType()) {
			e.DataEncoded = []byte(w.Data)
			return nil
		}
		// The JSON format carries the data of a non-JSON type as a JSON string.
		if w.Data.Kind() != '"' {
			return invalid("data must be a JSON string when datacontenttype (%s) is not JSON; send bytes as data_base64", quoted(e.DataContentType()))
		}
		s, err := jsontext.AppendUnquote(nil, w.Data)
		if err != nil {
			return invalid("data is not a valid JSON string")
		}
		e.DataEncoded = s
	}
	return nil
}

// isJSONType reports whether a datacontenttype says the data is JSON. No datacontenttype in the
// JSON format means JSON.
func isJSONType(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// extensionValue reads an extension attribute's JSON value: a string, an integer (32-bit, as
// CloudEvents' Integer type is) or a boolean.
func extensionValue(name string, raw jsontext.Value) (any, error) {
	if err := validExtensionName(name); err != nil {
		return nil, err
	}
	switch raw.Kind() {
	case '"':
		s, err := jsontext.AppendUnquote(nil, raw)
		if err != nil {
			return nil, invalid("extension %s is not a valid JSON string", name)
		}
		return string(s), nil
	case 't', 'f':
		return raw.Kind() == 't', nil
	case '0':
		n, err := strconv.ParseInt(string(raw), 10, 32)
		if err != nil {
			return nil, invalid("extension %s must be a string, a boolean or an integer from -2147483648 to 2147483647", name)
		}
		return int32(n), nil
	}
	return nil, invalid("extension %s must be a string, a boolean or an integer (not null, an object or an array)", name)
}

// validExtensionName applies CloudEvents' rule for attribute names: lower-case ASCII letters and
// digits only. "ID" is not the id attribute, and Ferry never folds it into one.
func validExtensionName(name string) error {
	if name == "" || len(name) > MaxExtensionNameLength {
		return invalid("attribute %s is not a CloudEvents attribute: extension names are 1–%d lower-case letters and digits", quoted(name), MaxExtensionNameLength)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return invalid("attribute %s is not a CloudEvents attribute: extension names are 1–%d lower-case letters and digits (names are case-sensitive)", quoted(name), MaxExtensionNameLength)
		}
	}
	return nil
}

// checkString applies CloudEvents' String type: no control characters (U+0000–U+001F,
// U+007F–U+009F) and no Unicode noncharacters. Surrogates and invalid UTF-8 never get this far.
// A context attribute (required: it must not be empty) must not start or end with white space
// either: the CloudEvents SDK trims id, type, subject and datacontenttype as it sets them, so
// " evt_1" would be recorded and answered as "evt_1" — another value than was sent.
func checkString(name, s string, required bool) error {
	if required && s == "" {
		return invalid("%s must be a non-empty string", name)
	}
	if !utf8.ValidString(s) {
		return invalid("%s must be valid UTF-8", name)
	}
	for _, r := range s {
		if unicode.IsControl(r) || isNoncharacter(r) {
			return invalid("%s must not contain control characters or Unicode noncharacters", name)
		}
	}
	if required && strings.TrimSpace(s) != s {
		return invalid("%s must not start or end with white space (it would be read as another value)", name)
	}
	return nil
}

// isNoncharacter reports Unicode's 66 noncharacters: U+FDD0–U+FDEF and the last two code points
// of every plane.
func isNoncharacter(r rune) bool {
	return r >= 0xFDD0 && r <= 0xFDEF || r&0xFFFE == 0xFFFE
}

func validID(id string) error {
	if id == "" {
		return invalid("id must be a non-empty string, unique per event")
	}
	if len(id) > MaxIDLength {
		return invalid("id is %d bytes; the limit is %d", len(id), MaxIDLength)
	}
	return checkString("id", id, true)
}

// quoted repeats a client's value in a reason: quoted, escaped and cut short.
func quoted(s string) string {
	if len(s) > maxReasonBytes {
		cut := maxReasonBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}

// uriReferenceChars reports whether s uses only the characters RFC 3986 allows in a
// URI-reference (percent-encoding included). url.Parse alone lets through a space, '<', '"' and
// other characters a URI cannot hold.
func uriReferenceChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:@/?#[]", c) >= 0:
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			i += 2
		default:
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
