package ferry

// End-to-end tests against a running Ferry (ferry dev) through the fault-injecting proxy:
// `ferry faultproxy -- go test -run E2E` sets FERRY_SDK_URL (the proxy, where the client under
// test sends) and FERRY_SDK_STACK_URL (the stack, for set-up and checks); make test-sdk starts
// both. Without them these tests skip.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// e2eSettle bounds how long a test waits for the worker to bill what was queued.
const e2eSettle = 3 * time.Minute

type e2eEnv struct {
	proxy, stack, adminKey string
}

func e2e(t *testing.T) e2eEnv {
	t.Helper()
	env := e2eEnv{proxy: os.Getenv("FERRY_SDK_URL"), stack: os.Getenv("FERRY_SDK_STACK_URL"), adminKey: os.Getenv("FERRY_ADMIN_KEY")}
	if env.proxy == "" || env.stack == "" {
		t.Skip("FERRY_SDK_URL and FERRY_SDK_STACK_URL name no stack (make test-sdk runs these against ferry dev)")
	}
	if env.adminKey == "" {
		env.adminKey = "dev-admin-key"
	}
	return env
}

// retryCounter is a slog handler that counts the client's retries.
type retryCounter struct{ n atomic.Int64 }

func (r *retryCounter) Enabled(context.Context, slog.Level) bool { return true }
func (r *retryCounter) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message == "ferry: retrying" {
		r.n.Add(1)
	}
	return nil
}
func (r *retryCounter) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *retryCounter) WithGroup(string) slog.Handler      { return r }

// account creates a fresh account on the stack and returns a client of it through the proxy.
func (env e2eEnv) account(t *testing.T, prefix string, limits Limits, retries *retryCounter) (*Client, *Client) {
	t.Helper()
	return env.accountNamed(t, newAccountID(prefix), limits, retries)
}

