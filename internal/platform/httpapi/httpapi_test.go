package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ce(id string) map[string]any {
	return map[string]any{"specversion": "1.0", "id": id, "source": "/tests", "type": "api.call"}
}

// assertProblem checks an RFC 9457 answer.
func assertProblem(t testing.TB, r apptest.Response, status int, kind string) map[string]any {
	t.Helper()
	if r.Status != status {
		t.Errorf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); ct != httpapi.ProblemContentType {
		t.Errorf("content type %q, want %q", ct, httpapi.ProblemContentType)
	}
	p := r.JSON(t)
	if p["status"] != float64(status) || !strings.HasSuffix(fmt.Sprint(p["type"]), ":"+kind) || p["title"] == "" {
		t.Errorf("problem %v, want status %d kind %s", p, status, kind)
	}
	return p
}

func TestAccounts_CreateGetPatch(t *testing.T) {
	h := apptest.New(t)
	created := h.Do(t, "POST", "/v1/accounts", apptest.AdminKey, map[string]any{"id": "acct_1", "plan": "free", "limits": map[string]any{"events": 3, "tokens": nil}})
	if created.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.Status, created.Body)
	}
	body := created.JSON(t)
	key, _ := body["apiKey"].(string)
	limits := body["limits"].(map[string]any)
	if !strings.HasPrefix(key, "fk_") || limits["events"] != float64(3) || limits["tokens"] != nil || body["status"] != "active" {
		t.Errorf("created %v", body)
	}
	if r := h.Do(t, "POST", "/v1/accounts", apptest.AdminKey, map[string]any{"id": "acct_1", "plan": "plus"}); r.Status != http.StatusConflict {
		t.Errorf("duplicate id: %d", r.Status)
	}
	got := h.Do(t, "GET", "/v1/accounts/acct_1", apptest.AdminKey, nil)
	if got.Status != 200 || got.JSON(t)["apiKey"] != nil || got.JSON(t)["plan"] != "free" {
		t.Errorf("get: %d %s", got.Status, got.Body)
	}
	patched := h.Do(t, "PATCH", "/v1/accounts/acct_1", apptest.AdminKey, map[string]any{"plan": "plus", "limits": map[string]any{}})
	if p := patched.JSON(t); patched.Status != 200 || p["plan"] != "plus" || p["limits"].(map[string]any)["events"] != nil {
		t.Errorf("patch: %d %s", patched.Status, patched.Body)
	}
	assertProblem(t, h.Do(t, "GET", "/v1/accounts/acct_none", apptest.AdminKey, nil), 404, "not-found")
	assertProblem(t, h.Do(t, "PATCH", "/v1/accounts/acct_none", apptest.AdminKey, map[string]any{"plan": "free"}), 404, "not-found")

	// The key is stored only as its hash.
	out, err := h.Env.Clients.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(h.Env.Names.Table(resources.TableAPIKeys))})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(out.Items)
	if strings.Contains(string(raw), key) || len(out.Items) != 1 {
		t.Errorf("the API key table holds %d items and the plaintext key: %v", len(out.Items), strings.Contains(string(raw), key))
	}
	// The key works on account routes and not on operator routes, and the operator key is not an account key.
	if r := h.Do(t, "GET", "/v1/usage", key, nil); r.Status != 200 {
		t.Errorf("account key on an account route: %d %s", r.Status, r.Body)
	}
	assertProblem(t, h.Do(t, "GET", "/v1/accounts/acct_1", key, nil), 401, "unauthorized")
	assertProblem(t, h.Do(t, "GET", "/v1/usage", apptest.AdminKey, nil), 401, "unauthorized")
}

