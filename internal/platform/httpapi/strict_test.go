package httpapi_test

// The strict decoder, route by route: every body a route takes is read by the same rules, and a
// refused body is a 400 that names the field in Ferry's words and leaves everything as it was.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// stored is every item of every table, and the queue's depth: what a refused request must not
// change.
func stored(t *testing.T, h *apptest.Harness) string {
	t.Helper()
	var b strings.Builder
	for _, def := range resources.Tables {
		out, err := h.Env.Clients.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{
			TableName: aws.String(h.Env.Names.Table(def.Logical)), ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			t.Fatalf("scan %s: %v", def.Logical, err)
		}
		items := make([]string, 0, len(out.Items))
		for _, item := range out.Items {
			var m map[string]any
			if err := attributevalue.UnmarshalMap(item, &m); err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(m) // map keys sorted
			items = append(items, string(raw))
		}
		fmt.Fprintf(&b, "%s: %d %s\n", def.Logical, len(items), strings.Join(sorted(items), " "))
	}
	fmt.Fprintf(&b, "queue: %d\n", queued(t, h))
	return b.String()
}

func sorted(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// route is one route that takes a body, a valid body for it, and what makes it invalid.
type route struct {
	name, method, path string
	operator           bool
	valid              string
	// first is the valid body's first member name; required lists the required ones.
	first    string
	required []string
	// integer is a member that is an integer in the contract ("" if none).
	integer string
}

const validEvent = `{"specversion":"1.0","id":"evt_v","source":"/tests","type":"api.call"}`

func strictRoutes(hold string) []route {
	return []route{
		{name: "create account", method: "POST", path: "/v1/accounts", operator: true,
			valid: `{"id":"acct_v","plan":"free"}`, first: "id", required: []string{"id"}},
		{name: "update account", method: "PATCH", path: "/v1/accounts/acct_s", operator: true,
			valid: `{"agreementStart":3}`, first: "agreementStart", integer: "agreementStart"},
		{name: "event", method: "POST", path: "/v1/events",
			valid: validEvent, first: "specversion", required: []string{"specversion", "id", "source", "type"}},
		{name: "hold", method: "POST", path: "/v1/holds",
			valid: `{"key":"job-v","feature":"tokens","amount":10}`, first: "key", required: []string{"key", "feature", "amount"}, integer: "amount"},
		{name: "charge", method: "POST", path: "/v1/holds/" + hold + "/charges",
			valid: `{"key":"step-v","amount":5}`, first: "key", required: []string{"key", "amount"}, integer: "amount"},
		{name: "settle", method: "POST", path: "/v1/holds/" + hold + "/settle",
			valid: `{"used":1}`, first: "used", integer: "used"},
		{name: "correction", method: "POST", path: "/v1/usage/corrections", operator: true,
			valid: `{"account":"acct_s","feature":"events","units":-1,"reason":"a bot's click"}`, first: "account",
			required: []string{"account", "feature", "units", "reason"}, integer: "units"},
		{name: "reconcile", method: "POST", path: "/v1/reconcile", operator: true,
			valid: `{"account":"acct_s","cycle":"2026-11"}`, first: "account"},
	}
}

// withMember adds a raw member after the first "{".
func withMember(body, member string) string { return "{" + member + "," + body[1:] }

// without drops one member of a flat body.
func without(t *testing.T, body, name string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	delete(m, name)
	out, _ := json.Marshal(m)
	return string(out)
}

// replaced sets one member of a flat body to a raw value.
func replaced(t *testing.T, body, name, raw string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	m[name] = json.RawMessage(raw)
	out, _ := json.Marshal(m)
	return string(out)
}

// renamed renames the first member (`"id"` to `"ID"`).
func renamed(body, first string) string {
	return strings.Replace(body, `"`+first+`"`, `"`+strings.ToUpper(first[:1])+first[1:]+`"`, 1)
}

// leaks are the parser's words, which a detail must never show.
var leaks = []string{"json:", "jsontext", "ReadString", "bigger context", "found in #", "Go value", "Go struct", "int64", "cannot unmarshal", "invalid character", "`"}

func TestStrictDecoder_EveryRoute(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_s", "free", map[string]any{"tokens": 1000})
	r := h.Do(t, "POST", "/v1/holds", key, map[string]any{"key": "job-s", "feature": "tokens", "amount": 100})
	if r.Status != http.StatusCreated {
		t.Fatalf("hold: %d %s", r.Status, r.Body)
	}
	hold := r.JSON(t)["id"].(string)
	if r := h.Do(t, "POST", "/v1/holds/"+hold+"/charges", key, map[string]any{"key": "step-1", "amount": 7}); r.Status != 200 {
		t.Fatalf("charge: %d %s", r.Status, r.Body)
	}
	before := stored(t, h)
	for _, rt := range strictRoutes(hold) {
		renamedWant := "case-sensitive"
		if rt.name == "event" {
			renamedWant = `"specversion" is required` // "Specversion" is no attribute of CloudEvents
		}
		cases := []struct{ name, body, want string }{
			{"a member name in another case", renamed(rt.valid, rt.first), renamedWant},
			{"a duplicate member", withMember(rt.valid, fmt.Sprintf("%q:%s", rt.first, firstValue(t, rt.valid, rt.first))), "appears more than once"},
			{"null", replaced(t, rt.valid, rt.first, "null"), "cannot be null"},
			{"invalid UTF-8", replaced(t, rt.valid, rt.first, "\"x\xff\""), "not valid UTF-8"},
			{"a lone surrogate", replaced(t, rt.valid, rt.first, `"x\ud800"`), "lone surrogate"},
			{"data after the object", rt.valid + ` {}`, "more after its JSON value"},
			{"not an object", `["x"]`, "must be a JSON object"},
			{"cut short", rt.valid[:len(rt.valid)-2], "ends before its JSON value does"},
		}
		if rt.name != "event" {
			// (An event's other members are extension attributes; "Colour" is refused above as
			// a name in another case would be.)
			cases = append(cases, struct{ name, body, want string }{"an unknown member", withMember(rt.valid, `"colour":"red"`), `"colour" is not a field of this request`})
		}
		if strings.HasPrefix(firstValue(t, rt.valid, rt.first), `"`) {
			cases = append(cases, struct{ name, body, want string }{"an empty string", replaced(t, rt.valid, rt.first, `""`), "empty"})
		}
		if rt.integer != "" {
			cases = append(cases, struct{ name, body, want string }{rt.integer + " 2^53", replaced(t, rt.valid, rt.integer, "9007199254740992"), "at most 9007199254740991"})
		}
		for _, req := range rt.required {
			cases = append(cases, struct{ name, body, want string }{"without " + req, without(t, rt.valid, req), fmt.Sprintf("%q is required", req)})
		}
		if rt.integer != "" {
			for _, v := range []string{"7.5", "7.0", "1e3", `"7"`, "99999999999999999999"} {
				want := "must be an integer"
				if strings.HasPrefix(v, "9999") {
					want = "out of range"
				}
				cases = append(cases, struct{ name, body, want string }{rt.integer + " " + v, replaced(t, rt.valid, rt.integer, v), want})
			}
		}
		for _, c := range cases {
			t.Run(rt.name+"/"+c.name, func(t *testing.T) {
				auth := key
				if rt.operator {
					auth = apptest.AdminKey
				}
				p := assertProblem(t, h.Do(t, rt.method, rt.path, auth, []byte(c.body)), 400, "invalid-request")
				detail := fmt.Sprint(p["detail"])
				if !strings.Contains(detail, c.want) {
					t.Errorf("detail %q, want %q", detail, c.want)
				}
				for _, leak := range leaks {
					if strings.Contains(detail, leak) {
						t.Errorf("detail %q shows the parser's %q", detail, leak)
					}
				}
			})
		}
	}
	// The batch is read strictly as a whole.
	for name, body := range map[string]string{
		"a duplicate in an item": `[` + withMember(validEvent, `"id":"evt_w"`) + `]`,
		"invalid UTF-8":          "[" + replaced(t, validEvent, "id", "\"x\xff\"") + "]",
		"a lone surrogate":       "[" + replaced(t, validEvent, "id", `"x\udfff"`) + "]",
		"data after the array":   "[" + validEvent + "] []",
	} {
		t.Run("batch/"+name, func(t *testing.T) {
			assertProblem(t, h.Do(t, "POST", "/v1/events/batch", key, []byte(body)), 400, "invalid-request")
		})
	}
	// An optional body is empty only when it holds nothing but JSON's whitespace: a form feed
	// is a body, and not JSON (a case the fuzzer found).
	assertProblem(t, h.Do(t, "POST", "/v1/holds/"+hold+"/settle", key, []byte("\f")), 400, "invalid-request")
	// The run-now route takes no member at all.
	assertProblem(t, h.Do(t, "POST", "/v1/report", apptest.AdminKey, []byte(`{"all":true}`)), 400, "invalid-request")
	assertProblem(t, h.Do(t, "POST", "/v1/report", apptest.AdminKey, []byte("\f")), 400, "invalid-request")
	h.Drain(t, 0)
	if after := stored(t, h); after != before {
		t.Errorf("refused requests changed what is stored:\nbefore %s\nafter  %s", before, after)
	}
}

func firstValue(t *testing.T, body, name string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	return string(m[name])
}

// A linked id in PATCH takes null (unlink) where the contract says so, and nothing else but a
// string; in a create, null is no value (leave the member out).
func TestStrictDecoder_LinkedIDs_NullOnlyWhereTheContractSaysSo(t *testing.T) {
	h := apptest.New(t)
	if r := h.Do(t, "POST", "/v1/accounts", apptest.AdminKey, `{"id":"acct_l","kindeCustomerId":"kc_1"}`); r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	p := assertProblem(t, h.Do(t, "POST", "/v1/accounts", apptest.AdminKey, `{"id":"acct_m","kindeCustomerId":null}`), 400, "invalid-request")
	if !strings.Contains(fmt.Sprint(p["detail"]), `"kindeCustomerId" cannot be null`) {
		t.Errorf("detail %v", p["detail"])
	}
	p = assertProblem(t, h.Do(t, "PATCH", "/v1/accounts/acct_l", apptest.AdminKey, `{"kindeCustomerId":5}`), 400, "invalid-request")
	if d := fmt.Sprint(p["detail"]); !strings.Contains(d, `"kindeCustomerId" is not valid: a linked id is a string, or null to unlink it`) {
		t.Errorf("detail %q", d)
	}
	if r := h.Do(t, "PATCH", "/v1/accounts/acct_l", apptest.AdminKey, `{"kindeCustomerId":null}`); r.Status != 200 || r.JSON(t)["kindeCustomerId"] != nil {
		t.Errorf("unlink: %d %s", r.Status, r.Body)
	}
}

// Defect 5: a charge without amount (or with null) was charged as 0 and burned its step key, so
// the correct retry got 422 and that usage could never be recorded. Defect 6: "Amount" charged 7.
func TestStrictDecoder_ACharge_RequiredFieldsAreRequired_TheStepKeyIsNotBurned(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_c", "free", map[string]any{"tokens": 1000})
	r := h.Do(t, "POST", "/v1/holds", key, map[string]any{"key": "job-c", "feature": "tokens", "amount": 500})
	if r.Status != http.StatusCreated {
		t.Fatalf("hold: %d %s", r.Status, r.Body)
	}
	charges := "/v1/holds/" + r.JSON(t)["id"].(string) + "/charges"
	for body, want := range map[string]string{
		`{"key":"step-7"}`:                         `"amount" is required`,
		`{"key":"step-7","amount":null}`:           `"amount" is required and cannot be null`,
		`{"key":"step-7","Amount":120}`:            `"Amount" is not a field of this request`,
		`{"key":"step-7","amount":1,"amount":120}`: `"amount" appears more than once`,
		`{"Key":"step-7","amount":120}`:            `"Key" is not a field of this request`,
	} {
		p := assertProblem(t, h.Do(t, "POST", charges, key, body), 400, "invalid-request")
		if !strings.Contains(fmt.Sprint(p["detail"]), want) {
			t.Errorf("%s: detail %q, want %q", body, p["detail"], want)
		}
	}
	ok := h.Do(t, "POST", charges, key, `{"key":"step-7","amount":120}`)
	if got := ok.JSON(t); ok.Status != 200 || got["charged"] != float64(120) || got["used"] != float64(120) {
		t.Errorf("the correct retry: %d %s", ok.Status, ok.Body)
	}
}
