package harness

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	stripestandin "github.com/ferrymeter/ferry/internal/devkit/standin/stripe"
	"github.com/ferrymeter/ferry/internal/devkit/testclock"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/platform/stripe"
	"github.com/ferrymeter/ferry/internal/reporting"
)

// Faults of a provider's HTTP API, beside the wire's KillBefore, KillAfter, NetworkError and
// LostAnswer, which a provider call meets as an AWS call does (a network error is one before
// the request left; a lost answer is a request the provider applied whose answer never came).
const (
	// ProviderThrottle: the provider answers 429 with Retry-After; nothing is applied.
	ProviderThrottle Fault = 100 + iota
	// ProviderError: the provider answers 500; nothing is applied.
	ProviderError
	// SlowAnswer: the provider applies the request and answers after the client's timeout: the
	// clock moves past it and the client sees a timeout.
	SlowAnswer
)

func init() {
	faultNames[ProviderThrottle] = "provider-429"
	faultNames[ProviderError] = "provider-5xx"
	faultNames[SlowAnswer] = "provider-slow-answer"
}

// Bounds of the provider stand-ins in the harness.
const (
	// providerTimeout is the provider client's timeout (the Stripe client's own default).
	providerTimeout = 10 * time.Second
	// providerService names Stripe's calls in the trace and to faultsFor.
	providerService = "Stripe"
	// standInStripeKey is the key the harness's Stripe stand-in accepts.
	standInStripeKey = "sk_test_harness"
	// standInStripeBase is where the Stripe client sends; no request to it leaves the process.
	standInStripeBase = "http://127.0.0.1:9"
)

// providerFaultRate is the chance that a provider call meets a fault while faults are on (in a
// schedule with faults), beside the schedule's own rate.
const providerFaultRate = 0.35

// retryAfters are the Retry-After values (seconds) a 429 asks for: within the outbox's first
// backoff, and past it.
var retryAfters = []int{1, 20, 90}

// providerFaults lists the faults a provider call can meet: a write can be applied with its
// answer lost or late; a read only fails.
func providerFaults(c Call) []Fault {
	if c.Write {
		return []Fault{ProviderThrottle, ProviderError, NetworkError, LostAnswer, SlowAnswer, KillBefore, KillAfter}
	}
	return []Fault{ProviderThrottle, ProviderError, NetworkError, SlowAnswer}
}

// providerWire is the transport of the providers' clients in the harness: each request an
// actor sends parks with the scheduler like an AWS call, meets the fault the scheduler draws,
// and is served in process by the schedule's Stripe stand-in (no socket). Requests sent outside
// any actor (the harness reading the meter back at the end) pass untouched.
type providerWire struct {
	clock *testclock.Clock

	mu     sync.Mutex
	stripe *stripestandin.Server
	// sends counts, per meter event identifier, the requests that reached the wire, and faulted
	// those of them that met a fault that kept the event from being acknowledged.
	sends, faulted map[string]int
	// retryAfter is the Retry-After the next 429 asks for.
	retryAfter int
}

func newProviderWire(clock *testclock.Clock) *providerWire {
	p := &providerWire{clock: clock}
	p.fresh(plans.Default())
	return p
}

// fresh gives the wire a new Stripe stand-in, knowing the catalog's meters, on the schedule's
// clock: one schedule never sees another's events.
func (p *providerWire) fresh(catalog plans.Catalog) *stripestandin.Server {
	s := stripestandin.New(standInStripeKey, stripestandin.Meters(catalog))
	s.SetClock(p.clock.Now)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stripe, p.sends, p.faulted = s, map[string]int{}, map[string]int{}
	return s
}

// Stripe is the schedule's Stripe stand-in.
func (p *providerWire) Stripe() *stripestandin.Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stripe
}

// attempts returns how many sends of identifier reached the wire, and how many of them met a
// fault that kept the answer from the client.
func (p *providerWire) attempts(identifier string) (sends, faulted int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sends[identifier], p.faulted[identifier]
}

// settings report usage to Stripe in every function of the harness.
func (p *providerWire) settings() compose.Settings {
	return compose.Settings{resources.EnvStripeAPIKey: standInStripeKey, resources.EnvStripeAPIBase: standInStripeBase}
}

