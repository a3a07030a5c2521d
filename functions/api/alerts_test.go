package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apifn "github.com/ferrymeter/ferry/functions/api"
	"github.com/ferrymeter/ferry/internal/alerts/drain"
	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/openapicheck"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// envAllowLoopback is the setting ferry dev gives the functions (see alerts.go).
const envAllowLoopback = "FERRY_ALERTS_ALLOW_LOOPBACK"

// fakeLog stands in for package drain's Store, the delivery log, on the two routes that read
// and replay through it; everything else runs on the emulator.
type fakeLog struct {
	deliveries []notify.Delivery
	next       string
	replayErr  error
	// calls records each call: "log <endpoint> <cursor> <limit>", "replay <endpoint> <notification> <nowMs>".
	calls []string
}

func (f *fakeLog) Log(_ context.Context, endpointID, cursor string, limit int) ([]notify.Delivery, string, error) {
	f.calls = append(f.calls, fmt.Sprintf("log %s %q %d", endpointID, cursor, limit))
	if cursor == "bad" {
		return nil, "", errBadCursor
	}
	return f.deliveries, f.next, nil
}

func (f *fakeLog) Replay(_ context.Context, endpointID, notificationID string, nowMs int64) (notify.Delivery, error) {
	f.calls = append(f.calls, fmt.Sprintf("replay %s %s %d", endpointID, notificationID, nowMs))
	if f.replayErr != nil {
		return notify.Delivery{}, f.replayErr
	}
	d := f.deliveries[0]
	d.Status, d.Attempts, d.Replays, d.NextAttemptAtMs = notify.DeliveryPending, 0, d.Replays+1, nowMs
	return d, nil
}

// harness is the api function alone on fresh tables, with the document's validator, and the
// delivery log replaced by log when it is not nil.
type harness struct {
	*apptest.Harness
	v   *openapicheck.Validator
	log *fakeLog
}

func newHarness(t *testing.T, settings compose.Settings) *harness {
	t.Helper()
	defs := compose.NewDefinitions([]compose.Builder{apifn.Builder})
	api, _ := defs.Function(resources.FunctionAPI)
	defs.Functions = []resources.Function{api}
	defs.Routes = resources.RoutesOf(defs.Routes, resources.FunctionAPI)
	h := &harness{log: &fakeLog{}}
	h.Harness = apptest.New(t, apptest.Options{Definitions: &defs, Settings: settings, Configure: func(a *apptest.Harness) {
		a.API().Endpoints.Deliveries = h.log
	}})
	h.v = openapicheck.New(t, h.Server.URL)
	return h
}

// do sends a request as the operator, checks it and its answer against the document, and
// returns the answer. A request that breaks the document on purpose is sent with invalid set.
func (h *harness) do(t *testing.T, method, path string, body any, invalid bool, headers ...string) apptest.Response {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	header := http.Header{}
	header.Set("Authorization", "Bearer "+apptest.AdminKey)
	if raw != nil {
		header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		header.Set(headers[i], headers[i+1])
	}
	judge := openapicheck.Conforming
	if invalid {
		judge = openapicheck.Breaking
	}
	return h.v.Do(t, h.Server.Client(), method, h.Server.URL+path, header, raw, judge)
}

func (h *harness) create(t *testing.T, body any) (map[string]any, string) {
	t.Helper()
	r := h.do(t, "POST", "/v1/webhook-endpoints", body, false)
	if r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	m := r.JSON(t)
	return m, m["secret"].(string)
}

