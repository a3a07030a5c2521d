package event

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
)

// ErrTooLarge: an event in binary mode whose JSON (structured mode) would be over MaxEventBytes.
var ErrTooLarge = errors.New("event too large")

// binaryPrefix starts the header of every attribute in HTTP binary mode (ce-id, ce-source…).
const binaryPrefix = "ce-"

// Structured mode's media type: an event in its JSON format, attributes and data in the body.
const StructuredContentType = "application/cloudevents+json"

// IsBinary reports whether a request carries its event in HTTP binary mode: the attributes in
// ce-* headers (ce-specversion says so) and the data as the body.
func IsBinary(h http.Header) bool {
	for k := range h {
		if strings.EqualFold(k, binaryPrefix+"specversion") {
			return true
		}
	}
	return false
}

// FromBinary validates an event sent in HTTP binary mode and renders it in its JSON format,
// which is what travels and is archived. Header names are case-insensitive, as HTTP has them;
// header values are taken exactly as sent. The HTTP binding percent-encodes some characters in
// header values and Ferry will not guess whether a client did, so a value must be printable
// ASCII without '%': an event with other characters in its attributes is sent in structured
// mode. The body is the data, of the type Content-Type names: JSON data is read strictly; any
// other data is kept as its exact bytes (data_base64).
func FromBinary(h http.Header, body []byte) (Event, error) {
	attrs := attributes{extensions: map[string]any{}}
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names) // the first problem reported is the same on every try
	for _, k := range names {
		if len(k) <= len(binaryPrefix) || !strings.EqualFold(k[:len(binaryPrefix)], binaryPrefix) {
			continue
		}
		name := strings.ToLower(k[len(binaryPrefix):])
		values := h[k]
		if len(values) != 1 {
			return Event{}, invalid("header ce-%s is sent %d times (HTTP joins repeated headers with commas, so a value holds none); send each attribute once", name, len(values))
		}
		v := values[0]
		if err := binaryValue(name, v); err != nil {
			return Event{}, err
		}
		switch name {
		case "specversion":
			attrs.specVersion = v
		case "id":
			attrs.id = v
		case "source":
			attrs.source = v
		case "type":
			attrs.typ = v
		case "subject":
			attrs.subject = &v
		case "time":
			attrs.time = &v
		case "dataschema":
			attrs.dataSchema = &v
		case "datacontenttype":
			return Event{}, invalid("in binary mode the data's type is the Content-Type header, not ce-datacontenttype")
		case "data", "data_base64":
			return Event{}, invalid("in binary mode the data is the body, not a ce-%s header", name)
		default:
			attrs.extensions[name] = v
		}
	}
	for _, required := range []struct{ name, value string }{{"id", attrs.id}, {"source", attrs.source}, {"type", attrs.typ}} {
		if required.value == "" {
			return Event{}, invalid("binary mode needs the ce-id, ce-source and ce-type headers; ce-%s is missing or empty", required.name)
		}
	}
	contentTypes := h.Values("Content-Type")
	if len(contentTypes) > 1 {
		return Event{}, invalid("Content-Type is sent %d times; send it once", len(contentTypes))
	}
	if len(contentTypes) == 1 {
		attrs.dataContentType = &contentTypes[0]
	}
	e, err := attrs.event()
	if err != nil {
		return Event{}, err
	}
	if len(body) > 0 {
		if attrs.dataContentType == nil {
			return Event{}, invalid("in binary mode Content-Type must say what the data (the body) is")
		}
		if isJSONType(*attrs.dataContentType) {
			if err := jsonbody.Check(body); err != nil {
				return Event{}, invalid("the data (the body) is not valid JSON: %s", err.Error())
			}
			e.DataEncoded = append([]byte(nil), body...)
		} else {
			e.DataEncoded, e.DataBase64 = append([]byte(nil), body...), true
		}
	}
	if err := e.Validate(); err != nil {
		return Event{}, invalid("not a CloudEvents 1.0 event: %s", strings.TrimSpace(err.Error()))
	}
	structured, err := e.MarshalJSON() // not json.Marshal, which would compact and re-escape the data
	if err != nil {
		return Event{}, invalid("the event could not be rendered in its JSON format")
	}
	if len(structured) > MaxEventBytes {
		return Event{}, fmt.Errorf("%w: the event is %d bytes in its JSON format; the limit is %d", ErrTooLarge, len(structured), MaxEventBytes)
	}
	// What travels is the JSON format, and the worker reads it with Parse: read it back here, so
	// an event is never accepted that the worker would refuse.
	ev, err := Parse(structured)
	if err != nil {
		return Event{}, fmt.Errorf("binary event does not read back: %w", err)
	}
	return ev, nil
}

// binaryValue checks one attribute header's value.
func binaryValue(name, v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == '%' {
			return invalid("header ce-%s must hold printable ASCII without '%%' (send events with other characters in their attributes in structured mode, %s)", name, StructuredContentType)
		}
	}
	return nil
}
