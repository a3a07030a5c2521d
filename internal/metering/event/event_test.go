package event_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

func TestParse_Valid(t *testing.T) {
	for name, body := range map[string]string{
		"minimal":          `{"specversion":"1.0","id":"e1","source":"/s","type":"t"}`,
		"every attribute":  `{"specversion":"1.0","id":"e1","source":"https://example.com/s","type":"t","subject":"sub","time":"2026-11-15T12:00:00.123+01:00","datacontenttype":"application/json","dataschema":"https://example.com/schema","data":{"n":1}}`,
		"extensions":       `{"specversion":"1.0","id":"e1","source":"/s","type":"t","traceparent":"00-ab","count":7,"flag":true}`,
		"an emoji id":      `{"specversion":"1.0","id":"emoji-😀","source":"/s","type":"t","data":{"m":"🚀"}}`,
		"escaped emoji":    `{"specversion":"1.0","id":"\ud83d\ude00","source":"/s","type":"t"}`,
		"text data":        `{"specversion":"1.0","id":"e1","source":"/s","type":"t","datacontenttype":"text/plain","data":"hello"}`,
		"base64 data":      `{"specversion":"1.0","id":"e1","source":"/s","type":"t","datacontenttype":"application/octet-stream","data_base64":"AAEC"}`,
		"no bytes of data": `{"specversion":"1.0","id":"e1","source":"/s","type":"t","datacontenttype":"application/octet-stream","data_base64":""}`,
		"empty strings and large numbers in data and extensions": `{"specversion":"1.0","id":"e1","source":"/s","type":"t","note":"","data":{"s":"","n":99999999999999999999}}`,
		"whitespace around": " \n{\"specversion\":\"1.0\",\"id\":\"e1\",\"source\":\"/s\",\"type\":\"t\"}\n",
		"a 2 KB prompt":     `{"specversion":"1.0","id":"e1","source":"/s","type":"t","data":{"prompt":"` + strings.Repeat("x", 2048) + `"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			ev, err := event.Parse([]byte(body))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !bytes.Equal(ev.Canonical, bytes.TrimSpace([]byte(body))) {
				t.Errorf("the event's bytes changed:\n%s\n%s", ev.Canonical, body)
			}
		})
	}
}

func TestParse_KeepsEveryValueAsSent(t *testing.T) {
	ev, err := event.Parse([]byte(`{"specversion":"1.0","id":"caf\u00e9-😀-\ud83d\ude00","source":"/s","type":"t","data":{"n":1.50}}`))
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID() != "café-😀-😀" || string(ev.CE.Data()) != `{"n":1.50}` {
		t.Errorf("id %q data %s", ev.ID(), ev.CE.Data())
	}
}

func TestParse_Refused(t *testing.T) {
	const base = `"specversion":"1.0","source":"/s","type":"t"`
	for _, c := range []struct{ name, body, want string }{
		{"invalid UTF-8 in the id", "{" + base + ",\"id\":\"bad\xff\"}", `"id" is not valid UTF-8`},
		{"invalid UTF-8 in data", "{" + base + ",\"id\":\"e\",\"data\":{\"m\":\"\xc3\"}}", `"data.m" is not valid UTF-8`},
		{"a lone high surrogate", `{` + base + `,"id":"sur\ud800"}`, "lone surrogate"},
		{"a lone surrogate in data", `{` + base + `,"id":"e","data":{"m":"\udbff"}}`, "lone surrogate"},
		{"a duplicate id", `{` + base + `,"id":"a","id":"b"}`, `"id" appears more than once`},
		{"a duplicate in data", `{` + base + `,"id":"e","data":{"n":1,"n":2}}`, `"data.n" appears more than once`},
		{"a duplicate extension", `{` + base + `,"id":"e","ext":"a","ext":"b"}`, `"ext" appears more than once`},
		{"the id in upper case", `{` + base + `,"ID":"e"}`, `"id" is required`},
		{"an upper-case extension", `{` + base + `,"id":"e","Ext":"x"}`, `attribute "Ext" is not a CloudEvents attribute`},
		{"a null extension", `{` + base + `,"id":"e","ext":null}`, "extension ext must be a string"},
		{"an object extension", `{` + base + `,"id":"e","ext":{}}`, "extension ext must be a string"},
		{"a fractional extension", `{` + base + `,"id":"e","ext":1.5}`, "extension ext must be a string, a boolean or an integer"},
		{"a null subject", `{` + base + `,"id":"e","subject":null}`, `"subject" cannot be null`},
		{"null data", `{` + base + `,"id":"e","data":null}`, `"data" cannot be null`},
		{"a number id", `{` + base + `,"id":5}`, `"id" must be a string`},
		{"a number time", `{` + base + `,"id":"e","time":5}`, `"time" must be a string`},
		{"a malformed time", `{` + base + `,"id":"e","time":"yesterday"}`, "time must be an RFC 3339 timestamp"},
		{"no specversion", `{"id":"e","source":"/s","type":"t"}`, `"specversion" is required`},
		{"an old specversion", `{"specversion":"0.3","id":"e","source":"/s","type":"t"}`, `specversion must be "1.0", not "0.3"`},
		{"an empty id", `{` + base + `,"id":""}`, `"id" is required and cannot be empty`},
		{"an empty subject", `{` + base + `,"id":"e","subject":""}`, `"subject" is empty; leave it out instead`},
		{"a control character in the id", `{` + base + `,"id":"a\u0001b"}`, "id must not contain control characters or Unicode noncharacters"},
		{"a space before the id", `{` + base + `,"id":" evt_1"}`, "id must not start or end with white space"},
		{"a no-break space after the id", `{` + base + `,"id":"evt_1\u00a0"}`, "id must not start or end with white space"},
		{"a space after the type", `{"specversion":"1.0","id":"e","source":"/s","type":"api.call "}`, "type must not start or end with white space"},
		{"a space before the subject", `{` + base + `,"id":"e","subject":" s"}`, "subject must not start or end with white space"},
		{"a noncharacter in the id", `{` + base + `,"id":"a\uffffb"}`, "id must not contain control characters or Unicode noncharacters"},
		{"a source no URI can hold", `{"specversion":"1.0","id":"e","source":"K<e","type":"t"}`, "source must be a URI-reference"},
		{"a control character in type", `{"specversion":"1.0","id":"e","source":"/s","type":"a\u0007"}`, "type must not contain control characters"},
		{"a long id", `{` + base + `,"id":"` + strings.Repeat("x", 257) + `"}`, "id is 257 bytes; the limit is 256"},
		{"data and data_base64", `{` + base + `,"id":"e","data":1,"data_base64":"AA=="}`, "data or data_base64, not both"},
		{"bad base64", `{` + base + `,"id":"e","data_base64":"!!"}`, "data_base64 must be base64"},
		{"an object for text data", `{` + base + `,"id":"e","datacontenttype":"text/plain","data":{}}`, "data must be a JSON string"},
		{"a relative dataschema", `{` + base + `,"id":"e","dataschema":"/x"}`, "dataschema must be an absolute URI"},
		{"not JSON", `{"specversion":"1.0",`, "ends before its JSON value does"},
		{"an array", `[]`, "must be a JSON object"},
		{"trailing data", `{` + base + `,"id":"e"} {}`, "more after its JSON value"},
		{"too large", `{` + base + `,"id":"e","data":"` + strings.Repeat("x", event.MaxEventBytes) + `"}`, "the limit is 65536"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := event.Parse([]byte(c.body))
			var ie *problem.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err %v, want refused input", err)
			}
			if !strings.Contains(ie.Error(), c.want) {
				t.Errorf("reason %q, want %q", ie.Error(), c.want)
			}
			for _, leak := range []string{"ReadString", "bigger context", "jsontext", "json:", "found in #", "`"} {
				if strings.Contains(ie.Error(), leak) {
					t.Errorf("the reason %q shows the parser's %q", ie.Error(), leak)
				}
			}
		})
	}
}