func TestAccounts_InvalidInputStoresNothing(t *testing.T) {
	h := apptest.New(t)
	for name, body := range map[string]any{
		"bad id":          map[string]any{"id": "acct 1", "plan": "free"},
		"id with a hash":  map[string]any{"id": "acct#1", "plan": "free"},
		"unknown plan":    map[string]any{"id": "acct_1", "plan": "gold"},
		"unknown status":  map[string]any{"id": "acct_1", "plan": "free", "status": "paused"},
		"unknown feature": map[string]any{"id": "acct_1", "plan": "free", "limits": map[string]any{"seats": 3}},
		"negative limit":  map[string]any{"id": "acct_1", "plan": "free", "limits": map[string]any{"events": -1}},
		"unknown field":   map[string]any{"id": "acct_1", "plan": "free", "colour": "red"},
		"not json":        "{id: acct_1",
		"an array":        "[]",
	} {
		t.Run(name, func(t *testing.T) {
			assertProblem(t, h.Do(t, "POST", "/v1/accounts", apptest.AdminKey, body), 400, "invalid-request")
		})
	}
	assertProblem(t, h.Do(t, "POST", "/v1/accounts", "", map[string]any{"id": "acct_1"}), 401, "unauthorized")
	assertProblem(t, h.Do(t, "POST", "/v1/accounts", "fk_wrong", map[string]any{"id": "acct_1"}), 401, "unauthorized")
	assertProblem(t, h.Do(t, "PATCH", "/v1/accounts/acct_1", apptest.AdminKey, map[string]any{}), 400, "invalid-request")
	out, err := h.Env.Clients.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(h.Env.Names.Table(resources.TableAccounts))})
	if err != nil || len(out.Items) != 0 {
		t.Errorf("invalid requests stored %d accounts (%v)", len(out.Items), err)
	}
}

func TestAccounts_AgreementStartIsFixedByTheFirstUsage(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_a", "free", nil)
	if r := h.Do(t, "PATCH", "/v1/accounts/acct_a", apptest.AdminKey, map[string]any{"agreementStart": 15}); r.Status != 200 || r.JSON(t)["agreementStart"] != float64(15) {
		t.Fatalf("set before usage: %d %s", r.Status, r.Body)
	}
	assertProblem(t, h.Do(t, "PATCH", "/v1/accounts/acct_a", apptest.AdminKey, map[string]any{"agreementStart": 29}), 400, "invalid-request")
	if r := h.Do(t, "POST", "/v1/events", key, ce("evt_1")); r.Status != 202 {
		t.Fatalf("event: %d %s", r.Status, r.Body)
	}
	h.Drain(t, 0)
	assertProblem(t, h.Do(t, "PATCH", "/v1/accounts/acct_a", apptest.AdminKey, map[string]any{"agreementStart": 3}), 409, "agreement-locked")
	if r := h.Do(t, "PATCH", "/v1/accounts/acct_a", apptest.AdminKey, map[string]any{"agreementStart": 15, "plan": "plus"}); r.Status != 200 {
		t.Errorf("restating the same day after usage: %d %s", r.Status, r.Body)
	}
	// The clock is 2026-11-15T12:00Z and the anchor the 15th: the cycle is "2026-11".
	e := h.Do(t, "GET", "/v1/events/evt_1", key, nil).JSON(t)
	if e["cycle"] != "2026-11" {
		t.Errorf("event cycle %v", e["cycle"])
	}
}

