package limits_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	standin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
)

func TestFreshnessOf(t *testing.T) {
	read := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		at   time.Time
		want limits.Freshness
	}{
		{"never read", time.Time{}, limits.Missing},
		{"just read", read, limits.Fresh},
		{"59 s old is fresh", read.Add(59 * time.Second), limits.Fresh},
		{"60 s old is stale", read.Add(time.Minute), limits.Stale},
		{"10 min old is still usable while the provider fails", read.Add(10 * time.Minute), limits.Stale},
		{"past 10 min is expired", read.Add(10*time.Minute + time.Millisecond), limits.Expired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			readAt := read
			now := c.at
			if c.at.IsZero() {
				readAt, now = time.Time{}, read
			}
			if got := limits.FreshnessOf(readAt, now); got != c.want {
				t.Errorf("FreshnessOf = %v, want %v", got, c.want)
			}
		})
	}
}

type clock struct{ t time.Time }

func (c *clock) Now() time.Time          { return c.t }
func (c *clock) Advance(d time.Duration) { c.t = c.t.Add(d) }

type fixture struct {
	stand   *standin.Server
	clock   *clock
	counter *metrics.Counter
	source  *limits.Cached
	acct    accounts.Account
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	stand := standin.New("ferry", "s3cret")
	tokens := int64(100_000)
	stand.SetEntitlements("acct_1", standin.Limit("tokens", &tokens))
	srv := httptest.NewServer(stand)
	t.Cleanup(srv.Close)
	client, err := kinde.New(kinde.Config{Domain: srv.URL, ClientID: "ferry", ClientSecret: "s3cret", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{stand: stand, clock: &clock{time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)}, counter: metrics.NewCounter()}
	f.source = &limits.Cached{
		Fetch: client, Metrics: f.counter, Now: f.clock.Now,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	f.acct = accounts.Account{ID: "acct_1", Known: true}
	return f
}

func (f *fixture) limit(t *testing.T, feature string) (plans.Limit, error) {
	t.Helper()
	return f.source.Limit(context.Background(), f.acct, feature)
}

func TestCached_AsksTheProviderAtMostOnceAMinute(t *testing.T) {
	f := newFixture(t)
	for range 10 {
		if l, err := f.limit(t, "tokens"); err != nil || l != plans.Max(100_000) {
			t.Fatalf("limit = %v, %v", l, err)
		}
		f.clock.Advance(5 * time.Second)
	}
	if calls := f.stand.Counts().Entitlements; calls != 1 {
		t.Errorf("%d provider calls in 50 s, want 1", calls)
	}
	f.clock.Advance(15 * time.Second)
	if _, err := f.limit(t, "tokens"); err != nil {
		t.Fatal(err)
	}
	if calls := f.stand.Counts().Entitlements; calls != 2 {
		t.Errorf("%d provider calls after a minute, want 2", calls)
	}
}

func TestCached_FeatureWithoutEntitlementHasLimitZero(t *testing.T) {
	f := newFixture(t)
	if l, err := f.limit(t, "events"); err != nil || l != plans.Max(0) {
		t.Errorf("limit = %v, %v; want 0", l, err)
	}
}

// The provider goes down: the last limit is used stale for up to 10 minutes, then admissions
// fail closed; when the provider answers again, limits are fresh again.
func TestCached_ProviderDown_StaleThenFailClosedThenRecovers(t *testing.T) {
	f := newFixture(t)
	if _, err := f.limit(t, "tokens"); err != nil {
		t.Fatal(err)
	}
	f.stand.SetMode(standin.Fail)

	f.clock.Advance(2 * time.Minute)
	if l, err := f.limit(t, "tokens"); err != nil || l != plans.Max(100_000) {
		t.Fatalf("2 min into the outage: %v, %v; want the stale limit", l, err)
	}
	if f.counter.Get(metrics.LimitsStale) != 1 {
		t.Errorf("stale use not counted")
	}
	// A failing provider is not asked again on every admission.
	calls := f.stand.Counts().Entitlements
	f.clock.Advance(time.Second)
	if _, err := f.limit(t, "tokens"); err != nil {
		t.Fatal(err)
	}
	if got := f.stand.Counts().Entitlements; got != calls {
		t.Errorf("the failing provider was asked again after 1 s")
	}

	f.clock.Advance(8*time.Minute + 2*time.Second) // 10 min 3 s after the last good read
	_, err := f.limit(t, "tokens")
	if !limits.IsUnknown(err) {
		t.Fatalf("past the stale allowance: err = %v, want an unknown limit", err)
	}
	if f.counter.Get(metrics.LimitsUnknown) != 1 {
		t.Errorf("fail-closed refusal not counted")
	}

	f.stand.SetMode(standin.OK)
	f.clock.Advance(10 * time.Second)
	if l, err := f.limit(t, "tokens"); err != nil || l != plans.Max(100_000) {
		t.Errorf("after recovery: %v, %v", l, err)
	}
}

func TestCached_NeverRead_ProviderDown_FailsClosedAtOnce(t *testing.T) {
	f := newFixture(t)
	f.stand.SetMode(standin.Fail)
	if _, err := f.limit(t, "tokens"); !limits.IsUnknown(err) {
		t.Errorf("err = %v, want an unknown limit", err)
	}
}

func TestCached_RateLimited_WaitsAsTold(t *testing.T) {
	f := newFixture(t)
	if _, err := f.limit(t, "tokens"); err != nil {
		t.Fatal(err)
	}
	f.stand.SetMode(standin.RateLimit) // RateLimit-Reset: 30
	f.clock.Advance(time.Minute)
	if _, err := f.limit(t, "tokens"); err != nil {
		t.Fatalf("stale limit refused: %v", err)
	}
	calls := f.stand.Counts().Entitlements
	f.stand.SetMode(standin.OK)
	f.clock.Advance(20 * time.Second)
	if _, err := f.limit(t, "tokens"); err != nil {
		t.Fatal(err)
	}
	if got := f.stand.Counts().Entitlements; got != calls {
		t.Errorf("asked again 20 s after a 429 that said 30 s")
	}
	f.clock.Advance(11 * time.Second)
	if _, err := f.limit(t, "tokens"); err != nil {
		t.Fatal(err)
	}
	if got := f.stand.Counts().Entitlements; got != calls+1 {
		t.Errorf("not asked again after the 429's wait")
	}
}

func TestPlan_UsesTheAccountsOverrideThenItsPlan(t *testing.T) {
	src := limits.Plan{Catalog: plans.Default()}
	acct := accounts.Account{ID: "a", Plan: "free", Limits: map[string]plans.Limit{"tokens": plans.Max(7)}}
	if l, _ := src.Limit(context.Background(), acct, "tokens"); l != plans.Max(7) {
		t.Errorf("override: %v", l)
	}
	if l, _ := src.Limit(context.Background(), acct, "events"); l != plans.Max(1000) {
		t.Errorf("plan: %v", l)
	}
}
