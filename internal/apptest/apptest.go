// Package apptest builds the whole Ferry app on fresh test resources (testenv) with an injected
// clock, behind the same local API Gateway ferry dev uses, so tests drive real handlers with real
// Lambda events over the real emulators.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/analytics"
	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/devstack"
	"github.com/ferrymeter/ferry/internal/httpapi"
	"github.com/ferrymeter/ferry/internal/metrics"
	"github.com/ferrymeter/ferry/internal/plans"
	"github.com/ferrymeter/ferry/internal/resources"
	"github.com/ferrymeter/ferry/internal/testenv"
	"github.com/ferrymeter/ferry/internal/worker"
)

// AdminKey is the operator key of every harness.
const AdminKey = "test-admin-key"

// Clock is a settable clock, safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Options adjust a harness.
type Options struct {
	// Start is the clock's start (default 2026-11-15T12:00:00Z).
	Start time.Time
	// DynamoDB options for the app's client (fault injection, request counting).
	DynamoDB []func(*dynamodb.Options)
	Catalog  *plans.Catalog
	Schema   *analytics.Schema
	// Configure runs after the app is composed and before the gateway is built: capabilities
	// register routes and middleware here.
	Configure func(a *app.App)
	// Meters are the providers usage is reported to (see StandIns).
	Meters app.MetersConfig
}

// Harness is one test's Ferry.
type Harness struct {
	Env     *testenv.Env
	App     *app.App
	Clock   *Clock
	Counter *metrics.Counter
	Server  *httptest.Server
	Source  *devstack.EventSource
}

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
	env := testenv.New(t, testenv.Options{DynamoDB: o.DynamoDB})
	catalog := plans.Default()
	if o.Catalog != nil {
		catalog = *o.Catalog
	}
	schema := analytics.DefaultSchema
	if o.Schema != nil {
		schema = *o.Schema
	}
	clock := NewClock(o.Start)
	counter := metrics.NewCounter()
	cfg := app.Config{
		Names: env.Names, AdminKey: AdminKey, Catalog: catalog, Schema: schema,
		MaxQuarantines: worker.DefaultMaxQuarantines, Meters: o.Meters,
	}
	a := app.New(cfg, env.Clients, Logger(t), counter, clock.Now)
	if o.Configure != nil {
		o.Configure(a)
	}
	handlers := map[string]httpapi.LambdaHandler{}
	for _, f := range resources.Functions {
		handlers[f.Name] = httpapi.NewLambdaHandler(a.API.Handler(f.Name))
	}
	gw, err := devstack.NewGateway(handlers, resources.DefaultRouteFunction, a.Log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	arn, err := devstack.QueueARN(context.Background(), env.Clients.SQS, env.Names.QueueURL(resources.QueueEvents))
	if err != nil {
		t.Fatal(err)
	}
	source := &devstack.EventSource{
		SQS: env.Clients.SQS, QueueURL: env.Names.QueueURL(resources.QueueEvents), QueueARN: arn,
		Handler: a.Worker.HandleSQS, Log: a.Log,
	}
	return &Harness{Env: env, App: a, Clock: clock, Counter: counter, Server: srv, Source: source}
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
	resp, err := h.Server.Client().Do(req)
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

// Drain runs the worker's event source until the queue has nothing visible for one long poll.
// Messages that fail come back after the queue's visibility timeout (2 s in tests), so a drain
// that must see redeliveries waits at least that long (wait).
func (h *Harness) Drain(t testing.TB, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		n, err := h.Source.PollOnce(context.Background(), 1)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		if n == 0 && time.Now().After(deadline) {
			return
		}
	}
}
