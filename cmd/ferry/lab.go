package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ferrymeter/ferry/internal/devstack"
	"github.com/ferrymeter/ferry/internal/resources"
)

// lab is one reference scenario run against a running Ferry.
type lab struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// labs are the reference scenarios of DESIGN.md §3. Each creates its own fresh account through
// the operator route, so it can run against ferry dev or a deployed stack any number of times.
var labs = map[string]lab{
	"holds-five":    {"five jobs of 40,000 start at once against 100,000: a plain check vs holds", runHoldsFive},
	"holds-load":    {"many jobs, some at a time, against room for a fixed number: admissions and latency", runHoldsLoad},
	"webhooks-nine": {"nine Kinde deliveries of three events, a crash and a late cancellation: Ferry vs a naive handler", runWebhooksNine},
}

func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		names := make([]string, 0, len(labs))
		for n := range labs {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintln(stdout, "usage: ferry lab <name> [--url URL] [flags]")
		fmt.Fprintln(stdout)
		for _, n := range names {
			fmt.Fprintf(stdout, "  %-14s %s\n", n, labs[n].summary)
		}
		fmt.Fprintln(stdout, "\nThe operator key comes from FERRY_ADMIN_KEY (default dev-admin-key).")
		return nil
	}
	l, ok := labs[args[0]]
	if !ok {
		return fmt.Errorf("unknown lab %q (try ferry lab --help)", args[0])
	}
	return l.run(ctx, args[1:], stdout, stderr)
}

// Bounds of the lab client.
const (
	labRequestTimeout = 30 * time.Second
	// labMaxRetries bounds how often a job repeats a request answered 429 or 503, with the same
	// key, as a client should.
	labMaxRetries = 8
	// labMaxRetryWait bounds one wait before a repeat.
	labMaxRetryWait  = time.Minute
	labProgressEvery = time.Second
)

// labClient talks to Ferry's HTTP API.
type labClient struct {
	base     string
	adminKey string
	http     *http.Client
}

func newLabClient(base string, concurrency int) *labClient {
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        2 * concurrency,
		MaxIdleConnsPerHost: concurrency,
		IdleConnTimeout:     90 * time.Second,
	}
	return &labClient{
		base:     strings.TrimRight(base, "/"),
		adminKey: envOr(resources.EnvAdminKey, devstack.DefaultAdminKey),
		http:     &http.Client{Transport: transport, Timeout: labRequestTimeout},
	}
}

// answer is one HTTP answer.
type answer struct {
	status int
	header http.Header
	body   map[string]any
}

func (a answer) num(field string) int64 {
	v, _ := a.body[field].(float64)
	return int64(v)
}

func (a answer) str(field string) string {
	s, _ := a.body[field].(string)
	return s
}

func (c *labClient) do(ctx context.Context, method, path, key string, body any) (answer, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return answer{}, err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, header: resp.Header}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &a.body); err != nil {
			return a, fmt.Errorf("%s %s answered %d with a body that is not JSON: %.200s", method, path, resp.StatusCode, data)
		}
	}
	return a, nil
}