func binaryHeader(pairs ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(pairs); i += 2 {
		h.Add(pairs[i], pairs[i+1])
	}
	return h
}

func TestFromBinary(t *testing.T) {
	h := binaryHeader("Ce-Specversion", "1.0", "Ce-Id", "bin-1", "Ce-Source", "/s", "Ce-Type", "t",
		"Ce-Subject", "sub", "Ce-Traceparent", "00-ab", "Content-Type", "application/json")
	ev, err := event.FromBinary(h, []byte(`{"n": 1.50}`))
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID() != "bin-1" || ev.CE.Subject() != "sub" || string(ev.CE.Data()) != `{"n": 1.50}` || ev.CE.Extensions()["traceparent"] != "00-ab" {
		t.Errorf("event %v data %s", ev.CE, ev.CE.Data())
	}
	again, err := event.Parse(ev.Canonical)
	if err != nil || again.ID() != "bin-1" || string(again.CE.Data()) != `{"n": 1.50}` {
		t.Errorf("the JSON format does not read back: %v %s", err, ev.Canonical)
	}

	// Data of another type keeps its exact bytes, as data_base64.
	raw := []byte{0, 1, 0xff, 'x'}
	ev, err = event.FromBinary(binaryHeader("Ce-Specversion", "1.0", "Ce-Id", "bin-2", "Ce-Source", "/s", "Ce-Type", "t",
		"Content-Type", "application/octet-stream"), raw)
	if err != nil {
		t.Fatal(err)
	}
	var structured map[string]any
	if err := json.Unmarshal(ev.Canonical, &structured); err != nil || structured["data_base64"] != base64.StdEncoding.EncodeToString(raw) {
		t.Errorf("binary data: %v %s", err, ev.Canonical)
	}
	if !bytes.Equal(ev.CE.Data(), raw) {
		t.Errorf("data %v, want %v", ev.CE.Data(), raw)
	}
}

