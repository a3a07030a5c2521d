// Package apptest builds every Ferry function on fresh test resources (testenv) with an injected
// clock — each from its builder and its entry in resources.Functions, with clients that refuse
// what its IAM grant refuses — and wires them by kind behind the same local API Gateway and event
// sources ferry dev uses, so tests drive real handlers with real Lambda events over the real
// emulators.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/functions"
	webhooksfn "github.com/ferrymeter/ferry/functions/webhooks"
	workerfn "github.com/ferrymeter/ferry/functions/worker"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/fnparts"
	signer "github.com/ferrymeter/ferry/internal/devkit/kindesigner"
	"github.com/ferrymeter/ferry/internal/devkit/testclock"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	webhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// AdminKey is the operator key of every harness.
const AdminKey = "test-admin-key"

// Options adjust a harness.
type Options struct {
	// Start is the clock's start (default 2026-11-15T12:00:00Z).
	Start time.Time
	// DynamoDB options for every function's client (fault injection, request counting).
	DynamoDB []func(*dynamodb.Options)
	Catalog  *plans.Catalog
	// Schema replaces the worker's analytics schema (a stricter one makes poison rows).
	Schema *analytics.Schema
	// Definitions replace functions.Definitions: a capability's resources, function, routes
	// and builder, provisioned and wired like Ferry's own.
	Definitions *compose.Definitions
	// Configure runs after every function is composed and before any is served: tests swap a
	// service or add middleware here.
	Configure func(h *Harness)
	// Settings are the deployment settings the functions read: the providers usage is reported
	// to (StandIns.Settings), where admissions and GET /v1/usage read limits (the plans when
	// unset).
	Settings compose.Settings
}

// Harness is one test's Ferry: every function composed by its builder from its entry, with its
// own clients, and wired by its kind — HTTP functions behind the local API Gateway, consumers
// behind their queues' event sources (Drain runs them). Scheduled functions are run by the test
// (Fn(name).Run).
type Harness struct {
	// Of reaches each function's parts: h.Worker().Worker, h.API().Accounts.
	fnparts.Of
	Env         *testenv.Env
	Definitions compose.Definitions
	Functions   []*compose.Function
	Clock       *testclock.Clock
	Counter     *metrics.Counter
	Server      *httptest.Server
	// Sources are the consumers' event sources; Source is the first (the worker's).
	Sources []*devstack.EventSource
	Source  *devstack.EventSource
	// Log is the logger every function writes to.
	Log *slog.Logger

	config   compose.Config
	settings compose.Settings
	opts     Options
	kinde    *kindeSigner
}

// kindeSigner is a harness's Kinde signer, started on first use and kept across restarts.
type kindeSigner struct {
	once sync.Once
	s    *signer.Signer
	url  string
}

// StripeSecret is the Stripe signing secret every harness verifies Stripe deliveries with.
const StripeSecret = "whsec_ferry_test_secret"

// New builds a harness on fresh resources.
func New(t testing.TB, opts ...Options) *Harness {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Start.IsZero() {
		o.Start = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	}
	defs := functions.Definitions()
	if o.Definitions != nil {
		defs = *o.Definitions
	}
	env := testenv.New(t, testenv.Options{DynamoDB: o.DynamoDB, Tables: defs.Tables, Queues: defs.Queues, Buckets: defs.Buckets})
	cfg := compose.DefaultConfig()
	cfg.OperatorKey = AdminKey
	if o.Catalog != nil {
		cfg.Catalog = *o.Catalog
	}
	settings := compose.Settings{
		resources.EnvStripeWebhookSecret: StripeSecret,
	}.With(o.Settings)
	h := &Harness{
		Env: env, Definitions: defs, Clock: testclock.New(o.Start), Counter: metrics.NewCounter(), Log: Logger(t),
		config: cfg, settings: settings, opts: o, kinde: &kindeSigner{},
	}
	h.Of = h.Fn
	h.serve(t)
	return h
}

// Restart composes every function again from scratch on the same resources and serves them
// anew: a new process, with nothing in memory from the old one.
func (h *Harness) Restart(t testing.TB) *Harness {
	t.Helper()
	next := &Harness{
		Env: h.Env, Definitions: h.Definitions, Clock: h.Clock, Counter: metrics.NewCounter(), Log: h.Log,
		config: h.config, settings: h.settings, opts: h.opts, kinde: h.kinde,
	}
	next.Of = next.Fn
	next.serve(t)
	return next
}