// doRetrying sends a request and repeats it, same body and keys, while Ferry answers 429 or 503
// with Retry-After: a keyed request is safe to repeat. waits counts the repeats; latency is the
// time the last attempt took, without the waits the server asked for.
func (c *labClient) doRetrying(ctx context.Context, method, path, key string, body any) (a answer, waits int, latency time.Duration, err error) {
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		a, err = c.do(ctx, method, path, key, body)
		latency = time.Since(sent)
		if err != nil || attempt == labMaxRetries ||
			(a.status != http.StatusTooManyRequests && a.status != http.StatusServiceUnavailable) {
			return a, waits, latency, err
		}
		secs, perr := strconv.Atoi(a.header.Get("Retry-After"))
		if perr != nil {
			return a, waits, latency, nil
		}
		waits++
		wait := min(time.Duration(secs)*time.Second, labMaxRetryWait)
		select {
		case <-ctx.Done():
			return a, waits, latency, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// createAccount creates a fresh account with a tokens limit and returns its id and API key.
func (c *labClient) createAccount(ctx context.Context, prefix string, limit int64) (string, string, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := prefix + "-" + hex.EncodeToString(b[:])
	a, err := c.do(ctx, http.MethodPost, "/v1/accounts", c.adminKey, map[string]any{
		"id": id, "plan": "free", "limits": map[string]any{"tokens": limit},
	})
	if err != nil {
		return "", "", fmt.Errorf("create the lab account at %s (is ferry dev running?): %w", c.base, err)
	}
	if a.status != http.StatusCreated {
		return "", "", fmt.Errorf("create the lab account: %d %s (is FERRY_ADMIN_KEY the operator key?)", a.status, a.str("detail"))
	}
	return id, a.str("apiKey"), nil
}

// usage reads the account's tokens usage.
func (c *labClient) usage(ctx context.Context, key string) (answer, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/usage?feature=tokens", key, nil)
	if err == nil && a.status != http.StatusOK {
		err = fmt.Errorf("GET /v1/usage: %d %s", a.status, a.str("detail"))
	}
	return a, err
}

// jobOutcome is what one job's admission came to.
type jobOutcome int

const (
	jobAdmitted jobOutcome = iota + 1
	jobRefused
	jobFailed
)

// jobResult is what one job came to.
type jobResult struct {
	outcome jobOutcome
	// latency is the time to the reservation's answer (201 or 402), without waits the server
	// asked for.
	latency time.Duration
	// waits counts repeats after 429 or 503.
	waits int
	// refusal is the 402's detail.
	refusal string
	err     error
}

// runJob runs one job through Ferry: reserve estimate under key, and if admitted, charge it in
// steps and settle. Anything other than an admission that settles or a 402 is a failure.
func (c *labClient) runJob(ctx context.Context, apiKey, key string, estimate int64, steps int) jobResult {
	a, waits, latency, err := c.doRetrying(ctx, http.MethodPost, "/v1/holds", apiKey, map[string]any{"key": key, "feature": "tokens", "amount": estimate})
	res := jobResult{outcome: jobFailed, latency: latency, waits: waits}
	fail := func(err error) jobResult {
		res.outcome, res.err = jobFailed, err
		return res
	}
	if err != nil {
		return fail(err)
	}
	switch a.status {
	case http.StatusPaymentRequired:
		res.outcome, res.refusal = jobRefused, a.str("detail")
		return res
	case http.StatusCreated:
	default:
		return fail(fmt.Errorf("reserve %s: %d %s", key, a.status, a.str("detail")))
	}
	id := a.str("id")
	left := estimate
	for step := range steps {
		amount := estimate / int64(steps)
		if step == steps-1 {
			amount = left
		}
		left -= amount
		ch, _, _, err := c.doRetrying(ctx, http.MethodPost, "/v1/holds/"+id+"/charges", apiKey, map[string]any{"key": fmt.Sprintf("step-%d", step), "amount": amount})
		if err != nil || ch.status != http.StatusOK {
			return fail(fmt.Errorf("charge %s step %d: %v %d %s", key, step, err, ch.status, ch.str("detail")))
		}
	}
	st, _, _, err := c.doRetrying(ctx, http.MethodPost, "/v1/holds/"+id+"/settle", apiKey, map[string]any{})
	if err != nil || st.status != http.StatusOK {
		return fail(fmt.Errorf("settle %s: %v %d %s", key, err, st.status, st.str("detail")))
	}
	res.outcome = jobAdmitted
	return res
}

func labFlags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("lab "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://"+envOr(EnvAddr, devstack.DefaultAddr), "Ferry's base URL: a running ferry dev or a deployed stack")
	return fs, url
}

// Figures the seed reports for its two runs (Earmark, on a laptop against a cloud development
// deployment).
const (
	seedFivePlainSpent    = 200_000
	seedFiveAdmitted      = 2
	seedFiveRefused       = 3
	seedFiveHoldsSpent    = 80_000
	seedLoadAdmitted      = 100
	seedLoadRefused       = 20
	seedLoadFailed        = 0
	seedLoadSpent         = 100_000
	seedLoadP50Ms         = 1_316
	seedLoadP95Ms         = 3_717
	seedLoadP99Ms         = 5_099
	seedLoadRunSeconds    = 6.7
	seedFiveJobs          = 5
	seedFiveEstimate      = 40_000
	seedFiveLimit         = 100_000
	fiveStepsPerJob       = 4
	loadStepsPerJob       = 1
	defaultLoadJobs       = 120
	defaultLoadEstimate   = 1_000
	defaultLoadLimit      = 100_000
	defaultLoadConcurrent = 50
)

// start runs n calls of f released at the same moment, and waits for them.
func start(n int, f func(i int)) {
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			f(i)
		}()
	}
	close(gate)
	wg.Wait()
}

