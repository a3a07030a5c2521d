// Package stripe is Ferry's client for Stripe's billing meters, through stripe-go: it sends meter
// events (deltas, each under an identifier Stripe deduplicates over at least 24 hours), cancels
// events by identifier with meter event adjustments (possible only within 24 hours of Stripe
// receiving them), and reads a customer's aggregated usage back from a meter's event summaries
// (minute-aligned windows; eventually consistent).
package stripe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v85"
)

// Bounds of the client.
const (
	// requestTimeout bounds one call when the caller's context has no deadline.
	requestTimeout = 10 * time.Second
	// CancelWindow is how long after Stripe received a meter event it can still be cancelled.
	CancelWindow = 24 * time.Hour
	// MaxIdentifierLength is Stripe's limit on a meter event's identifier.
	MaxIdentifierLength = 100
	// maxSummaryPages bounds the pages of one summaries read (one summary per window is asked).
	maxSummaryPages = 4
)

// Config configures a client.
type Config struct {
	// APIKey is the secret key (sk_…, or rk_… restricted to meter events and summaries).
	APIKey string
	// APIBase replaces https://api.stripe.com, for a stand-in. Plain http is allowed only on a
	// loopback address: the key travels in every request.
	APIBase    string
	HTTPClient *http.Client
}

// Validate returns every problem with the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if c.APIKey == "" {
		errs = append(errs, errors.New("the Stripe API key is not set"))
	}
	if c.APIBase != "" {
		if err := validBase(c.APIBase); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// validBase accepts an https URL, or an http URL on a loopback address.
func validBase(base string) error {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return fmt.Errorf("the Stripe API base %q is not a scheme and host", base)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if loopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("the Stripe API base %q uses http on a host that is not loopback; the API key would travel in clear", base)
	}
	return fmt.Errorf("the Stripe API base %q: the scheme must be https (or http on loopback)", base)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Client talks to Stripe's billing meters. It is safe for concurrent use.
type Client struct {
	sc *stripego.Client
}

// New builds a client. stripe-go's own retries are off: every caller has its own bounded retry
// (the outbox backs off and dead-letters), and a hidden retry would make attempts uncountable.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: requestTimeout}
	}
	bc := &stripego.BackendConfig{
		HTTPClient:        hc,
		MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
		EnableTelemetry:   stripego.Bool(false),
	}
	if cfg.APIBase != "" {
		bc.URL = stripego.String(strings.TrimRight(cfg.APIBase, "/"))
	}
	return &Client{sc: stripego.NewClient(cfg.APIKey, stripego.WithBackends(stripego.NewBackendsWithConfig(bc)))}, nil
}

// MeterEvent is one meter event: value units of eventName for a customer, at a time inside the
// billing period it belongs to, under an identifier derived from durable state.
type MeterEvent struct {
	Identifier string
	EventName  string
	Customer   string
	Value      int64
	Timestamp  time.Time
}

// Send records a meter event. The identifier is also the request's Idempotency-Key, so a
// repeated request is answered, not applied again; and Stripe deduplicates the event by its
// identifier over at least 24 hours.
func (c *Client) Send(ctx context.Context, e MeterEvent) error {
	params := &stripego.BillingMeterEventCreateParams{
		EventName:  stripego.String(e.EventName),
		Identifier: stripego.String(e.Identifier),
		Payload:    map[string]string{"stripe_customer_id": e.Customer, "value": strconv.FormatInt(e.Value, 10)},
		Timestamp:  stripego.Int64(e.Timestamp.Unix()),
	}
	params.IdempotencyKey = stripego.String(e.Identifier)
	if _, err := c.sc.V1BillingMeterEvents.Create(ctx, params); err != nil {
		return classify(fmt.Sprintf("send meter event %s", e.Identifier), err)
	}
	return nil
}