// newAccountID is prefix and 8 random hex digits: an account no other run made.
func newAccountID(prefix string) string {
	var b [4]byte
	rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// accountNamed creates the free account id on the stack and returns a client of it through the
// proxy and one straight to the stack.
func (env e2eEnv) accountNamed(t *testing.T, id string, limits Limits, retries *retryCounter) (*Client, *Client) {
	t.Helper()
	op, err := New(Config{BaseURL: env.stack, APIKey: env.adminKey})
	if err != nil {
		t.Fatal(err)
	}
	plan := "free"
	acct, err := op.CreateAccount(context.Background(), CreateAccountRequest{Id: id, Plan: &plan, Limits: &limits})
	if err != nil {
		t.Fatalf("create account %s: %v", id, err)
	}
	cfg := Config{BaseURL: env.proxy, APIKey: acct.ApiKey, Timeout: 3 * time.Second, MaxAttempts: 12, MaxWait: 10 * time.Second,
		Logger: slog.New(retries)}
	through, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.BaseURL = env.stack
	direct, _ := New(cfg)
	return through, direct
}

func limitOf(n int) *Limit { return &n }

// waitUsed polls the stack's usage until used reaches want (or the wait ends), then reads it
// once more a moment later, so an over-count would show.
func waitUsed(t *testing.T, c *Client, feature string, want int) *Usage {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(e2eSettle)
	for {
		u, err := c.Usage(ctx, GetUsageParams{Feature: &feature})
		if err != nil {
			t.Fatal(err)
		}
		if u.Used >= want || time.Now().After(deadline) {
			time.Sleep(time.Second)
			u, err = c.Usage(ctx, GetUsageParams{Feature: &feature})
			if err != nil {
				t.Fatal(err)
			}
			return u
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func TestE2E_BatcherThroughFaults_UsageExact(t *testing.T) {
	env := e2e(t)
	const events = 5000
	retries := &retryCounter{}
	client, direct := env.account(t, "sdk-go-batch", Limits{"events": limitOf(events * 2)}, retries)
	b, err := client.NewBatcher(BatcherConfig{MaxAge: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	for i := range events {
		if _, err := b.Add(ctx, CloudEvent{Source: "/sdk/go/e2e", Type: "api.call", Data: map[string]int{"n": i}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	sent := time.Since(start)
	u := waitUsed(t, direct, "events", events)
	fmt.Printf("go e2e batcher: %d events sent in %s with %d retries; usage %d (want %d)\n", events, sent.Round(time.Millisecond), retries.n.Load(), u.Used, events)
	if u.Used != events {
		t.Fatalf("usage %d after %d events, want exactly %d", u.Used, events, events)
	}
	// The usage query, through the faults too, folds the same events by UTC day: its rows add up
	// to the ledger's figure (they are written in the claims that billed the events).
	days, total := queryDays(t, client, start, events)
	fmt.Printf("go e2e usage query: %d DAY rows totalling %d (want %d)\n", days, total, events)
	if total != events {
		t.Fatalf("the usage query's rows total %d, want exactly %d", total, events)
	}
}

// queryDays reads the account's events meter by UTC day, from the day of since to the day after
// now, until its rows total want (or the wait ends: its reads are eventually consistent), and
// returns how many rows it read and their total.
func queryDays(t *testing.T, c *Client, since time.Time, want int) (int, int) {
	t.Helper()
	const day = 24 * time.Hour
	from := since.UTC().Truncate(day)
	deadline := time.Now().Add(e2eSettle)
	for {
		q, err := c.QueryUsage(context.Background(), QueryUsageParams{
			Meter: "events", Window: QueryUsageParamsWindowDAY, From: from, To: time.Now().UTC().Truncate(day).Add(day),
		})
		if err != nil {
			t.Fatalf("query usage: %v", err)
		}
		total := 0
		for _, row := range q.Rows {
			total += row.Value
		}
		if total >= want || time.Now().After(deadline) {
			return len(q.Rows), total
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func TestE2E_ConcurrentJobsUnderHolds_EndExact(t *testing.T) {
	env := e2e(t)
	const (
		jobs     = 20
		estimate = 1000
		limit    = 10 * estimate
	)
	retries := &retryCounter{}
	client, direct := env.account(t, "sdk-go-holds", Limits{"tokens": limitOf(limit)}, retries)
	var (
		wg              sync.WaitGroup
		admitted, spent atomic.Int64
		refused         atomic.Int64
		// decided is done when every job's admission is decided: the admitted jobs run until
		// then, so none settles (and frees room) before the last admission, and exactly
		// limit/estimate are admitted.
		decided sync.WaitGroup
	)
	decided.Add(jobs)
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			use := 500 + 17*i // what the job reports; every job fits its hold
			ran := false
			_, err := client.RunUnderHold(context.Background(), CreateHoldRequest{Key: fmt.Sprintf("job-%d", i), Feature: "tokens", Amount: estimate},
				func(ctx context.Context, j *Job) (int, error) {
					ran = true
					admitted.Add(1)
					decided.Done()
					decided.Wait()
					if _, err := j.Charge(ctx, "step-1", use/2); err != nil {
						return 0, err
					}
					return use, nil
				})
			if !ran {
				decided.Done()
			}
			var lr *LimitReachedError
			switch {
			case errors.As(err, &lr):
				refused.Add(1)
			case err != nil:
				t.Errorf("job %d: %v", i, err)
			default:
				spent.Add(int64(use))
			}
		}()
	}
	wg.Wait()
	feature := "tokens"
	u, err := direct.Usage(context.Background(), GetUsageParams{Feature: &feature})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("go e2e holds: %d jobs, %d admitted, %d refused, %d retries; used %d (want %d), held %d\n",
		jobs, admitted.Load(), refused.Load(), retries.n.Load(), u.Used, spent.Load(), u.Held)
	if admitted.Load() != limit/estimate || refused.Load() != jobs-limit/estimate {
		t.Fatalf("admitted %d, refused %d; want %d and %d", admitted.Load(), refused.Load(), limit/estimate, jobs-limit/estimate)
	}
	if int64(u.Used) != spent.Load() || u.Held != 0 {
		t.Fatalf("used %d, held %d; want %d and 0", u.Used, u.Held, spent.Load())
	}
}

func TestE2E_CloseAfterBurst_LosesNothing(t *testing.T) {
	env := e2e(t)
	const (
		workers = 16
		each    = 125
	)
	retries := &retryCounter{}
	client, direct := env.account(t, "sdk-go-burst", Limits{"events": limitOf(10 * workers * each)}, retries)
	// An age far beyond the test: only size and Close send.
	b, err := client.NewBatcher(BatcherConfig{MaxAge: time.Hour, Buffer: workers * each})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := b.Add(context.Background(), CloudEvent{Source: "/sdk/go/burst", Type: "api.call"}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("close after the burst: %v", err)
	}
	u := waitUsed(t, direct, "events", workers*each)
	fmt.Printf("go e2e burst: %d events added by %d goroutines, then Close; %d retries; usage %d\n", workers*each, workers, retries.n.Load(), u.Used)
	if u.Used != workers*each {
		t.Fatalf("usage %d, want %d", u.Used, workers*each)
	}
}
