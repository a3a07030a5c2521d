package ferry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds one attempt of a request (not the retries together: the context does).
	DefaultTimeout = 10 * time.Second
	// DefaultMaxAttempts is how many times one call is sent at most, the first time included.
	DefaultMaxAttempts = 6
	// DefaultBaseWait is the first retry's backoff before jitter; each retry doubles it.
	DefaultBaseWait = 100 * time.Millisecond
	// DefaultMaxWait caps a backoff, and is the longest wait a server may ask for (Retry-After,
	// RateLimit-Reset) that the client still waits out; a longer one ends the call with its error.
	DefaultMaxWait = 30 * time.Second
	// maxAnswerBytes bounds how much of an answer the client reads: Ferry's largest page is far
	// below it.
	maxAnswerBytes = 16 << 20
)

// Config configures a Client. Only BaseURL and APIKey are needed.
type Config struct {
	// BaseURL is Ferry's address, e.g. http://127.0.0.1:8080 or the API Gateway URL.
	BaseURL string
	// APIKey is an account's API key, or the operator key for the operator routes.
	APIKey string
	// Timeout bounds each attempt (DefaultTimeout if zero).
	Timeout time.Duration
	// MaxAttempts bounds the attempts of one call (DefaultMaxAttempts if zero; 1 turns retries off).
	MaxAttempts int
	// BaseWait is the first backoff (DefaultBaseWait if zero); MaxWait caps backoffs and the
	// server-asked waits the client honours (DefaultMaxWait if zero).
	BaseWait, MaxWait time.Duration
	// HTTPClient sends the requests (a client of its own with a pooled transport if nil). Set
	// its Transport to add tracing, proxies or TLS settings.
	HTTPClient *http.Client
	// Logger receives a record for every retry and every batch the Batcher could not send
	// (nothing is logged if nil).
	Logger *slog.Logger
	// UserAgent is put before the client's own product token, e.g. "my-app/1.2".
	UserAgent string
}

// Client calls Ferry's API. It is safe for concurrent use; make one and share it.
type Client struct {
	base      string
	auth      string
	userAgent string
	http      *http.Client
	log       *slog.Logger
	policy    retryPolicy
	timeout   time.Duration
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ferry: BaseURL %q is not an http(s) URL", cfg.BaseURL)
	}
	if cfg.APIKey == "" {
		return nil, errors.New("ferry: APIKey is empty")
	}
	c := &Client{
		base:      strings.TrimSuffix(cfg.BaseURL, "/"),
		auth:      "Bearer " + cfg.APIKey,
		userAgent: strings.TrimSpace(cfg.UserAgent + " ferry-go/" + Version),
		http:      cfg.HTTPClient,
		log:       cfg.Logger,
		timeout:   orDefault(cfg.Timeout, DefaultTimeout),
		policy: retryPolicy{
			maxAttempts: orDefault(cfg.MaxAttempts, DefaultMaxAttempts),
			baseWait:    orDefault(cfg.BaseWait, DefaultBaseWait),
			maxWait:     orDefault(cfg.MaxWait, DefaultMaxWait),
		},
	}
	if c.http == nil {
		c.http = &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, MaxIdleConns: 64, MaxIdleConnsPerHost: 64,
			IdleConnTimeout: 90 * time.Second, ForceAttemptHTTP2: true,
		}}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

func orDefault[T ~int64 | ~int](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// call is one logical request: sent once, and again on each retry with the same bytes and the
// same Idempotency-Key.
type call struct {
	method, path string
	query        url.Values
	// body is the request's bytes, encoded once (nil for none).
	body        []byte
	contentType string
	// idempotencyKey is minted once per logical mutating call.
	idempotencyKey string
	header         http.Header
}

// newCall makes a call, encoding body (if not nil) once and minting the Idempotency-Key of a
// mutating call.
func newCall(method, path string, body any) (*call, error) {
	c := &call{method: method, path: path}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("ferry: encode the %s %s body: %w", method, path, err)
		}
		c.body, c.contentType = b, "application/json"
	}
	if method != http.MethodGet {
		c.idempotencyKey = newIdempotencyKey()
	}
	return c, nil
}

// newRawCall makes a mutating call of a JSON body already encoded.
func newRawCall(method, path string, body []byte) *call {
	return &call{method: method, path: path, body: body, contentType: "application/json", idempotencyKey: newIdempotencyKey()}
}

// do sends the call, retrying as the policy allows, and decodes a 2xx answer into out (if not
// nil). It returns the answer's status.
func (c *Client) do(ctx context.Context, k *call, out any) (int, error) {
	var lastErr error
	for attempt := 1; ; attempt++ {
		status, answer, header, err := c.attempt(ctx, k)
		if err == nil && status < 300 {
			if out != nil && len(answer) > 0 {
				if err := json.Unmarshal(answer, out); err != nil {
					return status, fmt.Errorf("ferry: %s %s: decode the %d answer: %w", k.method, k.path, status, err)
				}
			}
			return status, nil
		}
		if err == nil {
			err = problemFromAnswer(status, header, answer)
		}
		lastErr = err
		if ctx.Err() != nil {
			return status, fmt.Errorf("ferry: %s %s: %w (after %d attempts; last: %v)", k.method, k.path, ctx.Err(), attempt, lastErr)
		}
		d := c.policy.decide(attempt, outcome{status: status, err: err, header: header})
		if !d.retry {
			if attempt > 1 {
				return status, fmt.Errorf("ferry: %s %s after %d attempts: %w", k.method, k.path, attempt, lastErr)
			}
			return status, lastErr
		}
		c.log.LogAttrs(ctx, slog.LevelWarn, "ferry: retrying", slog.String("method", k.method), slog.String("path", k.path),
			slog.Int("attempt", attempt), slog.Duration("wait", d.wait), slog.String("reason", d.reason),
			slog.String("idempotencyKey", k.idempotencyKey))
		t := time.NewTimer(d.wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return status, fmt.Errorf("ferry: %s %s: %w (after %d attempts; last: %v)", k.method, k.path, ctx.Err(), attempt, lastErr)
		case <-t.C:
		}
	}
}

// attempt sends the call once, under the per-attempt timeout, and reads the whole answer.
func (c *Client) attempt(ctx context.Context, k *call) (int, []byte, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := c.base + k.path
	if len(k.query) > 0 {
		u += "?" + k.query.Encode()
	}
	var body io.Reader
	if k.body != nil {
		body = bytes.NewReader(k.body)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, u, body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("ferry: build %s %s: %w", k.method, k.path, err)
	}
	for name, vs := range k.header {
		req.Header[name] = vs
	}
	req.Header.Set("Authorization", c.auth)
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if k.contentType != "" {
		req.Header.Set("Content-Type", k.contentType)
	}
	if k.idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", k.idempotencyKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, &NetworkError{Method: k.method, Path: k.path, Err: err}
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		// The status came, the answer did not: the effect may have happened, as with any
		// broken connection.
		return 0, nil, nil, &NetworkError{Method: k.method, Path: k.path, Err: err}
	}
	return resp.StatusCode, answer, resp.Header, nil
}

// NetworkError is a request that got no complete answer: refused, reset, timed out. Whether
// its effect happened is unknown; the client retries it under the same identity.
type NetworkError struct {
	Method, Path string
	Err          error
}

func (e *NetworkError) Error() string {
	return fmt.Sprintf("ferry: %s %s: no answer: %v", e.Method, e.Path, e.Err)
}

// Unwrap returns the transport's error.
func (e *NetworkError) Unwrap() error { return e.Err }
