// Package lab runs Ferry's reference scenarios (DESIGN.md §3) against a running stack: each lab
// creates its own fresh account through the operator route, drives the scenario over the HTTP API
// and compares Ferry's counts with the figures of the write-up the scenario comes from. A lab
// takes a base URL and an operator key and returns a structured Result, which the CLI prints as a
// table and an operator console can show as it likes.
package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ferrymeter/ferry/internal/operator/figures"
)

// Config is where and as whom a lab runs.
type Config struct {
	// BaseURL is Ferry's base URL: a running ferry dev or a deployed stack.
	BaseURL string
	// OperatorKey creates the lab's account.
	OperatorKey string
	// Progress, when set, receives a progress line while a long lab runs.
	Progress io.Writer
}

// ErrNeedsDev: the lab steers one of ferry dev's local stand-ins (the Kinde signer, the crash
// injector), which the stack it was run against does not have.
var ErrNeedsDev = errors.New("the lab needs ferry dev's local stand-ins")

// Lab is one reference scenario.
type Lab struct {
	Name    string
	Summary string
}

// Labs lists the reference scenarios.
var Labs = []Lab{
	{Name: "holds-five", Summary: "five jobs of 40,000 start at once against 100,000: a plain check vs holds"},
	{Name: "holds-load", Summary: "many jobs, some at a time, against room for a fixed number: admissions and latency"},
	{Name: "reconcile", Summary: "late usage after the last report: under_billed, repaired from the ledger, read back, proven (needs ferry dev's stand-ins)"},
	{Name: "webhooks-nine", Summary: "nine Kinde deliveries of three events, one stopped half way: Ferry's inbox vs a naive handler (needs ferry dev)"},
}

// Result is what one lab measured.
type Result struct {
	Lab string
	// Intro says what ran, against what.
	Intro string
	// Columns, when set, head the figure columns (default "seed (Earmark)", "Ferry").
	Columns []string
	// Rows set Ferry's figures beside the write-up's.
	Rows []Row
	// More, when set, holds each row's figures (More[i] for Rows[i]) of the columns past the
	// second.
	More [][]string
	// Notes explain the figures.
	Notes []string
	// Failures are the errors of jobs that neither ran nor were refused.
	Failures []string
	// Problems are the ways Ferry's outcome differs from the expected one; none means it is the
	// expected one.
	Problems []string
	// AccountID and APIKey name the lab's account, for a closer look.
	AccountID string
	APIKey    string
	// Limit is the limit the lab's jobs ran against (holds-five).
	Limit int64
	// Jobs are each job's outcome, plain check and holds side by side (holds-five).
	Jobs []Job
	// Steps are the deliveries one by one, with what each left behind (webhooks-nine).
	Steps []Step
}

// Job is one job of holds-five: what the plain check let it do, and what holds did.
type Job struct {
	Key string
	// PlainRan and PlainSpent are the plain check's: it saw room and ran, spending its estimate.
	PlainRan   bool
	PlainSpent int64
	// Outcome is what the hold came to ("admitted", "refused" or "failed"), Spent what the job
	// was charged at settlement, and Detail what Ferry answered a refused or failed job.
	Outcome string
	Spent   int64
	Detail  string
}

// Step is one delivery of webhooks-nine and the account as it stood once the delivery was
// answered and Ferry's worker had done what it would do with it, beside the naive handler's.
type Step struct {
	N int
	// Event is the delivery's event (PC, PAY or CAN), Type its Kinde type.
	Event string
	Type  string
	// BillingEventID is the stored event the delivery landed on; Duplicate is true for a copy.
	BillingEventID string
	Duplicate      bool
	// Note says what is special about the delivery (the killed apply, the late cancellation).
	Note string
	// Ferry is Ferry's account after the delivery; Naive the naive handler's.
	Ferry Standing
	Naive Standing
	// Status is the stored event's status once Ferry's worker settled it (or stopped on it).
	Status string
}

// Standing is an account's plan and credits balance (the cycle's credits limit).
type Standing struct {
	Plan    string
	Credits int64
}

// Row is one figure, the write-up's and Ferry's.
type Row struct {
	Name  string
	Seed  string
	Ferry string
}

// OK reports whether Ferry's outcome is the expected one.
func (r Result) OK() bool { return len(r.Problems) == 0 }