// serve composes the functions, lets the test configure them, and wires them by kind.
func (h *Harness) serve(t testing.TB) {
	t.Helper()
	fns, err := h.Definitions.BuildAll(compose.Env{
		Names: h.Env.Names, ClientsFor: func(fn resources.Function) (cloud.Clients, error) { return h.Env.ClientsFor(t, fn), nil },
		Config: h.config, Settings: h.settings, Log: h.Log, Metrics: h.Counter, Now: h.Clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.Functions = fns
	for _, fn := range fns {
		if fn.Close != nil {
			t.Cleanup(fn.Close)
		}
		if w := workerfn.PartsOf(fn); w != nil && h.opts.Schema != nil {
			w.Worker.Schema = *h.opts.Schema
		}
	}
	if h.opts.Configure != nil {
		h.opts.Configure(h)
	}
	wiring, err := devstack.Wire(context.Background(), h.Definitions.Routes, fns, h.Env.Names, h.Env.Clients.SQS, h.Log)
	if err != nil {
		t.Fatal(err)
	}
	// The gateway's server answers what net/http refuses on its own with problem documents, as
	// ferry dev's does.
	h.Server = httptest.NewUnstartedServer(wiring.Gateway)
	h.Server.Listener = devstack.ProblemListener(h.Server.Listener)
	h.Server.Start()
	t.Cleanup(h.Server.Close)
	h.Sources = wiring.Sources
	if len(h.Sources) > 0 {
		h.Source = h.Sources[0]
	}
}

// Signer is the harness's Kinde webhook signer: a stand-in whose JWKS (on a loopback test
// server) the webhooks function verifies Kinde deliveries against. It starts on first use; the
// function's configuration is the one it would read from FERRY_KINDE_WEBHOOK_JWKS_URL.
func (h *Harness) Signer(t testing.TB) *signer.Signer {
	t.Helper()
	h.kinde.once.Do(func() {
		s, err := signer.New()
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		h.kinde.s, h.kinde.url = s, srv.URL+signer.JWKSPath
	})
	if h.kinde.s == nil {
		t.Fatal("the Kinde signer did not start")
	}
	h.settings = h.settings.With(compose.Settings{resources.EnvKindeWebhookJWKSURL: h.kinde.url})
	for _, fn := range h.Functions {
		if p := webhooksfn.PartsOf(fn); p != nil {
			p.Receiver.SetKindeJWKSURL(h.kinde.url)
		}
	}
	return h.kinde.s
}

// Fn returns the harness's composed function of that name; a name no entry has fails the test
// binary at once (a typo in a test, never a condition under test).
func (h *Harness) Fn(name string) *compose.Function {
	for _, fn := range h.Functions {
		if fn.Entry.Name == name {
			return fn
		}
	}
	panic(fmt.Sprintf("apptest: no function %q", name))
}

// Served returns the keys of every route the harness serves ("POST /v1/holds").
func (h *Harness) Served() []string {
	var keys []string
	for _, fn := range h.Functions {
		if fn.HTTP == nil {
			continue
		}
		for _, r := range fn.HTTP.Routes() {
			keys = append(keys, r.Key())
		}
	}
	sort.Strings(keys)
	return keys
}

// Logger writes the app's logs to the test log when FERRY_TEST_LOGS is set, and discards them
// otherwise (they are JSON lines, useful when a test fails).
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("FERRY_TEST_LOGS") == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewJSONHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Response is an HTTP answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
	return m
}

// Do sends a request through the gateway. body may be nil, a string, []byte or a value to encode
// as JSON. key goes in Authorization: Bearer; headers are pairs.
func (h *Harness) Do(t testing.TB, method, path, key string, body any, headers ...string) Response {
	t.Helper()
	var reader io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		reader = strings.NewReader(b)
	case []byte:
		reader = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, h.Server.URL+path, reader)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return Send(t, h.Server.Client(), req)
}

// Send sends req with client and reads the whole answer; a request that gets no answer fails the
// test.
func Send(t testing.TB, client *http.Client, req *http.Request) Response {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// CreateAccount creates an account through the operator route and returns its API key. limits
// may be nil (plan defaults).
func (h *Harness) CreateAccount(t testing.TB, id, plan string, limits map[string]any) string {
	t.Helper()
	body := map[string]any{"id": id, "plan": plan}
	if limits != nil {
		body["limits"] = limits
	}
	resp := h.Do(t, http.MethodPost, "/v1/accounts", AdminKey, body)
	if resp.Status != http.StatusCreated {
		t.Fatalf("create account %s: %d %s", id, resp.Status, resp.Body)
	}
	return resp.JSON(t)["apiKey"].(string)
}

// Drain runs every consumer's event source until its queue has nothing visible for one long
// poll. Messages that fail come back after the queue's visibility timeout (2 s in tests), so a
// drain that must see redeliveries waits at least that long (wait).
func (h *Harness) Drain(t testing.TB, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		received := 0
		for _, source := range h.Sources {
			n, err := source.PollOnce(context.Background(), 1)
			if err != nil {
				t.Fatalf("poll: %v", err)
			}
			received += n
		}
		if received == 0 && time.Now().After(deadline) {
			return
		}
	}
}

// Webhook is a real-shaped delivery of the fixture testdata/webhooks/<provider>/<name>.json to
// the provider's route, signed now as the provider signs it (a Kinde token from the harness's
// signer, with its timestamp moved to the harness's now; a Stripe body under StripeSecret, at the
// wall clock's now, which stripe-go's verification reads). It returns the
// route's path, the body and the headers (pairs, for Do).
func (h *Harness) Webhook(t testing.TB, provider, name string) (string, []byte, []string) {
	t.Helper()
	raw := Fixture(t, "webhooks/"+provider+"/"+name+".json")
	now := h.Clock.Now()
	switch provider {
	case "kinde":
		var claims map[string]any
		if err := json.Unmarshal(raw, &claims); err != nil {
			t.Fatalf("fixture %s: %v", name, err)
		}
		claims["timestamp"] = now.Format(time.RFC3339Nano)
		token, err := h.Signer(t).Sign(claims)
		if err != nil {
			t.Fatal(err)
		}
		return "/v1/webhooks/kinde", []byte(token), []string{"Content-Type", "application/jwt", "webhook-id", "msg_" + name}
	case "stripe":
		sig := webhook.Sign(raw, StripeSecret, time.Now())
		return "/v1/webhooks/stripe", raw, []string{"Content-Type", "application/json; charset=utf-8", "Stripe-Signature", sig}
	}
	t.Fatalf("no provider %q", provider)
	return "", nil, nil
}
