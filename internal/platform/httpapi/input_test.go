package httpapi_test

// The contract's rules on input that no Go type states, end to end through the local stack:
// an empty string is never "not given", no quantity is above what every store keeps exactly
// (2^53−1), a body is declared as JSON, and a body in a content coding is refused, never read as
// if plain. Each refusal is a problem document that names the field, and nothing is stored.

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// bodyCase is one refused body: the route, the body, the field the detail names and its words.
type bodyCase struct {
	name, method, path string
	operator           bool
	body, want         string
}

// refuseAll sends each case and checks its 400 invalid-request problem, then that nothing
// anywhere changed.
func refuseAll(t *testing.T, h *apptest.Harness, key string, cases []bodyCase) {
	t.Helper()
	before := stored(t, h)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			auth := key
			if c.operator {
				auth = apptest.AdminKey
			}
			p := assertProblem(t, h.Do(t, c.method, c.path, auth, c.body), http.StatusBadRequest, "invalid-request")
			if d := fmt.Sprint(p["detail"]); !strings.Contains(d, c.want) {
				t.Errorf("detail %q, want %q", d, c.want)
			}
		})
	}
	h.Drain(t, 0)
	if after := stored(t, h); after != before {
		t.Errorf("refused requests changed what is stored:\nbefore %s\nafter  %s", before, after)
	}
}

// An empty string in a body is refused wherever a field is sent, as an empty query parameter
// is: before, "account": "" reconciled (and repaired at the providers) a whole page of accounts,
// "cycle": "" booked a correction into the open cycle, and "status": "" / "plan": "" created an
// active free account, where PATCH refused both.
func TestInput_AnEmptyStringIsNeverNotGiven(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_e", "free", map[string]any{"tokens": 1000})
	r := h.Do(t, "POST", "/v1/holds", key, map[string]any{"key": "job-e", "feature": "tokens", "amount": 100})
	if r.Status != http.StatusCreated {
		t.Fatalf("hold: %d %s", r.Status, r.Body)
	}
	hold := r.JSON(t)["id"].(string)
	refuseAll(t, h, key, []bodyCase{
		{"reconcile: account", "POST", "/v1/reconcile", true, `{"account":""}`, `"account" is empty; leave it out instead`},
		{"reconcile: cycle", "POST", "/v1/reconcile", true, `{"account":"acct_e","cycle":""}`, `"cycle" is empty; leave it out instead`},
		{"reconcile: after", "POST", "/v1/reconcile", true, `{"after":""}`, `"after" is empty`},
		{"correction: cycle", "POST", "/v1/usage/corrections", true, `{"account":"acct_e","feature":"events","units":-1,"reason":"a bot","cycle":""}`, `"cycle" is empty; leave it out instead`},
		{"correction: account", "POST", "/v1/usage/corrections", true, `{"account":"","feature":"events","units":-1,"reason":"a bot"}`, `"account" is required and cannot be empty`},
		{"correction: reason", "POST", "/v1/usage/corrections", true, `{"account":"acct_e","feature":"events","units":-1,"reason":""}`, `"reason" is required and cannot be empty`},
		{"create account: status", "POST", "/v1/accounts", true, `{"id":"acct_e2","status":""}`, `"status" is empty; leave it out instead`},
		{"create account: plan", "POST", "/v1/accounts", true, `{"id":"acct_e2","plan":""}`, `"plan" is empty; leave it out instead`},
		{"create account: id", "POST", "/v1/accounts", true, `{"id":""}`, `"id" is required and cannot be empty`},
		{"create account: a linked id", "POST", "/v1/accounts", true, `{"id":"acct_e2","stripeCustomerId":""}`, `"stripeCustomerId" is empty`},
		{"update account: status", "PATCH", "/v1/accounts/acct_e", true, `{"status":""}`, `"status" is empty; leave it out instead`},
		{"update account: plan", "PATCH", "/v1/accounts/acct_e", true, `{"plan":""}`, `"plan" is empty; leave it out instead`},
		{"update account: a linked id", "PATCH", "/v1/accounts/acct_e", true, `{"kindeCustomerId":""}`, `"kindeCustomerId" is empty`},
		{"redrive: account", "POST", "/v1/events/evt_x/redrive", true, `{"account":""}`, `"account" is required and cannot be empty`},
		{"hold: key", "POST", "/v1/holds", false, `{"key":"","feature":"tokens","amount":1}`, `"key" is required and cannot be empty`},
		{"hold: feature", "POST", "/v1/holds", false, `{"key":"job-e2","feature":"","amount":1}`, `"feature" is required and cannot be empty`},
		{"charge: key", "POST", "/v1/holds/" + hold + "/charges", false, `{"key":"","amount":1}`, `"key" is required and cannot be empty`},
		{"event: subject", "POST", "/v1/events", false, `{"specversion":"1.0","id":"evt_e","source":"/s","type":"t","subject":""}`, `"subject" is empty`},
	})
}