// Err is nil when Ferry's outcome is the expected one, and otherwise says how it differs.
func (r Result) Err() error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("the outcome differs from the expected one: %s", strings.Join(r.Problems, "; "))
}

// shownFailures bounds the failures Print lists.
const shownFailures = 5

// Print writes the result as the CLI shows it: the intro, the table, the notes, the first
// failures and the verdict.
func (r Result) Print(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n", r.Intro)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', tabwriter.AlignRight)
	columns := r.Columns
	if len(columns) == 0 {
		columns = []string{"seed (Earmark)", "Ferry"}
	}
	fmt.Fprintf(tw, "\t%s\t\n", strings.Join(columns, "\t"))
	for i, row := range r.Rows {
		cells := []string{row.Name, row.Seed, row.Ferry}
		if i < len(r.More) {
			cells = append(cells, r.More[i]...)
		}
		for len(cells) < len(columns)+1 {
			cells = append(cells, "")
		}
		fmt.Fprintf(tw, "%s\t\n", strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
	for _, n := range r.Notes {
		fmt.Fprintln(w, n)
	}
	for i, f := range r.Failures {
		if i == shownFailures {
			fmt.Fprintf(w, "  … and %d more failures\n", len(r.Failures)-shownFailures)
			break
		}
		fmt.Fprintf(w, "  failure: %s\n", f)
	}
	if r.OK() {
		fmt.Fprintln(w, "\nOK: Ferry's outcome is the expected one.")
	}
}

// Bounds of the lab client.
const (
	requestTimeout = 30 * time.Second
	// maxRetries bounds how often a job repeats a request answered 429 or 503, with the same
	// key, as a client should.
	maxRetries = 8
	// maxRetryWait bounds one wait before a repeat.
	maxRetryWait  = time.Minute
	progressEvery = time.Second
)

// labClient talks to Ferry's HTTP API.
type labClient struct {
	base     string
	adminKey string
	http     *http.Client
}

func newLabClient(cfg Config, concurrency int) *labClient {
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        2 * concurrency,
		MaxIdleConnsPerHost: concurrency,
		IdleConnTimeout:     90 * time.Second,
	}
	return &labClient{
		base:     strings.TrimRight(cfg.BaseURL, "/"),
		adminKey: cfg.OperatorKey,
		http:     &http.Client{Transport: transport, Timeout: requestTimeout},
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
		if err != nil || attempt == maxRetries ||
			(a.status != http.StatusTooManyRequests && a.status != http.StatusServiceUnavailable) {
			return a, waits, latency, err
		}
		secs, perr := strconv.Atoi(a.header.Get("Retry-After"))
		if perr != nil {
			return a, waits, latency, nil
		}
		waits++
		wait := min(time.Duration(secs)*time.Second, maxRetryWait)
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

// LoadParams shape the holds-load lab.
type LoadParams struct {
	Jobs        int
	Estimate    int64
	Limit       int64
	Concurrency int
}

// DefaultLoad is the write-up's run: 120 jobs of 1,000 tokens, 50 at a time, against 100,000.
var DefaultLoad = LoadParams{Jobs: defaultLoadJobs, Estimate: defaultLoadEstimate, Limit: defaultLoadLimit, Concurrency: defaultLoadConcurrent}

// HoldsFive runs five jobs of 40,000 tokens at the same moment against a limit of 100,000: first
// as a plain check (read the usage, run if there is room), then with holds.
func HoldsFive(ctx context.Context, cfg Config) (Result, error) {
	c := newLabClient(cfg, seedFiveJobs)
	id, apiKey, err := c.createAccount(ctx, "lab-five", seedFiveLimit)
	if err != nil {
		return Result{}, err
	}
	res := Result{
		Lab: "holds-five", AccountID: id, APIKey: apiKey,
		Intro: fmt.Sprintf("Five jobs of %s tokens start at the same moment; account %s has a limit of %s.",
			figures.Thousands(seedFiveEstimate), id, figures.Thousands(seedFiveLimit)),
	}

	// The plain check: Ferry has no route that spends without a hold, so this is the check as
	// a client would write it — every job reads GET /v1/usage at the same moment and runs if it
	// sees room. Its spending is tallied here, client-side: nothing is held, so nothing stops
	// the jobs that all saw the same remaining capacity.
	var mu sync.Mutex
	plainStarted, plainSpent := 0, int64(0)
	var plainErr error
	jobs := make([]Job, seedFiveJobs)
	start(seedFiveJobs, func(i int) {
		u, err := c.usage(ctx, apiKey)
		mu.Lock()
		defer mu.Unlock()
		jobs[i].Key = fmt.Sprintf("five-job-%d", i)
		if err != nil {
			plainErr = err
			return
		}
		if u.body["remaining"] == nil || u.num("remaining") >= seedFiveEstimate {
			plainStarted++
			plainSpent += seedFiveEstimate
			jobs[i].PlainRan, jobs[i].PlainSpent = true, seedFiveEstimate
		}
	})
	if plainErr != nil {
		return Result{}, plainErr
	}

	// Holds: the same five jobs reserve at the same moment; admitted jobs run in steps and settle.
	admitted, refused, failed := 0, 0, 0
	var refusals []string
	start(seedFiveJobs, func(i int) {
		r := c.runJob(ctx, apiKey, fmt.Sprintf("five-job-%d", i), seedFiveEstimate, fiveStepsPerJob)
		mu.Lock()
		defer mu.Unlock()
		switch r.outcome {
		case jobAdmitted:
			admitted++
			jobs[i].Outcome, jobs[i].Spent = "admitted", seedFiveEstimate
		case jobRefused:
			refused++
			refusals = append(refusals, r.refusal)
			jobs[i].Outcome, jobs[i].Detail = "refused", r.refusal
		default:
			failed++
			res.Failures = append(res.Failures, r.err.Error())
			jobs[i].Outcome, jobs[i].Detail = "failed", r.err.Error()
		}
	})
	res.Jobs, res.Limit = jobs, seedFiveLimit
	u, err := c.usage(ctx, apiKey)
	if err != nil {
		return Result{}, err
	}
	used, held := u.num("used"), u.num("held")

	k := figures.Thousands
	res.Rows = []Row{
		{"plain check: jobs started", strconv.Itoa(seedFiveJobs), strconv.Itoa(plainStarted)},
		{"plain check: tokens spent", k(seedFivePlainSpent), k(plainSpent)},
		{"holds: admitted", strconv.Itoa(seedFiveAdmitted), strconv.Itoa(admitted)},
		{"holds: refused", strconv.Itoa(seedFiveRefused), strconv.Itoa(refused)},
		{"holds: failed", "0", strconv.Itoa(failed)},
		{"holds: tokens spent (GET /v1/usage used)", k(seedFiveHoldsSpent), k(used)},
		{"holds: still held (GET /v1/usage held)", "0", k(held)},
	}
	res.Notes = []string{
		"\nThe plain check is a real race of concurrent GET /v1/usage readers that each then run;",
		"its spending is a client-side tally (Ferry has no route that spends without a hold).",
	}
	for i, r := range refusals {
		res.Notes = append(res.Notes, fmt.Sprintf("Refused job %d was told: %q", i+1, r))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("Account %s, API key %s (GET /v1/usage?feature=tokens to check).", id, apiKey))

	wantAdmitted := min(seedFiveJobs, int(seedFiveLimit/seedFiveEstimate))
	if admitted != wantAdmitted || refused != seedFiveJobs-wantAdmitted || failed != 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("holds admitted %d, refused %d, failed %d; expected %d, %d, 0",
			admitted, refused, failed, wantAdmitted, seedFiveJobs-wantAdmitted))
	}
	if used != int64(wantAdmitted)*seedFiveEstimate || held != 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("usage says used %d, held %d; expected %d and 0", used, held, int64(wantAdmitted)*seedFiveEstimate))
	}
	return res, nil
}