func TestIngest_BadInputGetsAProblemAndQueuesNothing(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_i", "free", nil)
	big := ce("evt_big")
	big["data"] = strings.Repeat("x", 70<<10)
	var tooMany []map[string]any
	for i := range 101 {
		tooMany = append(tooMany, ce(fmt.Sprintf("e%d", i)))
	}
	cases := []struct {
		name, method, path, key string
		body                    any
		status                  int
		kind                    string
	}{
		{"malformed JSON", "POST", "/v1/events", key, `{"specversion":"1.0",`, 400, "invalid-request"},
		{"missing id", "POST", "/v1/events", key, map[string]any{"specversion": "1.0", "source": "/s", "type": "t"}, 400, "invalid-request"},
		{"empty id", "POST", "/v1/events", key, map[string]any{"specversion": "1.0", "id": "", "source": "/s", "type": "t"}, 400, "invalid-request"},
		{"missing specversion", "POST", "/v1/events", key, map[string]any{"id": "e", "source": "/s", "type": "t"}, 400, "invalid-request"},
		{"old specversion", "POST", "/v1/events", key, map[string]any{"specversion": "0.3", "id": "e", "source": "/s", "type": "t"}, 400, "invalid-request"},
		{"missing type", "POST", "/v1/events", key, map[string]any{"specversion": "1.0", "id": "e", "source": "/s"}, 400, "invalid-request"},
		{"bad time", "POST", "/v1/events", key, map[string]any{"specversion": "1.0", "id": "e", "source": "/s", "type": "t", "time": "yesterday"}, 400, "invalid-request"},
		{"not an object", "POST", "/v1/events", key, `["a"]`, 400, "invalid-request"},
		{"oversize", "POST", "/v1/events", key, big, 413, "too-large"},
		{"no key", "POST", "/v1/events", "", ce("e"), 401, "unauthorized"},
		{"wrong key", "POST", "/v1/events", "fk_not-a-key", ce("e"), 401, "unauthorized"},
		{"operator key", "POST", "/v1/events", apptest.AdminKey, ce("e"), 401, "unauthorized"},
		{"unknown route", "POST", "/v1/eventz", key, ce("e"), 404, "not-found"},
		{"wrong method", "DELETE", "/v1/events", key, nil, 405, "method-not-allowed"},
		{"batch not an array", "POST", "/v1/events/batch", key, ce("e"), 400, "invalid-request"},
		{"batch empty", "POST", "/v1/events/batch", key, `[]`, 400, "invalid-request"},
		{"batch over 100", "POST", "/v1/events/batch", key, tooMany, 400, "invalid-request"},
		{"batch all invalid", "POST", "/v1/events/batch", key, []any{map[string]any{"id": "x"}, 3}, 400, "invalid-request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assertProblem(t, h.Do(t, tc.method, tc.path, tc.key, tc.body), tc.status, tc.kind)
		})
	}
	r := h.Do(t, "POST", "/v1/events", key, ce("e"), "Content-Type", "text/plain")
	assertProblem(t, r, 415, "unsupported-media-type")
	if n := queued(t, h); n != 0 {
		t.Errorf("bad requests queued %d events", n)
	}
}

func TestIngest_BatchCollapsesDuplicatesAndAnswersPerItem(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_b", "free", nil)
	r := h.Do(t, "POST", "/v1/events/batch", key, []any{ce("a"), ce("b"), ce("a"), map[string]any{"id": "c"}, ce("c")})
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var got struct {
		Results []ingest.ItemResult `json:"results"`
	}
	_ = json.Unmarshal(r.Body, &got)
	want := []string{"a:queued", "b:queued", "a:duplicate", "c:invalid", "c:queued"}
	for i, res := range got.Results {
		if i >= len(want) || res.ID+":"+res.Status != want[i] {
			t.Errorf("result %d = %+v, want %s", i, res, want[i])
		}
	}
	if n := queued(t, h); n != 3 {
		t.Errorf("queued %d events, want 3", n)
	}
}

// A queue that cannot be written answers 503 (with Retry-After) and accepts nothing.
func TestIngest_QueueFailureAnswers503(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_q", "free", nil)
	h.Ingest().Ingest.Queue = &ingest.SQSQueue{Client: h.Env.Clients.SQS, URL: h.Env.Names.QueueURL(resources.QueueEvents) + "-missing"}
	p := assertProblem(t, h.Do(t, "POST", "/v1/events", key, ce("e1")), 503, "unavailable")
	if !strings.Contains(fmt.Sprint(p["detail"]), "not accepted") {
		t.Errorf("detail %v", p["detail"])
	}
	r := h.Do(t, "POST", "/v1/events/batch", key, []any{ce("e1"), ce("e2")})
	assertProblem(t, r, 503, "unavailable")
	if r.Header.Get("Retry-After") == "" {
		t.Error("a 503 without Retry-After")
	}
	if got := h.Counter.Get(metrics.EventsQueued); got != 0 {
		t.Errorf("EventsQueued = %d", got)
	}
}

