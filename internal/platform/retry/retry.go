// Package retry is Ferry's one retry policy: a bounded number of laps with jittered, exponential
// backoff between them, and one classification of the errors worth another lap (throttles and
// conflicts, never a failed condition).
//
// A lap is not a blind repeat of the same call. Ferry's loops re-read durable state on every lap
// and decide from what they read — the event was billed meanwhile, the hold moved, the limit is
// reached — so a lap ends the loop with an answer, or asks for another lap with Again (back off
// first) or Reread (read again at once; the lap backs off itself, with Lap.Wait, when what it
// reads says the last write met a conflict). Every loop is bounded by its Policy and ends in
// ErrExhausted, which callers turn into a visible state.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Limits of the default policy.
const (
	// MaxTries bounds the laps of a loop on a contended row, the first included.
	MaxTries = 8
	// BackoffBase is the first backoff window; each lap doubles it.
	BackoffBase = 20 * time.Millisecond
	// BackoffCap bounds every backoff window.
	BackoffCap = time.Second
	// maxDoublings keeps the window's shift from overflowing for a policy with many tries.
	maxDoublings = 16
)

// Policy bounds one loop: how many laps it runs and how long it waits between them.
type Policy struct {
	// Tries is the most laps the loop runs, the first included.
	Tries int
	// Base is the first backoff window; Cap bounds every window.
	Base time.Duration
	Cap  time.Duration
}

// Contended is the policy of keyed writes on contended rows: MaxTries laps, with full-jitter
// backoff from BackoffBase up to BackoffCap.
var Contended = Policy{Tries: MaxTries, Base: BackoffBase, Cap: BackoffCap}

// WithTries is the policy with another bound on its laps.
func (p Policy) WithTries(tries int) Policy {
	p.Tries = tries
	return p
}

// Backoff is the wait after lap attempt (0-based): full jitter over an exponential window
// capped at p.Cap, so that contenders that failed together do not retry together.
func (p Policy) Backoff(attempt int) time.Duration {
	window := p.Base << min(max(attempt, 0), maxDoublings)
	if window > p.Cap || window <= 0 {
		window = p.Cap
	}
	return time.Duration(rand.Int64N(int64(window)) + 1)
}

// sleepKey carries a replacement for Sleep in a context.
type sleepKey struct{}

// WithSleep makes every backoff of the loops run under ctx call sleep instead of waiting on a
// timer: a harness that owns time and interleavings replaces real waiting with its own.
func WithSleep(ctx context.Context, sleep func(ctx context.Context, d time.Duration) error) context.Context {
	return context.WithValue(ctx, sleepKey{}, sleep)
}

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	if sleep, ok := ctx.Value(sleepKey{}).(func(context.Context, time.Duration) error); ok {
		return sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ErrExhausted is what a loop returns when its last lap still asked for another. The error wraps
// the cause the last lap gave.
var ErrExhausted = errors.New("still contended after bounded retries")

// verdict is a lap's request for another lap.
type verdict struct {
	cause error
	// wait: back off before the next lap; otherwise the next lap starts at once.
	wait bool
}

func (v *verdict) Error() string { return v.cause.Error() }
func (v *verdict) Unwrap() error { return v.cause }

// Again asks for another lap after backing off: nothing durable explained the failure (a
// conflicting transaction, a read that met one in flight).
func Again(cause error) error { return &verdict{cause: cause, wait: true} }

// Reread asks for another lap at once: a write was refused, and only the next read says why.
// When that read shows nothing moved — the write met a conflict — the lap calls Lap.Wait before
// writing again.
func Reread(cause error) error { return &verdict{cause: cause} }

// Lap is one run of a loop's body.
type Lap struct {
	// N counts laps from 0.
	N      int
	policy Policy
}

// Wait backs off as the loop would have after the previous lap: for a lap that re-read at once
// and found that its last write met a conflict.
func (l Lap) Wait(ctx context.Context) error {
	return Sleep(ctx, l.policy.Backoff(l.N-1))
}

// Do runs lap until it ends the loop, at most p.Tries times. A lap ends the loop with a result,
// or with an error that neither Again nor Reread wraps and that Retryable does not class as a
// throttle or a conflict. Otherwise another lap runs (after a backoff unless the lap asked for
// Reread); when the bound is reached Do returns ErrExhausted, wrapping the last lap's cause.
func Do[T any](ctx context.Context, p Policy, lap func(ctx context.Context, l Lap) (T, error)) (T, error) {
	var zero T
	var last error
	for n := range p.Tries {
		v, err := lap(ctx, Lap{N: n, policy: p})
		if err == nil {
			return v, nil
		}
		var again *verdict
		wait := true
		switch {
		case errors.As(err, &again):
			wait = again.wait
		case !Retryable(err):
			return v, err
		}
		last = err
		if n < p.Tries-1 && wait {
			if serr := Sleep(ctx, p.Backoff(n)); serr != nil {
				return zero, errors.Join(last, serr)
			}
		}
	}
	return zero, fmt.Errorf("%w (%d tries): %w", ErrExhausted, p.Tries, last)
}

// Retryable reports whether err is worth another lap of a keyed operation: a throttle, or a
// conflict with another transaction. A failed condition never is — it says something about
// durable state, which the loop must read and decide from — and neither is anything else.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		// A cancellation is retryable only when every reason is a conflict or a throttle: one
		// failed condition among them means durable state must be read.
		retryable := false
		for _, r := range tce.CancellationReasons {
			switch code(r.Code) {
			case "", "None":
			case "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
				retryable = true
			default:
				return false
			}
		}
		return retryable
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "TransactionConflictException", "TransactionInProgressException",
			"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
			"Throttling", "RequestThrottled":
			return true
		}
	}
	return false
}

func code(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
