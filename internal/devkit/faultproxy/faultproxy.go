// Package faultproxy is a fault-injecting HTTP proxy for testing Ferry's clients end to end. It
// sits between a client and a running stack and, for a seeded share of requests, does one of the
// things a real network does to a caller: it forwards the request and then drops the answer (the
// effect happened, the caller never hears of it), resets the connection before forwarding (nothing
// happened), or delays the request before forwarding it (a caller with a short timeout gives up
// while the effect still happens). Every decision comes from one seeded source, so a run can be
// repeated, and every fault is counted, so a test can print what it survived.
//
// It is tooling: no production package imports it.
package faultproxy

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Fault is what the proxy does to one request.
type Fault int

// Faults.
const (
	// None forwards the request and the answer unchanged.
	None Fault = iota
	// DropAnswer forwards the request, reads the whole answer, then closes the client's
	// connection without writing it: the effect happened and the caller sees a network error.
	DropAnswer
	// ResetBeforeForward closes the client's connection with a TCP reset before forwarding:
	// nothing happened upstream.
	ResetBeforeForward
	// Delay waits Options.Delay before forwarding, then answers normally (if the caller still
	// listens).
	Delay

	numFaults
)

var faultNames = [numFaults]string{None: "none", DropAnswer: "drop-answer", ResetBeforeForward: "reset-before-forward", Delay: "delay"}

func (f Fault) String() string {
	if f < 0 || f >= numFaults {
		return fmt.Sprintf("Fault(%d)", int(f))
	}
	return faultNames[f]
}

// StatsPath is the path the proxy answers itself with its counts (GET) and never forwards.
const StatsPath = "/__faultproxy/stats"

// Options configure a Proxy.
type Options struct {
	// Upstream is the stack's base URL, e.g. http://127.0.0.1:8080.
	Upstream string
	// Seed seeds every fault decision.
	Seed uint64
	// Rate is the share of requests that get a fault (0–1), split evenly among the faults.
	Rate float64
	// Delay is how long a Delay fault waits before forwarding.
	Delay time.Duration
	// Paths limits faults to requests whose path starts with one of these (every path if empty).
	Paths []string
}

// Stats are the proxy's counts.
type Stats struct {
	Requests int            `json:"requests"`
	Faulted  int            `json:"faulted"`
	ByFault  map[string]int `json:"byFault"`
	// Upstream counts requests the stack itself did not answer.
	Upstream int `json:"upstreamErrors"`
}

// Proxy is the fault-injecting proxy; it is an http.Handler.
type Proxy struct {
	opts      Options
	transport *http.Transport

	mu    sync.Mutex
	rng   *rand.Rand
	stats Stats
}

// New returns a proxy to opts.Upstream.
func New(opts Options) (*Proxy, error) {
	if !strings.HasPrefix(opts.Upstream, "http://") {
		return nil, fmt.Errorf("faultproxy: upstream %q must be an http:// URL", opts.Upstream)
	}
	if opts.Rate < 0 || opts.Rate > 1 {
		return nil, fmt.Errorf("faultproxy: rate %v is not between 0 and 1", opts.Rate)
	}
	opts.Upstream = strings.TrimSuffix(opts.Upstream, "/")
	return &Proxy{
		opts: opts,
		// A large idle pool: clients under test send many requests at once.
		transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second},
		rng:       rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		stats:     Stats{ByFault: map[string]int{}},
	}, nil
}

// Stats returns a copy of the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.ByFault = make(map[string]int, len(p.stats.ByFault))
	for k, v := range p.stats.ByFault {
		s.ByFault[k] = v
	}
	return s
}

// decide draws the fault for one request and counts it.
func (p *Proxy) decide(path string) Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Requests++
	if !p.eligible(path) {
		return None
	}
	// Two draws per request whatever the outcome, so one request's decision never shifts the
	// next one's.
	hit, which := p.rng.Float64(), p.rng.IntN(int(numFaults)-1)
	if hit >= p.opts.Rate {
		return None
	}
	f := Fault(which + 1)
	p.stats.Faulted++
	p.stats.ByFault[f.String()]++
	return f
}

func (p *Proxy) eligible(path string) bool {
	if len(p.opts.Paths) == 0 {
		return true
	}
	for _, prefix := range p.opts.Paths {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// ServeHTTP forwards r upstream, with the fault drawn for it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == StatsPath {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Stats())
		return
	}
	// Read the whole request first: a fault never leaves half a body upstream.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "faultproxy: reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	fault := p.decide(r.URL.Path)
	switch fault {
	case ResetBeforeForward:
		reset(w)
		return
	case Delay:
		// Forwarded after the wait even if the caller gave up meanwhile, as a slow network would.
		time.Sleep(p.opts.Delay)
	}
	resp, answer, err := p.forward(r, body)
	if err != nil {
		p.mu.Lock()
		p.stats.Upstream++
		p.mu.Unlock()
		http.Error(w, "faultproxy: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	if fault == DropAnswer {
		reset(w)
		return
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// forward sends the request upstream on a context of its own (a caller that gives up does not
// cancel it: the network does not tell the server) and reads the whole answer.
func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, []byte, error) {
	up, err := http.NewRequest(r.Method, p.opts.Upstream+r.URL.RequestURI(), strings.NewReader(string(body)))
	if err != nil {
		return nil, nil, err
	}
	up.Header = r.Header.Clone()
	up.Header.Del("Connection")
	up.ContentLength = int64(len(body))
	resp, err := p.transport.RoundTrip(up)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return resp, answer, err
}

// reset closes the client's connection with a TCP reset (linger 0), so the client sees
// "connection reset by peer" rather than a clean end of stream.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not an HTTP/1 connection: abort the answer instead, which the client also sees as a
		// broken connection.
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}