// The gate answers 402 for a free account known to be at its limit, lets a retry of an already
// accepted event through, and fails open when it cannot read the meter.
func TestIngest_AdvisoryGate(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_g", "free", map[string]any{"events": 2})
	for _, id := range []string{"e1", "e2"} {
		if r := h.Do(t, "POST", "/v1/events", key, ce(id)); r.Status != 202 {
			t.Fatalf("%s: %d", id, r.Status)
		}
	}
	h.Drain(t, 0)
	p := assertProblem(t, h.Do(t, "POST", "/v1/events", key, ce("e3")), 402, "limit-reached")
	if p["remaining"] != float64(0) {
		t.Errorf("402 without remaining: %v", p)
	}
	assertProblem(t, h.Do(t, "POST", "/v1/events/batch", key, []any{ce("e1"), ce("e3")}), 402, "limit-reached")
	// A retry of an accepted event is not new work: it passes, and the worker acks it.
	if r := h.Do(t, "POST", "/v1/events", key, ce("e1")); r.Status != 202 {
		t.Errorf("retry of an accepted event: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, "POST", "/v1/events/batch", key, []any{ce("e1"), ce("e2")}); r.Status != 202 {
		t.Errorf("retry of an accepted batch: %d %s", r.Status, r.Body)
	}
	// The meter cannot be read: the gate fails open and the worker decides.
	h.Ingest().Ingest.Usage = usage.Table{DB: h.Env.Clients.DynamoDB, Name: "missing-table"}
	if r := h.Do(t, "POST", "/v1/events", key, ce("e4")); r.Status != 202 {
		t.Errorf("gate did not fail open: %d %s", r.Status, r.Body)
	}
	if got := h.Counter.Get(metrics.GateFailedOpen); got != 1 {
		t.Errorf("GateFailedOpen = %d", got)
	}
	h.Drain(t, 0)
	if e := h.Do(t, "GET", "/v1/events/e4", key, nil).JSON(t); e["status"] != "REJECTED" {
		t.Errorf("e4 past the limit: %v", e)
	}
	if u := h.Do(t, "GET", "/v1/usage", key, nil).JSON(t); u["used"] != float64(2) {
		t.Errorf("usage %v", u)
	}
}

func TestEventsAndUsage_ReadBack(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_r", "plus", nil)
	other := h.CreateAccount(t, "acct_other", "free", nil)
	for _, id := range []string{"evt/with/slashes", "evt 2", "evt_3"} {
		if r := h.Do(t, "POST", "/v1/events", key, ce(id)); r.Status != 202 {
			t.Fatalf("%s: %d %s", id, r.Status, r.Body)
		}
	}
	h.Drain(t, 0)
	got := h.Do(t, "GET", "/v1/events/"+url.PathEscape("evt/with/slashes"), key, nil)
	if got.Status != 200 || got.JSON(t)["status"] != "INSERTED" || got.JSON(t)["id"] != "evt/with/slashes" {
		t.Errorf("event with slashes: %d %s", got.Status, got.Body)
	}
	// Another account's event is not found, not forbidden: its existence does not leak.
	assertProblem(t, h.Do(t, "GET", "/v1/events/evt_3", other, nil), 404, "not-found")
	assertProblem(t, h.Do(t, "GET", "/v1/events/never-sent", key, nil), 404, "not-found")

	u := h.Do(t, "GET", "/v1/usage?feature=events", key, nil).JSON(t)
	if u["used"] != float64(3) || u["limit"] != nil || u["remaining"] != nil || u["cycle"] != "2026-11" {
		t.Errorf("plus usage %v", u)
	}
	if u := h.Do(t, "GET", "/v1/usage?feature=events&cycle=2026-10", key, nil).JSON(t); u["used"] != float64(0) {
		t.Errorf("previous cycle %v", u)
	}
	assertProblem(t, h.Do(t, "GET", "/v1/usage?feature=seats", key, nil), 400, "invalid-request")
	assertProblem(t, h.Do(t, "GET", "/v1/usage?cycle=2026-13", key, nil), 400, "invalid-request")
	// A parameter sent empty or twice is refused, never read as the default or as one of its values.
	for _, q := range []string{"cycle=", "feature=", "cycle=2026-10&cycle=2026-11", "feature=events&feature=tokens"} {
		assertProblem(t, h.Do(t, "GET", "/v1/usage?"+q, key, nil), 400, "invalid-request")
	}
}

// Every route the functions serve is in the route table (what the CDK app deploys), and every
// route of the table is served.
func TestRoutes_EveryDeclaredRouteIsServedAndNoOther(t *testing.T) {
	h := apptest.New(t)
	registered := map[string]bool{}
	for _, k := range h.Served() {
		registered[k] = true
	}
	for _, r := range resources.Routes {
		if !registered[r.Method+" "+r.Path] {
			t.Errorf("declared route %s %s has no handler", r.Method, r.Path)
		}
		delete(registered, r.Method+" "+r.Path)
	}
	for k := range registered {
		t.Errorf("handler %s is not in the route table", k)
	}
}