// Every quantity the API takes is at most 2^53−1 in magnitude: above it a number is not an
// exact integer for the local emulator (which holds numbers as doubles) or a JavaScript client.
// Before, a limit of 2^63−1 was taken, and the first hold rewrote the account row through a
// double, after which every read of the account answered 500; a limit of 2^53+1 became 2^53.
func TestInput_EveryQuantityIsAtMostTheLargestExactInteger(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_q", "free", map[string]any{"tokens": 1000})
	r := h.Do(t, "POST", "/v1/holds", key, map[string]any{"key": "job-q", "feature": "tokens", "amount": 100})
	if r.Status != http.StatusCreated {
		t.Fatalf("hold: %d %s", r.Status, r.Body)
	}
	hold := r.JSON(t)["id"].(string)
	const bound = "at most 9007199254740991"
	limit := `"limits.tokens" is not valid: a limit is an integer from 0 to 9007199254740991, or null (unlimited)`
	refuseAll(t, h, key, []bodyCase{
		{"create account: a limit of 2^53+1", "POST", "/v1/accounts", true, `{"id":"acct_q2","limits":{"tokens":9007199254740993}}`, limit},
		{"create account: a limit of 2^63-1", "POST", "/v1/accounts", true, `{"id":"acct_q2","limits":{"tokens":9223372036854775807}}`, limit},
		{"update account: a limit of 2^53", "PATCH", "/v1/accounts/acct_q", true, `{"limits":{"tokens":9007199254740992}}`, limit},
		{"update account: agreementStart", "PATCH", "/v1/accounts/acct_q", true, `{"agreementStart":9007199254740992}`, `"agreementStart" is out of range: a number here is ` + bound},
		{"hold: amount", "POST", "/v1/holds", false, `{"key":"job-q2","feature":"tokens","amount":9007199254740992}`, `"amount" is out of range: a number here is ` + bound},
		{"charge: amount", "POST", "/v1/holds/" + hold + "/charges", false, `{"key":"step-q","amount":9007199254740993}`, `"amount" is out of range: a number here is ` + bound},
		{"settle: used", "POST", "/v1/holds/" + hold + "/settle", false, `{"used":9007199254740992}`, `"used" is out of range: a number here is ` + bound},
		{"correction: units", "POST", "/v1/usage/corrections", true, `{"account":"acct_q","feature":"events","units":-9007199254740992,"reason":"a bot"}`, `"units" is out of range: a number here is ` + bound},
	})

	// The largest limit is kept exactly through a hold, and every read of the account answers.
	bigKey := h.CreateAccount(t, "acct_big", "free", map[string]any{"tokens": int64(1<<53 - 1)})
	if r := h.Do(t, "POST", "/v1/holds", bigKey, map[string]any{"key": "job-big", "feature": "tokens", "amount": 5}); r.Status != http.StatusCreated {
		t.Fatalf("hold under the largest limit: %d %s", r.Status, r.Body)
	}
	for _, path := range []string{"/v1/accounts/acct_big", "/v1/accounts?prefix=acct_big"} {
		r := h.Do(t, "GET", path, apptest.AdminKey, nil)
		if r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte(`"tokens":9007199254740991`)) {
			t.Errorf("GET %s after a hold: %d %s", path, r.Status, r.Body)
		}
	}
	if r := h.Do(t, "GET", "/v1/usage?feature=tokens", bigKey, nil); r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte(`"limit":9007199254740991`)) {
		t.Errorf("GET /v1/usage after a hold: %d %s", r.Status, r.Body)
	}
}

// POST and PATCH /v1/accounts read JSON only, as every other route that takes a JSON body does:
// before, they read a text/plain body as if it were JSON.
func TestInput_TheAccountRoutesTakeJSONOnly(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_t", "free", nil)
	before := stored(t, h)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/accounts", `{"id":"acct_t2"}`},
		{"PATCH", "/v1/accounts/acct_t", `{"status":"inactive"}`},
	} {
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/xml"} {
			p := assertProblem(t, h.Do(t, c.method, c.path, apptest.AdminKey, c.body, "Content-Type", ct), http.StatusUnsupportedMediaType, "unsupported-media-type")
			if d := fmt.Sprint(p["detail"]); !strings.Contains(d, ct) {
				t.Errorf("%s %s as %s: detail %q does not name the type", c.method, c.path, ct, d)
			}
		}
	}
	if after := stored(t, h); after != before {
		t.Errorf("refused requests changed what is stored:\nbefore %s\nafter  %s", before, after)
	}
}