// The first secret is in the 201 alone: every read shows when each secret was made and when it
// stops signing, never a value.
func TestWebhookEndpoints_TheSecretIsShownOnce(t *testing.T) {
	h := newHarness(t, nil)
	r := h.do(t, "POST", "/v1/webhook-endpoints", map[string]any{
		"url": "https://hooks.example.com/ferry", "kinds": []string{"threshold.crossed"}, "accounts": []string{"acct_1"}, "description": "billing",
	}, false)
	if r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	created := r.JSON(t)
	id, secret := created["id"].(string), created["secret"].(string)
	if !endpoints.ValidID(id) || !strings.HasPrefix(secret, "whsec_") || r.Header.Get("Location") != "/v1/webhook-endpoints/"+id ||
		r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("created %s with headers %v", r.Body, r.Header)
	}
	if created["url"] != "https://hooks.example.com/ferry" || created["description"] != "billing" || created["disabled"] != false {
		t.Errorf("created %s", r.Body)
	}
	one := h.do(t, "GET", "/v1/webhook-endpoints/"+id, nil, false)
	all := h.do(t, "GET", "/v1/webhook-endpoints", nil, false)
	for _, read := range []apptest.Response{one, all} {
		if read.Status != http.StatusOK || bytes.Contains(read.Body, []byte(secret)) || bytes.Contains(read.Body, []byte(`"secret"`)) ||
			bytes.Contains(read.Body, []byte("whsec_")) {
			t.Errorf("a read shows a secret: %d %s", read.Status, read.Body)
		}
	}
	got := one.JSON(t)
	secrets := got["secrets"].([]any)
	if len(secrets) != 1 || secrets[0].(map[string]any)["expiresAt"] != nil || secrets[0].(map[string]any)["createdAt"] != got["createdAt"] {
		t.Errorf("secrets %v", secrets)
	}
	if items := all.JSON(t)["items"].([]any); len(items) != 1 || items[0].(map[string]any)["id"] != id {
		t.Errorf("list %s", all.Body)
	}
	// Every kind, every account: shown as empty lists, description null. (Listed second: the
	// list is oldest first.)
	h.Clock.Advance(time.Millisecond)
	_, _ = h.create(t, map[string]any{"url": "https://hooks.example.com/all"})
	list := h.do(t, "GET", "/v1/webhook-endpoints", nil, false).JSON(t)["items"].([]any)
	if second := list[1].(map[string]any); len(second["kinds"].([]any)) != 0 || len(second["accounts"].([]any)) != 0 || second["description"] != nil {
		t.Errorf("an endpoint for everything: %v", second)
	}
}

// A refused registration is one 400 naming every problem, and nothing is stored.
func TestWebhookEndpoints_ARefusedRegistrationNamesEveryProblem_AndStoresNothing(t *testing.T) {
	h := newHarness(t, nil)
	r := h.do(t, "POST", "/v1/webhook-endpoints", map[string]any{
		"url": "http://10.0.0.1/hook", "kinds": []string{"invoice.paid", "limit.reached", "limit.reached"}, "accounts": []string{"not#an id"},
	}, true)
	p := problemOf(t, r, http.StatusBadRequest, "invalid-request")
	errs, _ := p["errors"].([]any)
	var got []string
	for _, e := range errs {
		got = append(got, e.(string))
	}
	for _, want := range []string{`url uses scheme "http"`, `url has host 10.0.0.1`, `kinds[0] "invoice.paid"`, `kinds[2] repeats "limit.reached"`, `accounts[0] "not#an id"`} {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no problem says %q: %q", want, got)
		}
	}
	// The strict decoder's refusals.
	for _, body := range []string{
		`{}`, `{"url":"https://h.example.com","kinds":null}`, `{"url":"https://h.example.com","secret":"whsec_mine"}`,
		`{"url":"https://h.example.com","description":""}`,
	} {
		problemOf(t, h.do(t, "POST", "/v1/webhook-endpoints", body, true), http.StatusBadRequest, "invalid-request")
	}
	if list := h.do(t, "GET", "/v1/webhook-endpoints", nil, false); !bytes.Contains(list.Body, []byte(`"items":[]`)) {
		t.Errorf("stored after refusals: %s", list.Body)
	}
}

// Loopback http is refused in a deployed stack and taken under ferry dev (its setting).
func TestWebhookEndpoints_LoopbackHTTP_OnlyUnderFerryDev(t *testing.T) {
	body := map[string]any{"url": "http://127.0.0.1:9000/hook"}
	deployed := newHarness(t, nil)
	p := problemOf(t, deployed.do(t, "POST", "/v1/webhook-endpoints", body, true), http.StatusBadRequest, "invalid-request")
	if !strings.Contains(p["detail"].(string), "only `ferry dev` allows") {
		t.Errorf("detail %q", p["detail"])
	}
	dev := newHarness(t, compose.Settings{envAllowLoopback: "true"})
	// The document states the https pattern; loopback http is the dev stack's own extension.
	if r := dev.do(t, "POST", "/v1/webhook-endpoints", body, true); r.Status != http.StatusCreated {
		t.Errorf("under ferry dev: %d %s", r.Status, r.Body)
	}
}

// A setting that is not true or false stops the function at start, naming it.
func TestWebhookEndpoints_ABadLoopbackSetting_FailsTheBuild(t *testing.T) {
	env := testenv.New(t)
	defs := compose.NewDefinitions([]compose.Builder{apifn.Builder})
	_, err := defs.Build(resources.FunctionAPI, compose.Env{
		Names: env.Names, Clients: env.Clients, Config: compose.Config{OperatorKey: "k", Catalog: compose.DefaultConfig().Catalog},
		Settings: compose.Settings{envAllowLoopback: "yes please"}, Now: time.Now,
	})
	if err == nil || !strings.Contains(err.Error(), envAllowLoopback) {
		t.Errorf("built with a bad setting: %v", err)
	}
}