// HoldsLoad runs p.Jobs jobs of p.Estimate tokens, p.Concurrency at a time, against a limit of
// p.Limit, and measures admission latency.
func HoldsLoad(ctx context.Context, cfg Config, p LoadParams) (Result, error) {
	if p.Jobs < 1 || p.Estimate < 1 || p.Limit < 0 || p.Concurrency < 1 {
		return Result{}, errors.New("jobs, estimate and concurrency must be positive, limit not negative")
	}
	c := newLabClient(cfg, p.Concurrency)
	id, apiKey, err := c.createAccount(ctx, "lab-load", p.Limit)
	if err != nil {
		return Result{}, err
	}
	res := Result{
		Lab: "holds-load", AccountID: id, APIKey: apiKey,
		Intro: fmt.Sprintf("%d jobs of %s tokens, %d at a time, against account %s with a limit of %s.",
			p.Jobs, figures.Thousands(p.Estimate), p.Concurrency, id, figures.Thousands(p.Limit)),
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}

	var (
		mu                        sync.Mutex
		admitted, refused, failed int
		waits, done               int
		latencies                 []time.Duration
		next                      = make(chan int)
		wg                        sync.WaitGroup
		began                     = time.Now()
		stopProgress              = make(chan struct{})
		progressDone              = make(chan struct{})
	)
	go func() {
		defer close(progressDone)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				mu.Lock()
				fmt.Fprintf(progress, "\r  %d/%d jobs done: %d admitted, %d refused, %d failed", done, p.Jobs, admitted, refused, failed)
				mu.Unlock()
			}
		}
	}()
	for range p.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := c.runJob(ctx, apiKey, fmt.Sprintf("load-job-%d", i), p.Estimate, loadStepsPerJob)
				mu.Lock()
				done++
				waits += r.waits
				switch r.outcome {
				case jobAdmitted:
					admitted++
				case jobRefused:
					refused++
				default:
					failed++
					res.Failures = append(res.Failures, r.err.Error())
				}
				if r.outcome != jobFailed {
					latencies = append(latencies, r.latency)
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range p.Jobs {
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
	fmt.Fprintf(progress, "\r  %d/%d jobs done.%s\n", done, p.Jobs, strings.Repeat(" ", 40))
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}

	u, err := c.usage(ctx, apiKey)
	if err != nil {
		return Result{}, err
	}
	used, held := u.num("used"), u.num("held")
	p50, p95, p99 := figures.Percentile(latencies, 50), figures.Percentile(latencies, 95), figures.Percentile(latencies, 99)

	k := figures.Thousands
	ms := func(d time.Duration) string { return k(d.Milliseconds()) + " ms" }
	res.Rows = []Row{
		{"admitted", strconv.Itoa(seedLoadAdmitted), strconv.Itoa(admitted)},
		{"refused", strconv.Itoa(seedLoadRefused), strconv.Itoa(refused)},
		{"failed", strconv.Itoa(seedLoadFailed), strconv.Itoa(failed)},
		{"tokens spent (GET /v1/usage used)", k(seedLoadSpent), k(used)},
		{"still held at the end", "0", k(held)},
		{"admission latency p50", k(seedLoadP50Ms) + " ms", ms(p50)},
		{"admission latency p95", k(seedLoadP95Ms) + " ms", ms(p95)},
		{"admission latency p99", k(seedLoadP99Ms) + " ms", ms(p99)},
		{"run time", fmt.Sprintf("%.1f s", seedLoadRunSeconds), fmt.Sprintf("%.1f s", elapsed.Seconds())},
	}
	res.Notes = []string{
		fmt.Sprintf("\nLatency is the time from sending POST /v1/holds to its 201 or 402 (p50 %s, p95 %s, p99 %s).",
			figures.Round(p50), figures.Round(p95), figures.Round(p99)),
		"The seed's figures come from a laptop against a cloud development deployment;",
		fmt.Sprintf("Ferry's from this machine against %s.", c.base),
	}
	if waits > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("Jobs waited %d times on 429/503 with Retry-After and repeated the same key.", waits))
	}

	wantAdmitted := int64(p.Jobs)
	if p.Limit/p.Estimate < wantAdmitted {
		wantAdmitted = p.Limit / p.Estimate
	}
	if int64(admitted) != wantAdmitted || refused != p.Jobs-int(wantAdmitted) || failed != 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("admitted %d, refused %d, failed %d; expected %d, %d, 0",
			admitted, refused, failed, wantAdmitted, p.Jobs-int(wantAdmitted)))
	}
	if used != wantAdmitted*p.Estimate || held != 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("usage says used %d, held %d; expected %d and 0", used, held, wantAdmitted*p.Estimate))
	}
	return res, nil
}
