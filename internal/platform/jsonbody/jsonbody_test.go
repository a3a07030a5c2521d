package jsonbody_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
)

// limit decodes itself, as plans.Limit does: null is unlimited.
type limit struct {
	max       int64
	unlimited bool
}

func (l *limit) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		l.unlimited = true
		return nil
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return errors.New("a limit is a non-negative integer or null")
		}
	}
	return nil
}

type request struct {
	Key    string           `json:"key" jsonbody:"required"`
	Amount int64            `json:"amount" jsonbody:"required"`
	Note   *string          `json:"note"`
	Limits map[string]limit `json:"limits"`
	Nested *struct {
		A string `json:"a"`
	} `json:"nested"`
	Cleared *string `json:"cleared" jsonbody:"nullable"`
}

func TestDecode(t *testing.T) {
	for _, c := range []struct {
		name  string
		body  string
		field string
		want  string // a part of the reason; "" means accepted
	}{
		{"a valid request", `{"key":"s","amount":7}`, "", ""},
		{"every field", `{"key":"s","amount":0,"note":"n","limits":{"events":3,"tokens":null},"nested":{"a":"x"},"cleared":null}`, "", ""},
		{"an emoji, raw and escaped", `{"key":"😀\ud83d\ude00","amount":1}`, "", ""},
		{"whitespace around", " \n{\"key\":\"s\",\"amount\":1}\r\n\t", "", ""},

		{"the name in another case", `{"key":"s","Amount":7}`, "Amount", `"Amount" is not a field of this request (its fields are key, amount, note, limits, nested, cleared; names are case-sensitive)`},
		{"an unknown field", `{"key":"s","amount":7,"colour":"red"}`, "colour", `"colour" is not a field`},
		{"an unknown nested field", `{"key":"s","amount":7,"nested":{"b":1}}`, "nested.b", `"nested.b" is not a field of this request`},
		{"a duplicate member", `{"key":"s","amount":7,"amount":8}`, "amount", `"amount" appears more than once`},
		{"a duplicate nested member", `{"key":"s","amount":7,"nested":{"a":"x","a":"y"}}`, "nested.a", `"nested.a" appears more than once`},
		{"a duplicate in a map", `{"key":"s","amount":7,"limits":{"events":1,"events":2}}`, "limits.events", "appears more than once"},
		{"a missing required field", `{"key":"s"}`, "amount", `"amount" is required`},
		{"two missing", `{}`, "", `"key", "amount" are required`},
		{"null for a required field", `{"key":"s","amount":null}`, "amount", `"amount" is required and cannot be null`},
		{"null for an optional field", `{"key":"s","amount":1,"note":null}`, "note", `"note" cannot be null; leave it out instead`},
		{"a fraction", `{"key":"s","amount":7.5}`, "amount", `"amount" must be an integer`},
		{"a whole fraction", `{"key":"s","amount":7.0}`, "amount", `"amount" must be an integer`},
		{"an exponent", `{"key":"s","amount":1e3}`, "amount", `"amount" must be an integer`},
		{"a quoted number", `{"key":"s","amount":"7"}`, "amount", `"amount" must be an integer`},
		{"out of range", `{"key":"s","amount":99999999999999999999}`, "amount", `"amount" is out of range: a number here is at most 9007199254740991 (2^53−1) in magnitude`},
		{"the largest exact integer", `{"key":"s","amount":9007199254740991}`, "", ""},
		{"the smallest exact integer", `{"key":"s","amount":-9007199254740991}`, "", ""},
		{"2^53", `{"key":"s","amount":9007199254740992}`, "amount", `"amount" is out of range: a number here is at most 9007199254740991`},
		{"2^53+1", `{"key":"s","amount":9007199254740993}`, "amount", `"amount" is out of range`},
		{"below -(2^53-1)", `{"key":"s","amount":-9007199254740992}`, "amount", `"amount" is out of range`},
		{"2^63-1", `{"key":"s","amount":9223372036854775807}`, "amount", `"amount" is out of range`},
		{"a limit above 2^53-1, in a type that reads itself", `{"key":"s","amount":1,"limits":{"tokens":9007199254740993}}`, "limits.tokens", `"limits.tokens" is out of range`},
		{"an empty required string", `{"key":"","amount":1}`, "key", `"key" is required and cannot be empty`},
		{"an empty optional string", `{"key":"s","amount":1,"note":""}`, "note", `"note" is empty; leave it out instead`},
		{"an empty nullable string", `{"key":"s","amount":1,"cleared":""}`, "cleared", `"cleared" is empty; leave it out instead`},
		{"an empty nested string", `{"key":"s","amount":1,"nested":{"a":""}}`, "nested.a", `"nested.a" is empty`},
		{"an empty string in a type that reads itself", `{"key":"s","amount":1,"limits":{"tokens":""}}`, "limits.tokens", `"limits.tokens" is not valid: a limit is a non-negative integer or null`},
		{"whitespace is not empty", `{"key":" ","amount":1}`, "", ""},
		{"a number for a string", `{"key":5,"amount":1}`, "key", `"key" must be a string`},
		{"an array for an object", `{"key":"s","amount":1,"limits":[]}`, "limits", `"limits" must be an object`},
		{"a type's own words", `{"key":"s","amount":1,"limits":{"events":-1}}`, "limits.events", `"limits.events" is not valid: a limit is a non-negative integer or null`},
		{"invalid UTF-8", "{\"key\":\"a\xffb\",\"amount\":1}", "key", `"key" is not valid UTF-8`},
		{"invalid UTF-8 in a name", "{\"k\xc3\":\"a\",\"amount\":1}", "", "is not valid UTF-8"},
		{"a lone high surrogate", `{"key":"\ud800","amount":1}`, "key", `"key" holds an escaped lone surrogate`},
		{"two high surrogates", `{"key":"\udbff\udbff","amount":1}`, "key", "lone surrogate"},
		{"a lone low surrogate", `{"key":"x\udc00","amount":1}`, "key", "lone surrogate"},
		{"a high surrogate at the end", `{"key":"\ud800`, "key", "lone surrogate"},
		{"not JSON", `{key: "s"}`, "", "the body is not valid JSON (at byte 1)"},
		{"cut short", `{"key":"s","amount":`, "amount", "ends before its JSON value does"},
		{"trailing data", `{"key":"s","amount":1} {}`, "", "the body has more after its JSON value"},
		{"trailing garbage", `{"key":"s","amount":1}x`, "", "the body has more after its JSON value"},
		{"an array", `[1]`, "", "the body must be a JSON object"},
		{"a string", `"s"`, "", "the body must be a JSON object"},
		{"empty", ``, "", "the body is empty"},
		{"only whitespace", " \n ", "", "the body is empty"},
		{"a raw control character", "{\"key\":\"a\x01\",\"amount\":1}", "key", "not valid JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r request
			err := jsonbody.Decode([]byte(c.body), &r)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var je *jsonbody.Error
			if !errors.As(err, &je) {
				t.Fatalf("err %v (%T), want a *jsonbody.Error", err, err)
			}
			if !strings.Contains(je.Reason, c.want) || je.Field != c.field {
				t.Errorf("refused with field %q, %q; want field %q and %q", je.Field, je.Reason, c.field, c.want)
			}
			// Ferry's words only: no parser vocabulary, no slice of the body.
			for _, leak := range []string{"jsontext", "json:", "Go ", "int64", "cannot unmarshal", "offset", "`"} {
				if strings.Contains(je.Reason, leak) {
					t.Errorf("the reason %q shows the parser's %q", je.Reason, leak)
				}
			}
		})
	}
}

