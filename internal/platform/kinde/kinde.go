// Package kinde is Ferry's client for Kinde's management API: it reads a billing customer's
// entitlements (GET /api/v1/billing/entitlements, scope read:billing_entitlements) with a
// machine-to-machine token from the OAuth 2.0 client-credentials grant (POST /oauth2/token),
// cached until it expires. An entitlement's entitlement_limit_max is the feature's limit; null
// means the plan sets no maximum.
package kinde

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
)

// Paths of the endpoints Ferry calls.
const (
	TokenPath        = "/oauth2/token"
	EntitlementsPath = "/api/v1/billing/entitlements"
	// ScopeEntitlements is the scope the entitlements endpoint needs.
	ScopeEntitlements = "read:billing_entitlements"
)

// Bounds of one read.
const (
	// pageSize is how many entitlements one page asks for.
	pageSize = 100
	// maxPages bounds the pages of one customer's entitlements.
	maxPages = 10
	// maxBodyBytes bounds a response body Ferry reads.
	maxBodyBytes = 1 << 20
	// requestTimeout bounds one HTTP call when the caller's context has no deadline.
	requestTimeout = 5 * time.Second
)

// Config configures a client.
type Config struct {
	// Domain is the Kinde business domain: "acme.kinde.com", or a full base URL
	// ("https://auth.acme.com", "http://127.0.0.1:8081" for the stand-in).
	Domain       string
	ClientID     string
	ClientSecret string
	// Audience of the token; default <base URL>/api, the management API.
	Audience string
	// HTTPClient makes the calls; nil uses a client with requestTimeout.
	HTTPClient *http.Client
}

// Validate returns every problem with the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if c.Domain == "" {
		errs = append(errs, errors.New("the Kinde domain is not set"))
	} else if _, err := baseURL(c.Domain); err != nil {
		errs = append(errs, err)
	}
	if c.ClientID == "" {
		errs = append(errs, errors.New("the Kinde client id is not set"))
	}
	if c.ClientSecret == "" {
		errs = append(errs, errors.New("the Kinde client secret is not set"))
	}
	return errors.Join(errs...)
}

func baseURL(domain string) (*url.URL, error) {
	if !strings.Contains(domain, "://") {
		domain = "https://" + domain
	}
	u, err := url.Parse(strings.TrimRight(domain, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("the Kinde domain %q is not a host name or an http(s) URL", domain)
	}
	return u, nil
}

// Client calls Kinde. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	http   *http.Client
	oauth  clientcredentials.Config
	mu     sync.Mutex
	tokens oauth2.TokenSource
}

// New builds a client.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base, _ := baseURL(cfg.Domain)
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: requestTimeout}
	}
	audience := cfg.Audience
	if audience == "" {
		audience = base.String() + "/api"
	}
	c := &Client{
		base: base,
		http: hc,
		oauth: clientcredentials.Config{
			ClientID:       cfg.ClientID,
			ClientSecret:   cfg.ClientSecret,
			TokenURL:       base.String() + TokenPath,
			EndpointParams: url.Values{"audience": {audience}},
			AuthStyle:      oauth2.AuthStyleInParams,
		},
	}
	c.resetTokens()
	return c, nil
}

// resetTokens starts a new token cache: the next call fetches a new token. The cache reuses a
// token until shortly before it expires.
func (c *Client) resetTokens() {
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, c.http)
	c.mu.Lock()
	c.tokens = c.oauth.TokenSource(ctx)
	c.mu.Unlock()
}

func (c *Client) token() (*oauth2.Token, error) {
	c.mu.Lock()
	ts := c.tokens
	c.mu.Unlock()
	t, err := ts.Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode == http.StatusTooManyRequests {
			return nil, &RateLimitedError{Wait: retryAfter(re.Response.Header)}
		}
		return nil, fmt.Errorf("kinde token: %w", err)
	}
	return t, nil
}

// Entitlement is one feature a plan grants a billing customer.
type Entitlement struct {
	ID          string `json:"id"`
	FeatureCode string `json:"feature_code"`
	FeatureName string `json:"feature_name,omitempty"`
	// LimitMax is the most the customer may use; nil means no maximum.
	LimitMax *int64 `json:"entitlement_limit_max"`
	LimitMin *int64 `json:"entitlement_limit_min,omitempty"`
}

