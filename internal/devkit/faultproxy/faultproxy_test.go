package faultproxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// stack is an upstream that counts the requests that reach it.
func stack(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(s.Close)
	return s, &hits
}

// proxyWith is a proxy to upstream that faults the given share of /v1/ requests.
func proxyWith(t *testing.T, upstream string, rate float64, delay time.Duration) (*Proxy, *httptest.Server) {
	t.Helper()
	p, err := New(Options{Upstream: upstream, Seed: 3, Rate: rate, Delay: delay, Paths: []string{"/v1/"}})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(p)
	t.Cleanup(s.Close)
	return p, s
}

func TestProxy_EachFault_DoesWhatItSays(t *testing.T) {
	up, hits := stack(t)
	p, front := proxyWith(t, up.URL, 1, 50*time.Millisecond)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	want := map[Fault]int{}
	for range 60 {
		before := hits.Load()
		start := time.Now()
		// What the client sees and what reached the stack tell which fault it got.
		resp, err := client.Post(front.URL+"/v1/events", "application/json", strings.NewReader(`{}`))
		reached := hits.Load() - before
		switch {
		case err != nil && reached == 0:
			want[ResetBeforeForward]++
		case err != nil && reached == 1:
			want[DropAnswer]++
		case err == nil && reached == 1 && time.Since(start) >= 50*time.Millisecond:
			resp.Body.Close()
			want[Delay]++
		default:
			t.Fatalf("a request at rate 1 came back unfaulted: err %v, reached upstream %d times", err, reached)
		}
	}
	s := p.Stats()
	if s.Requests != 60 || s.Faulted != 60 {
		t.Fatalf("stats %+v, want 60 requests all faulted", s)
	}
	for f, n := range want {
		if s.ByFault[f.String()] != n {
			t.Errorf("%s: the client saw %d, the proxy counted %d", f, n, s.ByFault[f.String()])
		}
		if n == 0 {
			t.Errorf("%s never happened in 60 requests", f)
		}
	}
	if len(want) != 3 {
		t.Errorf("faults seen: %v, want all three", want)
	}
}

func TestProxy_RateZeroAndOtherPaths_ForwardUnchanged(t *testing.T) {
	up, hits := stack(t)
	_, front := proxyWith(t, up.URL, 0, 0)
	_, onlyV1 := proxyWith(t, up.URL, 1, 0)
	for _, url := range []string{front.URL + "/v1/events", onlyV1.URL + "/healthz"} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%s: status %d, want the upstream's 202", url, resp.StatusCode)
		}
	}
	if hits.Load() != 2 {
		t.Fatalf("upstream saw %d requests, want 2", hits.Load())
	}
}

func TestProxy_SameSeed_SameFaults(t *testing.T) {
	draw := func() []Fault {
		p, err := New(Options{Upstream: "http://127.0.0.1:1", Seed: 42, Rate: 0.2})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]Fault, 200)
		for i := range out {
			out[i] = p.decide("/v1/events")
		}
		return out
	}
	a, b := draw(), draw()
	faulted := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d: %s then %s with the same seed", i, a[i], b[i])
		}
		if a[i] != None {
			faulted++
		}
	}
	// 20% of 200 is 40; a seeded draw lands near it.
	if faulted < 25 || faulted > 55 {
		t.Fatalf("%d of 200 faulted at rate 0.2", faulted)
	}
}