func TestDecode_KeepsValuesAsSent(t *testing.T) {
	var r request
	if err := jsonbody.Decode([]byte(`{"key":"caf\u00e9 😀 \ud83d\ude00","amount":9007199254740991}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Key != "café 😀 😀" || r.Amount != 9007199254740991 {
		t.Errorf("decoded %q %d", r.Key, r.Amount)
	}
}

// The bound is 2^53−1 exactly: the largest integer an IEEE 754 double holds with every integer
// below it.
func TestMaxInteger_IsTheLargestExactDouble(t *testing.T) {
	if jsonbody.MaxInteger != 9007199254740991 {
		t.Errorf("MaxInteger is %d, want 2^53−1", jsonbody.MaxInteger)
	}
	if f := float64(jsonbody.MaxInteger); int64(f) != jsonbody.MaxInteger || int64(f+1) != jsonbody.MaxInteger+1 || int64(f+2) == jsonbody.MaxInteger+2 {
		t.Error("2^53−1 and 2^53 are exact doubles and 2^53+1 is not; the bound is not where doubles stop being exact")
	}
}

// A field that keeps raw JSON is the client's data: "" and large numbers there are values, and
// a field tagged empty takes "" as a value of its own.
func TestDecode_RawFieldsAndTheEmptyTagKeepTheirValues(t *testing.T) {
	var ev struct {
		ID         string                    `json:"id" jsonbody:"required"`
		Data       jsontext.Value            `json:"data"`
		DataBase64 *string                   `json:"data_base64" jsonbody:"empty"`
		Other      map[string]jsontext.Value `json:",embed"`
	}
	body := `{"id":"a","data":{"s":"","n":99999999999999999999,"l":[""]},"data_base64":"","ext":""}`
	if err := jsonbody.Decode([]byte(body), &ev); err != nil {
		t.Fatalf("refused: %v", err)
	}
	if ev.DataBase64 == nil || *ev.DataBase64 != "" || string(ev.Other["ext"]) != `""` {
		t.Errorf("decoded %+v", ev)
	}
	if err := jsonbody.Decode([]byte(`{"id":""}`), &ev); err == nil {
		t.Error("an empty id was accepted beside a raw field")
	}
}

// A request that takes no fields says so, instead of listing none.
func TestDecode_ARequestWithoutFields(t *testing.T) {
	var none struct{}
	err := jsonbody.Decode([]byte(`{"all":true}`), &none)
	var je *jsonbody.Error
	if !errors.As(err, &je) || je.Reason != `"all" is not a field of this request (this request takes no fields)` {
		t.Errorf("refused with %v", err)
	}
}

// The unknown-member field collects what no other field names (the CloudEvents extensions).
func TestDecode_UnknownMembersField(t *testing.T) {
	var ev struct {
		ID    string                    `json:"id" jsonbody:"required"`
		Other map[string]jsontext.Value `json:",embed"`
	}
	if err := jsonbody.Decode([]byte(`{"id":"a","ext":"x","n":1}`), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.ID != "a" || len(ev.Other) != 2 || string(ev.Other["n"]) != "1" {
		t.Errorf("decoded %+v", ev)
	}
	if err := jsonbody.Decode([]byte(`{"id":"a","ext":"x","ext":"y"}`), &ev); err == nil {
		t.Error("a duplicate unknown member was accepted")
	}
}

// Only JSON's whitespace makes an optional body empty: a form feed is a body, and not JSON.
func TestEmpty(t *testing.T) {
	for body, empty := range map[string]bool{"": true, " \t\r\n": true, "\f": false, "\v": false, "\u00a0": false, "{}": false} {
		if got := jsonbody.Empty([]byte(body)); got != empty {
			t.Errorf("Empty(%q) = %v, want %v", body, got, empty)
		}
	}
}

func TestCheck(t *testing.T) {
	for body, ok := range map[string]bool{
		`[{"a":1},{"a":1}]`:          true,
		`"x"`:                        true,
		`[{"a":1,"a":1}]`:            false,
		`[{"a":{"b":1,"b":2}}]`:      false,
		"[\"\xff\"]":                 false,
		`["\udfff"]`:                 false,
		`[1] [2]`:                    false,
		``:                           false,
		`{"id":"a"}` + "\n":          true,
		`{"data":{"x":[1,{"y":2}]}}`: true,
	} {
		if err := jsonbody.Check([]byte(body)); (err == nil) != ok {
			t.Errorf("Check(%q) = %v, want ok=%v", body, err, ok)
		}
	}
}
