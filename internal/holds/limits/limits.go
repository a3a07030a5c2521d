// Package limits answers "what is this account's limit for this feature?" for the next
// admission. The answer comes from the account's plan (Ferry's own catalog and overrides) or from
// the billing provider's entitlements. A provider's answer is cached: used as it is while fresh,
// used stale for a bounded time while the provider cannot be read, and after that refused — a
// gate that cannot see its limit fails closed, because a wrong refusal costs a short delay and a
// wrong admission costs money.
package limits

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Source gives the limit the next admission for (account, feature) is held to. A limit read is
// never applied to work already admitted: a plan change reaches the next admission only.
type Source interface {
	Limit(ctx context.Context, acct accounts.Account, feature string) (plans.Limit, error)
}

// Sources a deployment can select (FERRY_LIMITS_SOURCE).
const (
	SourcePlan  = "plan"
	SourceKinde = "kinde"
)

// Plan reads limits from the account's plan and its overrides. It reads no network: the account
// was loaded with the request.
type Plan struct{ Catalog plans.Catalog }

// Limit implements Source.
func (p Plan) Limit(_ context.Context, acct accounts.Account, feature string) (plans.Limit, error) {
	return acct.Limit(feature, p.Catalog), nil
}

// UnknownError is a limit that cannot be known: the provider has been unreadable for longer than
// the stale allowance (or was never read). Admissions fail closed on it.
type UnknownError struct {
	CustomerID string
	Reason     string
}

func (e *UnknownError) Error() string { return e.Reason }

// Kind implements problem.Error: without a limit Ferry cannot promise anything (fail closed).
func (e *UnknownError) Kind() problem.Kind { return problem.LimitUnknown }

// IsUnknown reports whether err is an UnknownError.
func IsUnknown(err error) bool {
	var u *UnknownError
	return errors.As(err, &u)
}

// Fetcher reads a customer's entitlements from the provider: the limit of every feature the
// customer is entitled to. A feature missing from the answer is not included in the plan.
type Fetcher interface {
	Limits(ctx context.Context, customerID string) (map[string]plans.Limit, error)
}

// RetryAfterError is implemented by provider errors that say when to ask again (HTTP 429).
type RetryAfterError interface {
	error
	RetryAfter() time.Duration
}

// Cache policy and bounds.
const (
	// FreshFor is how long a provider's answer is used without asking again: the provider is
	// asked at most once a minute per customer while it answers.
	FreshFor = time.Minute
	// StaleFor is how old an answer may be and still be used while the provider fails. After it,
	// admissions are refused until the provider answers.
	StaleFor = 10 * time.Minute
	// retryFailedAfter spaces out calls to a failing provider, so that a provider outage does not
	// add a slow failing call to every admission.
	retryFailedAfter = 5 * time.Second
	// maxRetryAfter bounds how long a provider's Retry-After can silence it.
	maxRetryAfter = time.Minute
	// fetchTimeout bounds one provider call, which an admission waits for.
	fetchTimeout = 3 * time.Second
	// maxCustomers bounds the cache; past it, an arbitrary entry is dropped.
	maxCustomers = 10_000
)

// Freshness is how usable a cached answer is.
type Freshness int

// Freshness values.
const (
	// Missing: never read (or dropped).
	Missing Freshness = iota
	// Fresh: use it without asking the provider.
	Fresh
	// Stale: ask the provider; use it only if the provider cannot answer.
	Stale
	// Expired: too old to use; without a new answer the limit is unknown.
	Expired
)

// FreshnessOf judges an answer read at readAt (zero: never) at now.
func FreshnessOf(readAt, now time.Time) Freshness {
	switch age := now.Sub(readAt); {
	case readAt.IsZero():
		return Missing
	case age < FreshFor:
		return Fresh
	case age <= StaleFor:
		return Stale
	default:
		return Expired
	}
}

// Cached is a Source over a provider's entitlements, cached per customer in the process.
type Cached struct {
	Fetch Fetcher
	// CustomerID maps an account to the provider's customer id; nil uses the account id.
	CustomerID func(accounts.Account) string
	Metrics    metrics.Recorder
	Log        *slog.Logger
	Now        func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
}

// entry is one customer's cached answer. Its mutex serialises the customer's provider calls, so
// concurrent admissions after expiry make one call, not one each.
type entry struct {
	mu      sync.Mutex
	limits  map[string]plans.Limit
	readAt  time.Time
	retryAt time.Time // no provider call before this, after a failure
	lastErr error
}

func (c *Cached) entry(customer string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*entry{}
	}
	e, ok := c.entries[customer]
	if !ok {
		if len(c.entries) >= maxCustomers {
			for k := range c.entries {
				delete(c.entries, k)
				break
			}
		}
		e = &entry{}
		c.entries[customer] = e
	}
	return e
}

// Limit implements Source.
func (c *Cached) Limit(ctx context.Context, acct accounts.Account, feature string) (plans.Limit, error) {
	customer := acct.ID
	if c.CustomerID != nil {
		customer = c.CustomerID(acct)
	}
	e := c.entry(customer)
	e.mu.Lock()
	defer e.mu.Unlock()

	now := c.Now()
	freshness := FreshnessOf(e.readAt, now)
	if freshness == Fresh {
		return limitOf(e.limits, feature), nil
	}
	if !now.Before(e.retryAt) {
		fetchCtx, cancel := context.WithTimeout(ctx, fetchTimeout)
		limits, err := c.Fetch.Limits(fetchCtx, customer)
		cancel()
		if err == nil {
			e.limits, e.readAt, e.retryAt, e.lastErr = limits, now, time.Time{}, nil
			return limitOf(limits, feature), nil
		}
		wait := retryFailedAfter
		var ra RetryAfterError
		if errors.As(err, &ra) {
			wait = min(max(wait, ra.RetryAfter()), maxRetryAfter)
		}
		e.retryAt, e.lastErr = now.Add(wait), err
		c.Log.Warn("entitlements read failed", "customer", customer, "retryInMs", wait.Milliseconds(), "err", err)
	}
	if freshness == Stale {
		c.Metrics.Count(metrics.LimitsStale, 1)
		return limitOf(e.limits, feature), nil
	}
	c.Metrics.Count(metrics.LimitsUnknown, 1)
	reason := fmt.Sprintf("The limit for %s cannot be read from the billing provider", feature)
	if freshness == Expired {
		reason += fmt.Sprintf(", and the last answer is %s old (stale answers are used for at most %s)", now.Sub(e.readAt).Truncate(time.Second), StaleFor)
	}
	return plans.Limit{}, &UnknownError{CustomerID: customer, Reason: reason + "; new holds are refused until it can be read."}
}

// limitOf is a feature's limit in an entitlements answer: a feature the customer is not entitled
// to has limit 0, as a plan that does not include a feature does.
func limitOf(limits map[string]plans.Limit, feature string) plans.Limit {
	if l, ok := limits[feature]; ok {
		return l
	}
	return plans.Max(0)
}
