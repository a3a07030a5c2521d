package ferry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// script is a stand-in for Ferry's HTTP front door in unit tests: it answers each request with
// the next of its answers and records what it was sent.
type script struct {
	mu       sync.Mutex
	answers  []func(w http.ResponseWriter, r *http.Request, body []byte)
	requests []recorded
}

type recorded struct {
	method, path, idempotencyKey, userAgent string
	body                                    []byte
	// rawQuery and header are the request's query string and headers as they arrived.
	rawQuery string
	header   http.Header
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, recorded{
		method: r.Method, path: r.URL.Path, idempotencyKey: r.Header.Get("Idempotency-Key"), userAgent: r.Header.Get("User-Agent"),
		body: body, rawQuery: r.URL.RawQuery, header: r.Header.Clone(),
	})
	answer := s.answers[min(n, len(s.answers)-1)]
	s.mu.Unlock()
	answer(w, r, body)
}

func (s *script) recorded() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.requests...)
}

func problemAnswer(status int, kind string, extra string, header ...string) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"type":"%s%s","title":"t","status":%d,"detail":"d"%s}`, ProblemTypePrefix, kind, status, extra)
	}
}

func jsonAnswer(status int, body string) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// hangUp closes the connection without an answer, after reading the request: the effect may
// have happened.
func hangUp(w http.ResponseWriter, _ *http.Request, _ []byte) {
	conn, _, _ := http.NewResponseController(w).Hijack()
	conn.Close()
}

func newTestClient(t *testing.T, s *script, cfg Config) *Client {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	cfg.BaseURL, cfg.APIKey = srv.URL, "fk_test"
	cfg.BaseWait = orDefault(cfg.BaseWait, time.Millisecond)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSendEvent_RetriesAfterLostAnswers_SameIDAndKeyEveryTime(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){
		hangUp,
		problemAnswer(502, "outcome-unknown", "", "Retry-After", "0"),
		problemAnswer(503, "unavailable", "", "Retry-After", "0"),
		problemAnswer(500, "internal", ""),
		problemAnswer(409, "idempotency-in-flight", "", "Retry-After", "0"),
		problemAnswer(408, "request-timeout", ""),
		jsonAnswer(202, `{"id":"x","status":"queued"}`),
	}}
	c := newTestClient(t, s, Config{MaxAttempts: 7})
	if _, err := c.SendEvent(context.Background(), CloudEvent{Source: "/t", Type: "api.call"}); err != nil {
		t.Fatal(err)
	}
	reqs := s.recorded()
	if len(reqs) != 7 {
		t.Fatalf("%d attempts, want 7", len(reqs))
	}
	var first CloudEvent
	if err := json.Unmarshal(reqs[0].body, &first); err != nil || !strings.HasPrefix(first.Id, "evt_") {
		t.Fatalf("first attempt's event %s: id %q, err %v", reqs[0].body, first.Id, err)
	}
	for i, r := range reqs {
		if string(r.body) != string(reqs[0].body) || r.idempotencyKey != reqs[0].idempotencyKey || r.idempotencyKey == "" {
			t.Fatalf("attempt %d sent %s under key %q; the first sent %s under %q", i+1, r.body, r.idempotencyKey, reqs[0].body, reqs[0].idempotencyKey)
		}
		if !strings.HasSuffix(r.userAgent, "ferry-go/"+Version) {
			t.Fatalf("user agent %q", r.userAgent)
		}
	}
}

func TestSendEvent_TwoLogicalCalls_TwoKeys(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){jsonAnswer(202, `{"id":"x","status":"queued"}`)}}
	c := newTestClient(t, s, Config{})
	for range 2 {
		if _, err := c.SendEvent(context.Background(), CloudEvent{Id: "e1", Source: "/t", Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	reqs := s.recorded()
	if reqs[0].idempotencyKey == reqs[1].idempotencyKey {
		t.Fatal("two logical calls shared an Idempotency-Key")
	}
}

func TestDo_OtherClientErrors_NeverRetried(t *testing.T) {
	for _, tc := range []struct {
		status int
		kind   string
	}{{400, "invalid-request"}, {401, "unauthorized"}, {402, "limit-reached"}, {402, "account-inactive"}, {404, "not-found"},
		{409, "conflict"}, {409, "hold-not-running"}, {413, "too-large"}, {422, "idempotency-key-reused"}, {422, "key-reused"}} {
		t.Run(tc.kind, func(t *testing.T) {
			s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){problemAnswer(tc.status, tc.kind, "")}}
			c := newTestClient(t, s, Config{MaxAttempts: 5})
			_, err := c.ReserveHold(context.Background(), CreateHoldRequest{Key: "k", Feature: "tokens", Amount: 1})
			if KindOf(err) != Kind(tc.kind) {
				t.Fatalf("error %v, want kind %s", err, tc.kind)
			}
			if n := len(s.recorded()); n != 1 {
				t.Fatalf("%d attempts of a %d, want 1", n, tc.status)
			}
		})
	}
}

func TestDo_AttemptsBounded_LastErrorReturned(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){problemAnswer(503, "unavailable", "", "Retry-After", "0")}}
	c := newTestClient(t, s, Config{MaxAttempts: 3})
	_, err := c.Usage(context.Background(), GetUsageParams{})
	var u *UnavailableError
	if !errors.As(err, &u) || len(s.recorded()) != 3 {
		t.Fatalf("err %v after %d attempts, want *UnavailableError after 3", err, len(s.recorded()))
	}
}

func TestDo_ServerAsksLongerThanMaxWait_NoRetry(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){problemAnswer(429, "rate-limited", `,"retryAfter":37`, "Retry-After", "37")}}
	c := newTestClient(t, s, Config{MaxWait: time.Second})
	_, err := c.ReserveHold(context.Background(), CreateHoldRequest{Key: "k", Feature: "tokens", Amount: 1})
	var rl *RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfterSeconds != 37 || rl.RetryAfter != 37*time.Second || len(s.recorded()) != 1 {
		t.Fatalf("err %#v after %d attempts", err, len(s.recorded()))
	}
}

func TestDo_Timeout_Retried(t *testing.T) {
	slow := func(w http.ResponseWriter, r *http.Request, b []byte) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){slow, jsonAnswer(200, `{"feature":"events","cycle":"2026-11","limit":null,"used":1,"held":0,"remaining":null,"corrections":0}`)}}
	c := newTestClient(t, s, Config{Timeout: 50 * time.Millisecond})
	u, err := c.Usage(context.Background(), GetUsageParams{})
	if err != nil || u.Used != 1 || u.Limit != nil {
		t.Fatalf("usage %+v, err %v", u, err)
	}
}

func TestDecide_WaitsAndBounds(t *testing.T) {
	p := retryPolicy{maxAttempts: 4, baseWait: 100 * time.Millisecond, maxWait: 2 * time.Second}
	netErr := &NetworkError{Err: errors.New("reset")}
	for attempt := 1; attempt <= 3; attempt++ {
		d := p.decide(attempt, outcome{err: netErr})
		step := min(100*time.Millisecond<<(attempt-1), 2*time.Second)
		if !d.retry || d.wait < step/2 || d.wait >= step {
			t.Fatalf("attempt %d: %+v, want a wait in [%s, %s)", attempt, d, step/2, step)
		}
	}
	if d := p.decide(4, outcome{err: netErr}); d.retry {
		t.Fatal("retried past maxAttempts")
	}
	h := http.Header{"Ratelimit-Reset": {"1"}}
	if d := p.decide(1, outcome{status: 429, header: h}); !d.retry || d.wait < time.Second || d.wait >= 1100*time.Millisecond {
		t.Fatalf("RateLimit-Reset 1: %+v", d)
	}
	if d := p.decide(1, outcome{status: 429, header: http.Header{"Retry-After": {"3"}}}); d.retry {
		t.Fatalf("a 3 s Retry-After over a 2 s MaxWait: %+v", d)
	}
}

// The problem kinds this client knows are exactly the server's: its problem table and its
// golden answers.
func TestProblemKinds_MatchServerTable(t *testing.T) {
	table, err := os.ReadFile("../../internal/platform/httpapi/problem.go")
	if err != nil {
		t.Fatal(err)
	}
	slugs := regexp.MustCompile(`slug: "([a-z-]+)"`).FindAllStringSubmatch(string(table), -1)
	if len(slugs) == 0 {
		t.Fatal("no slugs in the server's problem table")
	}
	seen := map[Kind]bool{}
	for _, m := range slugs {
		seen[Kind(m[1])] = true
		if _, ok := kinds[Kind(m[1])]; !ok {
			t.Errorf("the server answers kind %q, which has no error type here", m[1])
		}
	}
	for k := range kinds {
		if !seen[k] {
			t.Errorf("kind %q has an error type but the server's table does not have it", k)
		}
	}
}

func TestProblemFromAnswer_Golden(t *testing.T) {
	golden, err := os.ReadFile("../../testdata/golden/problems.golden")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(golden)), "\n") {
		f := strings.Split(line, "\t")
		var status int
		fmt.Sscan(f[1], &status)
		retryAfter := strings.Trim(f[2], `"`)
		h := http.Header{}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		err := problemFromAnswer(status, h, []byte(f[5]))
		p, ok := AsProblem(err)
		if !ok || p.Status != status || p.Detail == "" || !strings.HasPrefix(p.Type, ProblemTypePrefix) {
			t.Fatalf("%s: %#v", f[0], err)
		}
		if _, known := kinds[p.Kind]; !known {
			t.Fatalf("%s: kind %q has no error type", f[0], p.Kind)
		}
		if _, bare := err.(*ProblemError); bare {
			t.Fatalf("%s: a known kind came back as a bare *ProblemError", f[0])
		}
		if retryAfter != "" && p.RetryAfter == 0 && retryAfter != "0" {
			t.Fatalf("%s: Retry-After %s lost", f[0], retryAfter)
		}
	}
}