func TestFromBinary_Refused(t *testing.T) {
	base := []string{"Ce-Specversion", "1.0", "Ce-Id", "e", "Ce-Source", "/s", "Ce-Type", "t"}
	with := func(pairs ...string) http.Header {
		return binaryHeader(append(append([]string(nil), base...), pairs...)...)
	}
	for _, c := range []struct {
		name   string
		header http.Header
		body   string
		want   string
	}{
		{"no id", binaryHeader("Ce-Specversion", "1.0", "Ce-Source", "/s", "Ce-Type", "t"), "", "ce-id is missing"},
		{"an attribute twice", with("Ce-Subject", "a", "Ce-Subject", "b"), "", "ce-subject is sent 2 times"},
		{"a non-ASCII value", with("Ce-Subject", "caf\xc3\xa9"), "", "printable ASCII"},
		{"a percent sign", with("Ce-Subject", "50%25"), "", "without '%'"},
		{"data without a type", with(), `{"n":1}`, "Content-Type must say what the data"},
		{"invalid JSON data", with("Content-Type", "application/json"), `{"n":1,"n":2}`, "appears more than once"},
		{"invalid UTF-8 JSON data", with("Content-Type", "application/json"), "{\"n\":\"\xff\"}", "not valid UTF-8"},
		{"an upper-case extension", binaryHeader("Ce-Specversion", "1.0", "Ce-Id", "e", "Ce-Source", "/s", "Ce-Type", "t", "Ce-X_y", "1"), "", "not a CloudEvents attribute"},
		{"ce-datacontenttype", with("Ce-Datacontenttype", "text/plain"), "", "is the Content-Type header"},
		{"an old specversion", binaryHeader("Ce-Specversion", "0.3", "Ce-Id", "e", "Ce-Source", "/s", "Ce-Type", "t"), "", `specversion must be "1.0"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := event.FromBinary(c.header, []byte(c.body))
			if !event.IsInvalid(err) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want an InvalidError with %q", err, c.want)
			}
		})
	}
	_, err := event.FromBinary(with("Content-Type", "application/octet-stream"), bytes.Repeat([]byte{1}, event.MaxEventBytes))
	if !errors.Is(err, event.ErrTooLarge) {
		t.Errorf("an event over the limit in its JSON format: %v", err)
	}
}

func TestEnvelope_RoundTripsTheEventsExactBytes(t *testing.T) {
	raw := []byte("{ \"specversion\":\"1.0\", \"id\":\"\\u00e9-😀\",\n \"source\":\"/s\",\"type\":\"<t>&\",\"data\":{\"n\":1.50e3} }")
	ev, err := event.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	body, err := event.EncodeEnvelope(event.Envelope{AccountID: "acct_1", EventID: ev.ID(), ReceivedAtMs: 1, Event: ev.Canonical})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(body); i++ {
		if body[i] < 0x21 || body[i] > 0x7e {
			t.Fatalf("the message body has byte %#x at %d: not plain ASCII", body[i], i)
		}
	}
	env, got, err := event.DecodeEnvelope(body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(env.Event, raw) || got.ID() != "é-😀" || env.AccountID != "acct_1" || env.ReceivedAtMs != 1 {
		t.Errorf("decoded %+v (event %s), want the event's bytes %s", env, env.Event, raw)
	}
}

// A message that ingest queued before the base64 encoding (the envelope's JSON itself) is still
// processed after a deploy.
func TestDecodeEnvelope_ReadsMessagesQueuedBeforeTheEncoding(t *testing.T) {
	legacy := `{"accountId":"acct_1","eventId":"e1","receivedAtMs":1700000000000,"event":{"specversion":"1.0","id":"e1","source":"/s","type":"t"}}`
	env, ev, err := event.DecodeEnvelope(legacy)
	if err != nil || env.AccountID != "acct_1" || ev.ID() != "e1" {
		t.Errorf("legacy message: %+v %v", env, err)
	}
	for name, body := range map[string]string{
		"not base64":       "!!!",
		"a mismatched id":  base64.StdEncoding.EncodeToString([]byte(`{"accountId":"a","eventId":"x","receivedAtMs":1,"event":{"specversion":"1.0","id":"e1","source":"/s","type":"t"}}`)),
		"a duplicate":      base64.StdEncoding.EncodeToString([]byte(`{"accountId":"a","accountId":"b","eventId":"e1","receivedAtMs":1,"event":{"specversion":"1.0","id":"e1","source":"/s","type":"t"}}`)),
		"no receivedAtMs":  base64.StdEncoding.EncodeToString([]byte(`{"accountId":"a","eventId":"e1","event":{"specversion":"1.0","id":"e1","source":"/s","type":"t"}}`)),
		"an invalid event": `{"accountId":"a","eventId":"e1","receivedAtMs":1,"event":{"specversion":"1.0","id":"e1"}}`,
	} {
		if _, _, err := event.DecodeEnvelope(body); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}
