package ferry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// wireEvent is a CloudEvent's members in the order the JSON format lists them, each left out
// when the event has none. The generated CloudEvent's own encoder writes "data": null for an
// event without data, which Ferry rightly refuses (null is never a value), so events are encoded
// here; the extension attributes follow, spliced in by name.
type wireEvent struct {
	Specversion     any        `json:"specversion"`
	ID              string     `json:"id"`
	Source          string     `json:"source"`
	Type            string     `json:"type"`
	Time            *time.Time `json:"time,omitempty"`
	Subject         *string    `json:"subject,omitempty"`
	Datacontenttype *string    `json:"datacontenttype,omitempty"`
	Dataschema      *string    `json:"dataschema,omitempty"`
	Data            any        `json:"data,omitempty"`
	DataBase64      *[]byte    `json:"data_base64,omitempty"`
}

// appendEvent appends the event's JSON format to buf.
func appendEvent(buf *bytes.Buffer, ev *CloudEvent) error {
	b, err := json.Marshal(wireEvent{
		Specversion: ev.Specversion, ID: ev.Id, Source: ev.Source, Type: ev.Type, Time: ev.Time, Subject: ev.Subject,
		Datacontenttype: ev.Datacontenttype, Dataschema: ev.Dataschema, Data: ev.Data, DataBase64: ev.DataBase64,
	})
	if err != nil {
		return fmt.Errorf("ferry: encode event %s: %w", ev.Id, err)
	}
	if len(ev.AdditionalProperties) == 0 {
		buf.Write(b)
		return nil
	}
	buf.Write(b[:len(b)-1])
	names := make([]string, 0, len(ev.AdditionalProperties))
	for name := range ev.AdditionalProperties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v, err := json.Marshal(ev.AdditionalProperties[name])
		if err != nil {
			return fmt.Errorf("ferry: encode event %s's extension %q: %w", ev.Id, name, err)
		}
		k, _ := json.Marshal(name)
		buf.WriteByte(',')
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return nil
}

// encodeEvents encodes one event (batch false) or a batch of them, once for every attempt.
func encodeEvents(events []CloudEvent, batch bool) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(events) * 160)
	if batch {
		buf.WriteByte('[')
	}
	for i := range events {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := appendEvent(&buf, &events[i]); err != nil {
			return nil, err
		}
	}
	if batch {
		buf.WriteByte(']')
	}
	return buf.Bytes(), nil
}