func TestProblemFromAnswer_ExtensionsAndUnknownKinds(t *testing.T) {
	err := problemFromAnswer(402, nil, []byte(`{"type":"tag:ferrymeter.dev,2026:problem:limit-reached","title":"Limit reached","status":402,"detail":"d","remaining":68800,"needed":90000}`))
	var lr *LimitReachedError
	if !errors.As(err, &lr) || lr.Remaining != 68800 || lr.Needed != 90000 {
		t.Fatalf("%#v", err)
	}
	err = problemFromAnswer(400, nil, []byte(`{"type":"tag:ferrymeter.dev,2026:problem:invalid-request","title":"Invalid request","status":400,"errors":["a","b"]}`))
	var ir *InvalidRequestError
	if !errors.As(err, &ir) || len(ir.Errors) != 2 {
		t.Fatalf("%#v", err)
	}
	err = problemFromAnswer(409, nil, []byte(`{"type":"tag:ferrymeter.dev,2026:problem:hold-not-running","title":"x","status":409,"holdStatus":"SETTLED"}`))
	var hn *HoldNotRunningError
	if !errors.As(err, &hn) || hn.HoldStatus != HoldStatusSETTLED {
		t.Fatalf("%#v", err)
	}
	err = problemFromAnswer(418, nil, []byte(`{"type":"tag:ferrymeter.dev,2026:problem:teapot","title":"Teapot","status":418,"detail":"short and stout","spout":1}`))
	p, ok := err.(*ProblemError)
	if !ok || p.Kind != "teapot" || !p.Extension("spout", new(int)) {
		t.Fatalf("an unknown kind: %#v", err)
	}
	err = problemFromAnswer(502, nil, []byte("<html>bad gateway</html>"))
	if p, ok := err.(*ProblemError); !ok || p.Status != 502 || p.Kind != "" {
		t.Fatalf("a non-problem answer: %#v", err)
	}
}

func TestNew_RefusesBadConfig(t *testing.T) {
	for _, cfg := range []Config{{BaseURL: "127.0.0.1:8080", APIKey: "k"}, {BaseURL: "http://x"}} {
		if _, err := New(cfg); err == nil {
			t.Fatalf("New(%+v) took it", cfg)
		}
	}
}

func TestEncodeEvents_NoNullData_ExtensionsKept(t *testing.T) {
	ext := CloudEvent_AdditionalProperties{}
	if err := ext.FromCloudEvent0("eu-west-1"); err != nil {
		t.Fatal(err)
	}
	evs := []CloudEvent{
		{Specversion: "1.0", Id: "a", Source: "/s", Type: "t"},
		{Specversion: "1.0", Id: "b", Source: "/s", Type: "t", Data: map[string]int{"n": 1}, AdditionalProperties: map[string]CloudEvent_AdditionalProperties{"region": ext}},
	}
	b, err := encodeEvents(evs, true)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"specversion":"1.0","id":"a","source":"/s","type":"t"},{"specversion":"1.0","id":"b","source":"/s","type":"t","data":{"n":1},"region":"eu-west-1"}]`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}