// A rotation shows the new secret once and when the old one stops; reads show both secrets
// until then, and one after.
func TestWebhookEndpoints_RotationOverlapsADay(t *testing.T) {
	h := newHarness(t, nil)
	created, first := h.create(t, map[string]any{"url": "https://hooks.example.com"})
	id := created["id"].(string)
	h.Clock.Advance(time.Hour)
	r := h.do(t, "POST", "/v1/webhook-endpoints/"+id+"/rotate-secret", nil, false, "Idempotency-Key", "rotate-1")
	if r.Status != http.StatusOK {
		t.Fatalf("rotate: %d %s", r.Status, r.Body)
	}
	rotated := r.JSON(t)
	second, _ := rotated["secret"].(string)
	wantEnd := h.Clock.Now().Add(endpoints.RotationOverlap).UTC().Format("2006-01-02T15:04:05.000Z")
	if second == first || !strings.HasPrefix(second, "whsec_") || rotated["previousSecretExpiresAt"] != wantEnd || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("rotated %s", r.Body)
	}
	// A retry of the same request is the same rotation, not another one.
	if again := h.do(t, "POST", "/v1/webhook-endpoints/"+id+"/rotate-secret", nil, false, "Idempotency-Key", "rotate-1"); !bytes.Equal(again.Body, r.Body) ||
		again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the retry: %s", again.Body)
	}
	secretsAt := func() []any {
		read := h.do(t, "GET", "/v1/webhook-endpoints/"+id, nil, false)
		if bytes.Contains(read.Body, []byte("whsec_")) {
			t.Fatalf("a read shows a secret: %s", read.Body)
		}
		return read.JSON(t)["secrets"].([]any)
	}
	if s := secretsAt(); len(s) != 2 || s[0].(map[string]any)["expiresAt"] != nil || s[1].(map[string]any)["expiresAt"] != wantEnd {
		t.Errorf("during the overlap: %v", s)
	}
	h.Clock.Advance(endpoints.RotationOverlap)
	if s := secretsAt(); len(s) != 1 {
		t.Errorf("after the overlap: %v", s)
	}
	problemOf(t, h.do(t, "POST", "/v1/webhook-endpoints/we_"+strings.Repeat("a", 26)+"/rotate-secret", nil, false), http.StatusNotFound, "not-found")
	problemOf(t, h.do(t, "POST", "/v1/webhook-endpoints/"+id+"/rotate-secret", `{"secret":"x"}`, true), http.StatusBadRequest, "invalid-request")
}