// Cancel cancels a meter event by its identifier (within CancelWindow of Stripe receiving it).
func (c *Client) Cancel(ctx context.Context, eventName, identifier string) error {
	params := &stripego.BillingMeterEventAdjustmentCreateParams{
		EventName: stripego.String(eventName),
		Type:      stripego.String(string(stripego.BillingMeterEventAdjustmentTypeCancel)),
		Cancel:    &stripego.BillingMeterEventAdjustmentCreateCancelParams{Identifier: stripego.String(identifier)},
	}
	params.IdempotencyKey = stripego.String("cancel-" + identifier)
	if _, err := c.sc.V1BillingMeterEventAdjustments.Create(ctx, params); err != nil {
		return classify(fmt.Sprintf("cancel meter event %s", identifier), err)
	}
	return nil
}

// Summary reads the customer's aggregated usage of a meter over [start, end), both aligned down
// to the minute as Stripe requires. It is eventually consistent: events Stripe received moments
// ago may not be in it yet.
func (c *Client) Summary(ctx context.Context, meterID, customer string, start, end time.Time) (int64, error) {
	params := &stripego.BillingMeterEventSummaryListParams{
		ID:        stripego.String(meterID),
		Customer:  stripego.String(customer),
		StartTime: stripego.Int64(start.Truncate(time.Minute).Unix()),
		EndTime:   stripego.Int64(end.Truncate(time.Minute).Unix()),
	}
	params.Limit = stripego.Int64(10)
	var total float64
	pages := 0
	for s, err := range c.sc.V1BillingMeterEventSummaries.List(ctx, params).All(ctx) {
		if err != nil {
			return 0, classify(fmt.Sprintf("read the event summaries of meter %s", meterID), err)
		}
		total += s.AggregatedValue
		if pages++; pages > maxSummaryPages*10 {
			return 0, fmt.Errorf("read the event summaries of meter %s: more than %d summaries", meterID, maxSummaryPages*10)
		}
	}
	if total != math.Trunc(total) || math.Abs(total) >= 1<<53 {
		return 0, fmt.Errorf("meter %s: aggregated value %v is not an integer Ferry can compare", meterID, total)
	}
	return int64(total), nil
}

// Error is a failed Stripe call, classified for the caller's retry decision.
type Error struct {
	What   string
	Status int
	// Code is Stripe's error code, when it sent one.
	Code string
	Msg  string
	// Retryable: a network failure, a 429, a 409 or a 5xx; another attempt may succeed.
	Retryable bool
	// RetryAfter is what a 429 asked for, when it said.
	RetryAfter time.Duration
	cause      error
}

func (e *Error) Error() string {
	if e.Status == 0 {
		if e.cause == nil {
			return e.What + ": " + e.Msg
		}
		return fmt.Sprintf("%s: %v", e.What, e.cause)
	}
	return fmt.Sprintf("%s: Stripe answered %d %s: %s", e.What, e.Status, e.Code, e.Msg)
}

func (e *Error) Unwrap() error { return e.cause }

// classify turns stripe-go's error into an *Error.
func classify(what string, err error) error {
	var se *stripego.Error
	if errors.As(err, &se) {
		status := se.HTTPStatusCode
		e := &Error{What: what, Status: status, Code: string(se.Code), Msg: se.Msg, cause: err}
		e.Retryable = status == 0 || status == http.StatusTooManyRequests || status == http.StatusConflict || status >= 500
		if status == http.StatusTooManyRequests && se.LastResponse != nil {
			if secs, perr := strconv.Atoi(se.LastResponse.Header.Get("Retry-After")); perr == nil && secs > 0 {
				e.RetryAfter = time.Duration(secs) * time.Second
			}
		}
		return e
	}
	// A network failure or a timeout: the request may or may not have landed. Retrying is safe
	// because the identifier is fixed.
	return &Error{What: what, Retryable: true, cause: err}
}

// IsRetryable reports whether another attempt at the call may succeed.
func IsRetryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Retryable
	}
	return err != nil
}