// EntitlementsResponse is the body of GET /api/v1/billing/entitlements.
type EntitlementsResponse struct {
	Code         string        `json:"code"`
	Message      string        `json:"message"`
	HasMore      bool          `json:"has_more"`
	Entitlements []Entitlement `json:"entitlements"`
}

// StatusError is an answer other than 200.
type StatusError struct {
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("kinde answered %d: %s", e.Status, e.Body)
}

// RateLimitedError is a 429: Kinde asks Ferry to wait before the next call.
type RateLimitedError struct{ Wait time.Duration }

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("kinde rate limited the call; retry in %s", e.Wait)
}

// RetryAfter is how long to wait before asking again.
func (e *RateLimitedError) RetryAfter() time.Duration { return e.Wait }

// defaultRetryAfter is the wait after a 429 that does not say how long.
const defaultRetryAfter = 10 * time.Second

// retryAfter reads the wait from a 429: RateLimit-Reset (seconds until the window resets) or
// Retry-After (seconds).
func retryAfter(h http.Header) time.Duration {
	for _, name := range []string{"RateLimit-Reset", "Retry-After"} {
		if s, err := strconv.Atoi(strings.TrimSpace(h.Get(name))); err == nil && s >= 0 {
			return time.Duration(s) * time.Second
		}
	}
	return defaultRetryAfter
}

// Entitlements reads every entitlement of a billing customer, following pages.
func (c *Client) Entitlements(ctx context.Context, customerID string) ([]Entitlement, error) {
	var all []Entitlement
	after := ""
	for range maxPages {
		page, err := c.entitlementsPage(ctx, customerID, after, true)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Entitlements...)
		if !page.HasMore || len(page.Entitlements) == 0 {
			return all, nil
		}
		after = page.Entitlements[len(page.Entitlements)-1].ID
	}
	return nil, fmt.Errorf("kinde entitlements of %s: more than %d pages", customerID, maxPages)
}

func (c *Client) entitlementsPage(ctx context.Context, customerID, after string, retryAuth bool) (EntitlementsResponse, error) {
	tok, err := c.token()
	if err != nil {
		return EntitlementsResponse{}, err
	}
	q := url.Values{"customer_id": {customerID}, "page_size": {strconv.Itoa(pageSize)}}
	if after != "" {
		q.Set("starting_after", after)
	}
	u := *c.base
	u.Path += EntitlementsPath
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return EntitlementsResponse{}, err
	}
	req.Header.Set("Accept", "application/json")
	tok.SetAuthHeader(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return EntitlementsResponse{}, fmt.Errorf("kinde entitlements of %s: %w", customerID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return EntitlementsResponse{}, fmt.Errorf("kinde entitlements of %s: read: %w", customerID, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized && retryAuth:
		// The token was revoked or rotated before its expiry: fetch a new one, once.
		c.resetTokens()
		return c.entitlementsPage(ctx, customerID, after, false)
	case resp.StatusCode == http.StatusTooManyRequests:
		return EntitlementsResponse{}, &RateLimitedError{Wait: retryAfter(resp.Header)}
	case resp.StatusCode != http.StatusOK:
		return EntitlementsResponse{}, &StatusError{Status: resp.StatusCode, Body: truncate(string(body), 200)}
	}
	var page EntitlementsResponse
	if err := json.Unmarshal(body, &page); err != nil {
		return EntitlementsResponse{}, fmt.Errorf("kinde entitlements of %s: decode: %w", customerID, err)
	}
	return page, nil
}

// Limits reads a customer's entitlements as limits by feature code: entitlement_limit_max, or
// unlimited when it is null. It implements limits.Fetcher.
func (c *Client) Limits(ctx context.Context, customerID string) (map[string]plans.Limit, error) {
	ents, err := c.Entitlements(ctx, customerID)
	if err != nil {
		return nil, err
	}
	return LimitsOf(ents)
}

// LimitsOf turns entitlements into limits by feature code. A negative maximum is refused rather
// than guessed at.
func LimitsOf(ents []Entitlement) (map[string]plans.Limit, error) {
	out := make(map[string]plans.Limit, len(ents))
	for _, e := range ents {
		if e.FeatureCode == "" {
			continue
		}
		switch {
		case e.LimitMax == nil:
			out[e.FeatureCode] = plans.Unlimited
		case *e.LimitMax < 0:
			return nil, fmt.Errorf("kinde entitlement %s: negative limit %d for %s", e.ID, *e.LimitMax, e.FeatureCode)
		default:
			out[e.FeatureCode] = plans.Max(*e.LimitMax)
		}
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