// reachThrough makes a function that reports usage reach Stripe through the wire.
func (p *providerWire) reachThrough(fn *compose.Function) error {
	parts, ok := fn.Parts.(*reporting.Parts)
	if !ok || parts.Stripe == nil {
		return nil
	}
	client, err := stripe.New(stripe.Config{
		APIKey: standInStripeKey, APIBase: standInStripeBase,
		HTTPClient: &http.Client{Transport: p, Timeout: providerTimeout},
	})
	if err != nil {
		return err
	}
	parts.Stripe, parts.Drainer.Sender = client, client
	if parts.Reconciler != nil {
		parts.Reconciler.Stripe = client
	}
	return nil
}

// RoundTrip implements http.RoundTripper.
func (p *providerWire) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	endpoint := stripeEndpoint(req.URL.Path)
	a := ActorFrom(req.Context())
	if a == nil {
		return p.serve(req, body, "")
	}
	c := Call{Service: providerService, Op: endpoint, Write: req.Method == http.MethodPost}
	s := a.sched.owner
	fault := a.sched.park(a, c)
	if fault == None && !s.Quiet() && s.FaultRate > 0 && a.Rand.Float64() < providerFaultRate {
		// Provider calls are few in a schedule, and their faults are what the outbox is for:
		// they meet one more often than AWS calls, drawn from the actor's own stream.
		kinds := providerFaults(c)
		fault = kinds[a.Rand.IntN(len(kinds))]
		if fault.Kills() {
			a.Kill()
		}
		s.Note("#%d %s: %s  !%s", a.ID, a.Name, c, fault)
	}
	if fault != Dead && s.timedOut(a, req.Context()) {
		fault = Dead
	}
	if fault != Dead && fault != None {
		s.Count(providerKind(fault))
	}
	id := ""
	if endpoint == stripestandin.EndpointMeterEvents {
		if form, err := url.ParseQuery(string(body)); err == nil {
			id = form.Get("identifier")
		}
	}
	p.record(id, fault)
	switch fault {
	case Dead, KillBefore:
		return nil, errKilled
	case NetworkError:
		return nil, errNetwork
	case ProviderThrottle:
		p.mu.Lock()
		secs := retryAfters[a.Rand.IntN(len(retryAfters))]
		p.retryAfter = secs
		p.mu.Unlock()
		return p.serve(req, body, stripestandin.RateLimit)
	case ProviderError:
		return p.serve(req, body, stripestandin.Fail)
	}
	resp, err := p.serve(req, body, "")
	switch fault {
	case LostAnswer, KillAfter:
		if resp != nil {
			resp.Body.Close()
		}
		return nil, errLost
	case SlowAnswer:
		if resp != nil {
			resp.Body.Close()
		}
		p.clock.Advance(providerTimeout)
		return nil, fmt.Errorf("the provider answered after the client's %s timeout: %w", providerTimeout, errLost)
	}
	return resp, err
}

// providerKind names a provider call's fault in the counts, apart from the AWS calls' faults.
func providerKind(f Fault) string {
	switch f {
	case ProviderThrottle, ProviderError, SlowAnswer:
		return f.String()
	case LostAnswer:
		return "provider-applied-answer-lost"
	case KillAfter:
		return "provider-applied-then-killed"
	}
	return "provider-" + f.String()
}

func (p *providerWire) record(identifier string, f Fault) {
	if identifier == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sends[identifier]++
	if f != None {
		p.faulted[identifier]++
	}
}

// serve hands the request to the stand-in, after queuing the failure it is to answer with.
func (p *providerWire) serve(req *http.Request, body []byte, f stripestandin.Fault) (*http.Response, error) {
	p.mu.Lock()
	s, secs := p.stripe, p.retryAfter
	p.mu.Unlock()
	if f != "" {
		if f == stripestandin.RateLimit {
			s.SetRetryAfter(secs)
		}
		s.FailNext(stripeEndpoint(req.URL.Path), f)
	}
	in := req.Clone(req.Context())
	in.Body = io.NopCloser(bytes.NewReader(body))
	client := handlerClient{h: s}
	return client.Do(in)
}

func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	return io.ReadAll(req.Body)
}

// stripeEndpoint names the endpoint of a Stripe path, as the stand-in's fault queues do.
func stripeEndpoint(path string) string {
	switch {
	case strings.HasSuffix(path, "/event_summaries"):
		return stripestandin.EndpointSummaries
	case strings.HasSuffix(path, "/meter_event_adjustments"):
		return stripestandin.EndpointAdjustments
	case strings.HasSuffix(path, "/meter_events"):
		return stripestandin.EndpointMeterEvents
	}
	return path
}