// A change sets what it names and nothing else; a refused one changes nothing.
func TestWebhookEndpoints_Update(t *testing.T) {
	h := newHarness(t, nil)
	created, _ := h.create(t, map[string]any{"url": "https://hooks.example.com", "description": "old"})
	path := "/v1/webhook-endpoints/" + created["id"].(string)
	h.Clock.Advance(time.Minute)
	r := h.do(t, "PATCH", path, map[string]any{"kinds": []string{"limit.reached"}, "disabled": true, "description": ""}, false)
	if r.Status != http.StatusOK {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	got := r.JSON(t)
	if got["url"] != "https://hooks.example.com" || got["disabled"] != true || got["description"] != nil ||
		fmt.Sprint(got["kinds"]) != "[limit.reached]" || got["updatedAt"] == got["createdAt"] || len(got["secrets"].([]any)) != 1 {
		t.Errorf("after the change: %s", r.Body)
	}
	before := h.do(t, "GET", path, nil, false).Body
	for _, c := range []struct {
		body   string
		status int
		kind   string
	}{
		{`{}`, 400, "invalid-request"},
		{`{"url":"https://192.168.1.1/x","accounts":["a","a"]}`, 400, "invalid-request"},
		{`{"url":null}`, 400, "invalid-request"},
		{`{"secrets":[]}`, 400, "invalid-request"},
	} {
		problemOf(t, h.do(t, "PATCH", path, c.body, true), c.status, c.kind)
	}
	if after := h.do(t, "GET", path, nil, false).Body; !bytes.Equal(after, before) {
		t.Errorf("a refused change changed the endpoint:\n%s\n%s", before, after)
	}
	problemOf(t, h.do(t, "PATCH", "/v1/webhook-endpoints/we_"+strings.Repeat("c", 26), `{"disabled":false}`, false), http.StatusNotFound, "not-found")
}

// Deleting is 204 once, then 404; reads of a deleted endpoint are 404.
func TestWebhookEndpoints_Delete(t *testing.T) {
	h := newHarness(t, nil)
	created, _ := h.create(t, map[string]any{"url": "https://hooks.example.com"})
	path := "/v1/webhook-endpoints/" + created["id"].(string)
	if r := h.do(t, "DELETE", path, nil, false); r.Status != http.StatusNoContent || len(r.Body) != 0 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	problemOf(t, h.do(t, "DELETE", path, nil, false), http.StatusNotFound, "not-found")
	problemOf(t, h.do(t, "GET", path, nil, false), http.StatusNotFound, "not-found")
	problemOf(t, h.do(t, "GET", "/v1/webhook-endpoints/nothing-like-an-id", nil, true), http.StatusNotFound, "not-found")
}

// The routes are the operator's: an account's key, or none, is a 401.
func TestWebhookEndpoints_OnlyTheOperator(t *testing.T) {
	h := newHarness(t, nil)
	key := h.CreateAccount(t, "acct_1", "free", nil)
	for _, r := range resources.RoutesOf(resources.Routes, resources.FunctionAPI) {
		if !strings.HasPrefix(r.Path, "/v1/webhook-endpoints") {
			continue
		}
		path := strings.NewReplacer("{id}", "we_"+strings.Repeat("a", 26), "{notification}", "ntf_x").Replace(r.Path)
		for _, bearer := range []string{key, ""} {
			if got := h.Do(t, r.Method, path, bearer, nil); got.Status != http.StatusUnauthorized {
				t.Errorf("%s with key %q: %d", r.Key(), bearer, got.Status)
			}
		}
	}
}

// A keyed registration retried is the same registration: one endpoint, the same secret.
func TestWebhookEndpoints_ARetriedRegistrationRegistersOnce(t *testing.T) {
	h := newHarness(t, nil)
	body := map[string]any{"url": "https://hooks.example.com"}
	first := h.do(t, "POST", "/v1/webhook-endpoints", body, false, "Idempotency-Key", "reg-1")
	again := h.do(t, "POST", "/v1/webhook-endpoints", body, false, "Idempotency-Key", "reg-1")
	if first.Status != http.StatusCreated || !bytes.Equal(first.Body, again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s, again %d %s", first.Status, first.Body, again.Status, again.Body)
	}
	if items := h.do(t, "GET", "/v1/webhook-endpoints", nil, false).JSON(t)["items"].([]any); len(items) != 1 {
		t.Errorf("%d endpoints", len(items))
	}
}

// The delivery log and replays go through the delivery log's store (a fake here), for a known
// endpoint only; the store's own errors answer as their kinds say.
func TestWebhookEndpoints_DeliveryLogAndReplay(t *testing.T) {
	h := newHarness(t, nil)
	created, _ := h.create(t, map[string]any{"url": "https://hooks.example.com"})
	id := created["id"].(string)
	at := h.Clock.Now().UnixMilli()
	ntf := notify.IDOf("k")
	h.log.deliveries = []notify.Delivery{{
		Notification: ntf, Endpoint: id, Kind: notify.ThresholdCrossed, Account: "acct_1", Status: notify.DeliveryDead, Attempts: 8,
		LastStatus: 503, LastAnswer: "busy", LastError: "endpoint did not accept the message", CreatedAtMs: at, UpdatedAtMs: at + 1000,
	}}
	h.log.next = "cursor-2"
	r := h.do(t, "GET", "/v1/webhook-endpoints/"+id+"/deliveries?limit=5&cursor=cursor-1", nil, false)
	if r.Status != http.StatusOK {
		t.Fatalf("log: %d %s", r.Status, r.Body)
	}
	page := r.JSON(t)
	items := page["items"].([]any)
	first := items[0].(map[string]any)
	if page["next"] != "cursor-2" || len(items) != 1 || first["notification"] != ntf || first["status"] != "DEAD" || first["lastStatus"] != 503.0 ||
		first["createdAt"] != httpTime(at) || first["updatedAt"] != httpTime(at+1000) || first["replays"] != 0.0 {
		t.Errorf("log page %s", r.Body)
	}
	if r := h.do(t, "GET", "/v1/webhook-endpoints/"+id+"/deliveries", nil, false); r.Status != http.StatusOK {
		t.Errorf("first page: %d", r.Status)
	}
	problemOf(t, h.do(t, "GET", "/v1/webhook-endpoints/"+id+"/deliveries?limit=101", nil, true), http.StatusBadRequest, "invalid-request")
	problemOf(t, h.do(t, "GET", "/v1/webhook-endpoints/"+id+"/deliveries?cursor=bad", nil, false), http.StatusBadRequest, "invalid-request")
	// An unknown parameter is refused by the handler; OpenAPI has no way to forbid it.
	problemOf(t, h.do(t, "GET", "/v1/webhook-endpoints/"+id+"/deliveries?page=2", nil, false), http.StatusBadRequest, "invalid-request")

	r = h.do(t, "POST", "/v1/webhook-endpoints/"+id+"/deliveries/"+ntf+"/replay", nil, false, "Idempotency-Key", "replay-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	if d := r.JSON(t); d["status"] != "PENDING" || d["replays"] != 1.0 || d["nextAttemptAt"] != httpTime(h.Clock.Now().UnixMilli()) {
		t.Errorf("replayed %s", r.Body)
	}
	h.log.replayErr = drain.ErrInFlight
	problemOf(t, h.do(t, "POST", "/v1/webhook-endpoints/"+id+"/deliveries/"+ntf+"/replay", nil, false), http.StatusConflict, "conflict")
	h.log.replayErr = drain.ErrNoDelivery
	problemOf(t, h.do(t, "POST", "/v1/webhook-endpoints/"+id+"/deliveries/ntf_none/replay", `{}`, true), http.StatusNotFound, "not-found")

	// An unknown endpoint never reaches the log.
	calls := len(h.log.calls)
	unknown := "/v1/webhook-endpoints/we_" + strings.Repeat("z", 26)
	problemOf(t, h.do(t, "GET", unknown+"/deliveries", nil, false), http.StatusNotFound, "not-found")
	problemOf(t, h.do(t, "POST", unknown+"/deliveries/"+ntf+"/replay", nil, false), http.StatusNotFound, "not-found")
	if len(h.log.calls) != calls {
		t.Errorf("the log was asked about an unknown endpoint: %v", h.log.calls[calls:])
	}
	want := []string{
		fmt.Sprintf("log %s %q 5", id, "cursor-1"), fmt.Sprintf("log %s %q 0", id, ""), fmt.Sprintf("log %s %q 0", id, "bad"),
		fmt.Sprintf("replay %s %s %d", id, ntf, h.Clock.Now().UnixMilli()),
		fmt.Sprintf("replay %s %s %d", id, ntf, h.Clock.Now().UnixMilli()), fmt.Sprintf("replay %s ntf_none %d", id, h.Clock.Now().UnixMilli()),
	}
	if !slices.Equal(h.log.calls, want) {
		t.Errorf("calls\n%q\nwant\n%q", h.log.calls, want)
	}
}

// Without a delivery log wired, the log is empty and there is nothing to replay.
func TestWebhookEndpoints_ANewEndpoint_HasAnEmptyLogAndNothingToReplay(t *testing.T) {
	defs := compose.NewDefinitions([]compose.Builder{apifn.Builder})
	api, _ := defs.Function(resources.FunctionAPI)
	defs.Functions, defs.Routes = []resources.Function{api}, resources.RoutesOf(defs.Routes, resources.FunctionAPI)
	h := apptest.New(t, apptest.Options{Definitions: &defs})
	created := h.Do(t, "POST", "/v1/webhook-endpoints", apptest.AdminKey, map[string]any{"url": "https://hooks.example.com"}).JSON(t)
	path := "/v1/webhook-endpoints/" + created["id"].(string)
	if r := h.Do(t, "GET", path+"/deliveries", apptest.AdminKey, nil); r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte(`"items":[]`)) {
		t.Errorf("log: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, "POST", path+"/deliveries/"+notify.IDOf("k")+"/replay", apptest.AdminKey, nil); r.Status != http.StatusNotFound {
		t.Errorf("replay: %d %s", r.Status, r.Body)
	}
}

func httpTime(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }

// problemOf checks that an answer is the problem document of a kind and returns it.
func problemOf(t *testing.T, r apptest.Response, status int, kind string) map[string]any {
	t.Helper()
	if r.Status != status || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %s %s; want %d %s", r.Status, r.Header.Get("Content-Type"), r.Body, status, kind)
	}
	p := r.JSON(t)
	if p["type"] != "tag:ferrymeter.dev,2026:problem:"+kind {
		t.Fatalf("problem %v, want %s", p["type"], kind)
	}
	return p
}

// errBadCursor is how the fake refuses a cursor it never handed out: as input, as drain does.
var errBadCursor = problem.Input("cursor is not one this list handed out")
