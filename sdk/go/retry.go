package ferry

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryPolicy bounds and spaces the retries of one call.
type retryPolicy struct {
	maxAttempts       int
	baseWait, maxWait time.Duration
}

// outcome is what one attempt got: an answer's status and head, or an error (a *NetworkError,
// or the answer's problem).
type outcome struct {
	status int
	err    error
	header http.Header
}

// decision says whether to send the call again, after how long, and why.
type decision struct {
	retry  bool
	wait   time.Duration
	reason string
}

// decide is the retry decision after attempt number attempt (1 for the first) ended in o. It is
// a pure function of its inputs but for the jitter.
//
// Retried: no answer at all (a refused or reset connection, a timeout: the effect may or may not
// have happened, and the call's identity makes sending it again safe); 408 request-timeout (the
// body did not reach the server in time, so nothing was done); 429; every 5xx, 502
// outcome-unknown included; and 409 idempotency-in-flight, which is this call's own earlier
// attempt still running under its key. Never retried: any other 4xx, which a retry would only
// repeat.
func (p retryPolicy) decide(attempt int, o outcome) decision {
	if attempt >= p.maxAttempts {
		return decision{reason: "attempts exhausted"}
	}
	var netErr *NetworkError
	reason := ""
	switch {
	case errors.As(o.err, &netErr):
		reason = "no answer"
	case o.status == http.StatusRequestTimeout:
		reason = "408"
	case o.status == http.StatusTooManyRequests:
		reason = "429"
	case o.status >= 500:
		reason = strconv.Itoa(o.status)
	case o.status == http.StatusConflict && isKind(o.err, KindIdempotencyInFlight):
		reason = "in flight"
	default:
		return decision{reason: "not retryable"}
	}
	backoff := p.backoff(attempt)
	if asked, ok := serverWait(o.header); ok {
		if asked > p.maxWait {
			// The server asks for longer than the caller allows: its error is the answer.
			return decision{reason: "server asks to wait " + asked.String()}
		}
		// Wait what the server asked, plus a little jitter so callers told the same instant do
		// not all return at once.
		return decision{retry: true, wait: asked + jitter(p.baseWait), reason: reason}
	}
	return decision{retry: true, wait: backoff, reason: reason}
}

// backoff is the capped exponential wait before retry number attempt, with equal jitter: half
// the step fixed, half random.
func (p retryPolicy) backoff(attempt int) time.Duration {
	step := p.baseWait << min(attempt-1, 30)
	if step <= 0 || step > p.maxWait {
		step = p.maxWait
	}
	return step/2 + jitter(step/2)
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// serverWait reads the wait a server asked for: Retry-After (seconds or an HTTP date) or
// RateLimit-Reset (seconds).
func serverWait(h http.Header) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s >= 0 {
			return time.Duration(s) * time.Second, true
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(time.Until(t), 0), true
		}
	}
	if v := strings.TrimSpace(h.Get("RateLimit-Reset")); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s >= 0 {
			return time.Duration(s) * time.Second, true
		}
	}
	return 0, false
}