// concrete fills a route path's {name} segments.
func concrete(path string) string {
	for _, name := range []string{"{id}", "{lab}", "{asset}"} {
		path = strings.ReplaceAll(path, name, "x1")
	}
	return path
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// A body in a content coding is refused with 415 and Accept-Encoding: identity on every route
// that may take a body, before anything reads it — authentication by signature, the
// Idempotency-Key's claim, the route. Before, a gzip body was answered "not valid UTF-8" and a
// body declared br was read as if plain.
func TestInput_ACodedBodyIsRefused_OnEveryRouteThatTakesABody(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_g", "free", map[string]any{"tokens": 1000})
	before := stored(t, h)
	event := []byte(`{"specversion":"1.0","id":"evt_g","source":"/s","type":"t"}`)
	for _, route := range resources.Routes {
		if route.Method == http.MethodGet {
			continue
		}
		for _, coding := range []string{"gzip", "br", "deflate", "x-gzip", "GZIP", "identity, gzip", "zstd"} {
			t.Run(route.Key()+"/"+coding, func(t *testing.T) {
				auth := key
				if route.Auth.TakesOperator() {
					auth = apptest.AdminKey
				}
				r := h.Do(t, route.Method, concrete(route.Path), auth, gzipped(t, event),
					"Content-Encoding", coding, "Idempotency-Key", "coded-"+route.Key()+coding)
				p := assertProblem(t, r, http.StatusUnsupportedMediaType, "unsupported-media-type")
				if got := r.Header.Get("Accept-Encoding"); got != "identity" {
					t.Errorf("Accept-Encoding %q, want identity", got)
				}
				if d := fmt.Sprint(p["detail"]); !strings.Contains(d, "content coding") || strings.Contains(d, "UTF-8") {
					t.Errorf("detail %q", d)
				}
			})
		}
	}
	// A Stripe delivery signed as sent, and declared br although its bytes are plain: refused,
	// not stored as if plain.
	body := []byte(`{"id":"evt_br","object":"event","type":"invoice.paid","created":1763208000,"data":{"object":{"object":"invoice","customer":"cus_1"}}}`)
	r := h.Do(t, "POST", "/v1/webhooks/stripe", "", body, "Content-Type", "application/json", "Content-Encoding", "br",
		"Stripe-Signature", stripewebhook.Sign(body, apptest.StripeSecret, time.Now()))
	assertProblem(t, r, http.StatusUnsupportedMediaType, "unsupported-media-type")
	h.Drain(t, 0)
	if after := stored(t, h); after != before {
		t.Errorf("refused requests changed what is stored:\nbefore %s\nafter  %s", before, after)
	}
	// identity is no coding: the body is read as sent.
	if r := h.Do(t, "POST", "/v1/events", key, event, "Content-Encoding", "identity"); r.Status != http.StatusAccepted {
		t.Errorf("Content-Encoding identity: %d %s", r.Status, r.Body)
	}
}

// A route that takes no fields says so, instead of listing none ("its fields are ; …").
func TestInput_ARouteWithoutFieldsSaysItTakesNone(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_n", "free", nil)
	for _, c := range []struct {
		path, key string
	}{
		{"/v1/report", apptest.AdminKey},
		{"/v1/billing-events/bev_x/replay", key},
		{"/v1/sessions", apptest.AdminKey},
		{"/v1/labs/holds/runs", apptest.AdminKey},
	} {
		p := assertProblem(t, h.Do(t, "POST", c.path, c.key, `{"all":true}`), http.StatusBadRequest, "invalid-request")
		if d := fmt.Sprint(p["detail"]); d != `"all" is not a field of this request (this request takes no fields)` {
			t.Errorf("POST %s: detail %q", c.path, d)
		}
	}
}

// A route whose body may be left out reads JSON only all the same: a request declared as
// something else is a 415 even when it carries no body, or nothing but white space, so a client
// that sends a form or text to these routes learns it at once instead of being served as if it
// had sent nothing. Left undeclared, the same request is served.
func TestInput_ARouteWhoseBodyMayBeLeftOutRefusesANonJSONDeclaration(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_o", "free", map[string]any{"tokens": 1000})
	r := h.Do(t, "POST", "/v1/holds", key, map[string]any{"key": "job-o", "feature": "tokens", "amount": 100})
	if r.Status != http.StatusCreated {
		t.Fatalf("hold: %d %s", r.Status, r.Body)
	}
	hold := r.JSON(t)["id"].(string)
	before := stored(t, h)
	for _, c := range []struct{ path, key string }{
		{"/v1/report", apptest.AdminKey},
		{"/v1/reconcile", apptest.AdminKey},
		{"/v1/sessions", apptest.AdminKey},
		{"/v1/labs/holds-five/runs", apptest.AdminKey},
		{"/v1/billing-events/bev_x/replay", key},
		{"/v1/holds/" + hold + "/settle", key},
	} {
		for _, body := range []string{"", " \n"} {
			for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded"} {
				p := assertProblem(t, h.Do(t, "POST", c.path, c.key, body, "Content-Type", ct), http.StatusUnsupportedMediaType, "unsupported-media-type")
				if d := fmt.Sprint(p["detail"]); !strings.Contains(d, ct) {
					t.Errorf("POST %s as %s with body %q: detail %q does not name the type", c.path, ct, body, d)
				}
			}
		}
	}
	h.Drain(t, 0)
	if after := stored(t, h); after != before {
		t.Errorf("refused requests changed what is stored:\nbefore %s\nafter  %s", before, after)
	}
	if r := h.Do(t, "POST", "/v1/holds/"+hold+"/settle", key, nil); r.Status != http.StatusOK {
		t.Errorf("settle without a body or a declared type: %d %s", r.Status, r.Body)
	}
}