func runHoldsFive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, url := labFlags("holds-five", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := newLabClient(*url, seedFiveJobs)
	id, apiKey, err := c.createAccount(ctx, "lab-five", seedFiveLimit)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Five jobs of %s tokens start at the same moment; account %s has a limit of %s.\n\n",
		thousands(seedFiveEstimate), id, thousands(seedFiveLimit))

	// The plain check: Ferry has no route that spends without a hold, so this is the check as
	// a client would write it — every job reads GET /v1/usage at the same moment and runs if it
	// sees room. Its spending is tallied here, client-side: nothing is held, so nothing stops
	// the jobs that all saw the same remaining capacity.
	var mu sync.Mutex
	plainStarted, plainSpent := 0, int64(0)
	var plainErr error
	start(seedFiveJobs, func(int) {
		u, err := c.usage(ctx, apiKey)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			plainErr = err
			return
		}
		if u.body["remaining"] == nil || u.num("remaining") >= seedFiveEstimate {
			plainStarted++
			plainSpent += seedFiveEstimate
		}
	})
	if plainErr != nil {
		return plainErr
	}

	// Holds: the same five jobs reserve at the same moment; admitted jobs run in steps and settle.
	admitted, refused, failed := 0, 0, 0
	var refusals []string
	var failures []error
	start(seedFiveJobs, func(i int) {
		res := c.runJob(ctx, apiKey, fmt.Sprintf("five-job-%d", i), seedFiveEstimate, fiveStepsPerJob)
		mu.Lock()
		defer mu.Unlock()
		switch res.outcome {
		case jobAdmitted:
			admitted++
		case jobRefused:
			refused++
			refusals = append(refusals, res.refusal)
		default:
			failed++
			failures = append(failures, res.err)
		}
	})
	u, err := c.usage(ctx, apiKey)
	if err != nil {
		return err
	}
	used, held := u.num("used"), u.num("held")

	tw := tabwriter.NewWriter(stdout, 0, 0, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tseed (Earmark)\tFerry\t")
	fmt.Fprintf(tw, "plain check: jobs started\t%d\t%d\t\n", seedFiveJobs, plainStarted)
	fmt.Fprintf(tw, "plain check: tokens spent\t%s\t%s\t\n", thousands(seedFivePlainSpent), thousands(plainSpent))
	fmt.Fprintf(tw, "holds: admitted\t%d\t%d\t\n", seedFiveAdmitted, admitted)
	fmt.Fprintf(tw, "holds: refused\t%d\t%d\t\n", seedFiveRefused, refused)
	fmt.Fprintf(tw, "holds: failed\t%d\t%d\t\n", 0, failed)
	fmt.Fprintf(tw, "holds: tokens spent (GET /v1/usage used)\t%s\t%s\t\n", thousands(seedFiveHoldsSpent), thousands(used))
	fmt.Fprintf(tw, "holds: still held (GET /v1/usage held)\t%s\t%s\t\n", "0", thousands(held))
	_ = tw.Flush()
	fmt.Fprintln(stdout, "\nThe plain check is a real race of concurrent GET /v1/usage readers that each then run;")
	fmt.Fprintln(stdout, "its spending is a client-side tally (Ferry has no route that spends without a hold).")
	for i, r := range refusals {
		fmt.Fprintf(stdout, "Refused job %d was told: %q\n", i+1, r)
	}
	fmt.Fprintf(stdout, "Account %s, API key %s (GET /v1/usage?feature=tokens to check).\n", id, apiKey)

	wantAdmitted := min(seedFiveJobs, int(seedFiveLimit/seedFiveEstimate))
	var problems []string
	if admitted != wantAdmitted || refused != seedFiveJobs-wantAdmitted || failed != 0 {
		problems = append(problems, fmt.Sprintf("holds admitted %d, refused %d, failed %d; expected %d, %d, 0",
			admitted, refused, failed, wantAdmitted, seedFiveJobs-wantAdmitted))
	}
	if used != int64(wantAdmitted)*seedFiveEstimate || held != 0 {
		problems = append(problems, fmt.Sprintf("usage says used %d, held %d; expected %d and 0", used, held, int64(wantAdmitted)*seedFiveEstimate))
	}
	return labVerdict(stdout, problems, failures)
}

func runHoldsLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, url := labFlags("holds-load", stderr)
	jobs := fs.Int("jobs", defaultLoadJobs, "jobs to run")
	estimate := fs.Int64("estimate", defaultLoadEstimate, "tokens each job holds and uses")
	limit := fs.Int64("limit", defaultLoadLimit, "the account's tokens limit")
	concurrency := fs.Int("concurrency", defaultLoadConcurrent, "jobs in flight at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *jobs < 1 || *estimate < 1 || *limit < 0 || *concurrency < 1 {
		return errors.New("--jobs, --estimate and --concurrency must be positive, --limit not negative")
	}
	c := newLabClient(*url, *concurrency)
	id, apiKey, err := c.createAccount(ctx, "lab-load", *limit)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d jobs of %s tokens, %d at a time, against account %s with a limit of %s.\n\n",
		*jobs, thousands(*estimate), *concurrency, id, thousands(*limit))

	var (
		mu                        sync.Mutex
		admitted, refused, failed int
		waits, done               int
		latencies                 []time.Duration
		failures                  []error
		next                      = make(chan int)
		wg                        sync.WaitGroup
		began                     = time.Now()
		stopProgress              = make(chan struct{})
		progressDone              = make(chan struct{})
	)
	go func() {
		defer close(progressDone)
		t := time.NewTicker(labProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				mu.Lock()
				fmt.Fprintf(stderr, "\r  %d/%d jobs done: %d admitted, %d refused, %d failed", done, *jobs, admitted, refused, failed)
				mu.Unlock()
			}
		}
	}()
	for range *concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res := c.runJob(ctx, apiKey, fmt.Sprintf("load-job-%d", i), *estimate, loadStepsPerJob)
				mu.Lock()
				done++
				waits += res.waits
				switch res.outcome {
				case jobAdmitted:
					admitted++
				case jobRefused:
					refused++
				default:
					failed++
					failures = append(failures, res.err)
				}
				if res.outcome != jobFailed {
					latencies = append(latencies, res.latency)
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range *jobs {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(began)
	close(stopProgress)
	<-progressDone
	fmt.Fprintf(stderr, "\r  %d/%d jobs done.%s\n", done, *jobs, strings.Repeat(" ", 40))
	if ctx.Err() != nil {
		return ctx.Err()
	}

	u, err := c.usage(ctx, apiKey)
	if err != nil {
		return err
	}
	used, held := u.num("used"), u.num("held")
	p50, p95, p99 := percentile(latencies, 50), percentile(latencies, 95), percentile(latencies, 99)

	tw := tabwriter.NewWriter(stdout, 0, 0, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tseed (Earmark)\tFerry\t")
	fmt.Fprintf(tw, "admitted\t%d\t%d\t\n", seedLoadAdmitted, admitted)
	fmt.Fprintf(tw, "refused\t%d\t%d\t\n", seedLoadRefused, refused)
	fmt.Fprintf(tw, "failed\t%d\t%d\t\n", seedLoadFailed, failed)
	fmt.Fprintf(tw, "tokens spent (GET /v1/usage used)\t%s\t%s\t\n", thousands(seedLoadSpent), thousands(used))
	fmt.Fprintf(tw, "still held at the end\t%s\t%s\t\n", "0", thousands(held))
	fmt.Fprintf(tw, "admission latency p50\t%s ms\t%s ms\t\n", thousands(seedLoadP50Ms), thousands(p50.Milliseconds()))
	fmt.Fprintf(tw, "admission latency p95\t%s ms\t%s ms\t\n", thousands(seedLoadP95Ms), thousands(p95.Milliseconds()))
	fmt.Fprintf(tw, "admission latency p99\t%s ms\t%s ms\t\n", thousands(seedLoadP99Ms), thousands(p99.Milliseconds()))
	fmt.Fprintf(tw, "run time\t%.1f s\t%.1f s\t\n", seedLoadRunSeconds, elapsed.Seconds())
	_ = tw.Flush()
	fmt.Fprintf(stdout, "\nLatency is the time from sending POST /v1/holds to its 201 or 402 (p50 %s, p95 %s, p99 %s).\n",
		round(p50), round(p95), round(p99))
	fmt.Fprintln(stdout, "The seed's figures come from a laptop against a cloud development deployment;")
	fmt.Fprintf(stdout, "Ferry's from this machine against %s.\n", c.base)
	if waits > 0 {
		fmt.Fprintf(stdout, "Jobs waited %d times on 429/503 with Retry-After and repeated the same key.\n", waits)
	}

	wantAdmitted := int64(*jobs)
	if *limit / *estimate < wantAdmitted {
		wantAdmitted = *limit / *estimate
	}
	var problems []string
	if int64(admitted) != wantAdmitted || refused != *jobs-int(wantAdmitted) || failed != 0 {
		problems = append(problems, fmt.Sprintf("admitted %d, refused %d, failed %d; expected %d, %d, 0",
			admitted, refused, failed, wantAdmitted, *jobs-int(wantAdmitted)))
	}
	if used != wantAdmitted**estimate || held != 0 {
		problems = append(problems, fmt.Sprintf("usage says used %d, held %d; expected %d and 0", used, held, wantAdmitted**estimate))
	}
	return labVerdict(stdout, problems, failures)
}

// labVerdict prints the outcome and fails the command when Ferry's counts differ from the
// expected ones.
func labVerdict(stdout io.Writer, problems []string, failures []error) error {
	const shownFailures = 5
	for i, err := range failures {
		if i == shownFailures {
			fmt.Fprintf(stdout, "  … and %d more failures\n", len(failures)-shownFailures)
			break
		}
		fmt.Fprintf(stdout, "  failure: %v\n", err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("the outcome differs from the expected one: %s", strings.Join(problems, "; "))
	}
	fmt.Fprintln(stdout, "\nOK: Ferry's outcome is the expected one.")
	return nil
}

// percentile is the nearest-rank percentile p of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d
}
