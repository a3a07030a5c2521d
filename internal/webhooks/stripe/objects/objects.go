// Package objects re-reads Stripe objects by id through stripe-go's client: the optional
// re-fetch the inbox worker does before applying a Stripe event (FERRY_STRIPE_REFETCH=true),
// so it acts on the subscription or invoice as Stripe holds it now rather than on the copy the
// event carried (seed 003). Package standin serves the same endpoints for tests and ferry dev.
package objects

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v85"

	provider "github.com/ferrymeter/ferry/internal/platform/endpoint"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// DefaultAPIBase is Stripe's API.
const DefaultAPIBase = "https://api.stripe.com"

// requestTimeout bounds one re-fetch, retries included.
const requestTimeout = 10 * time.Second

// maxNetworkRetries is how often stripe-go repeats a failed read (it backs off between them);
// the inbox's own backoff takes over after that.
const maxNetworkRetries = 2

// Config configures a Client.
type Config struct {
	// APIBase is Stripe's API (default DefaultAPIBase); http:// only for loopback hosts.
	APIBase string
	// APIKey is a secret or restricted key that may read subscriptions and invoices.
	APIKey     string
	HTTPClient *http.Client
}

// Client re-reads subscriptions and invoices.
type Client struct {
	sc *stripe.Client
}

// New builds a Client.
func New(cfg Config) (*Client, error) {
	base := cfg.APIBase
	if base == "" {
		base = DefaultAPIBase
	}
	if err := provider.CheckEndpoint("the Stripe API base", base); err != nil {
		return nil, err
	}
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("re-fetching Stripe objects needs an API key")
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: requestTimeout}
	}
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(strings.TrimSuffix(base, "/")), HTTPClient: client,
		MaxNetworkRetries: stripe.Int64(maxNetworkRetries), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return &Client{sc: stripe.NewClient(cfg.APIKey, stripe.WithBackends(&stripe.Backends{API: backend}))}, nil
}

// Object implements the Stripe interpreter's Fetcher: the object as Stripe holds it now, as
// raw JSON.
func (c *Client) Object(ctx context.Context, objectType, id string) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	switch objectType {
	case stripewebhook.ObjectSubscription:
		sub, err := c.sc.V1Subscriptions.Retrieve(ctx, id, nil)
		if err != nil {
			return nil, err
		}
		return sub.LastResponse.RawJSON, nil
	case stripewebhook.ObjectInvoice:
		inv, err := c.sc.V1Invoices.Retrieve(ctx, id, nil)
		if err != nil {
			return nil, err
		}
		return inv.LastResponse.RawJSON, nil
	}
	return nil, fmt.Errorf("cannot re-fetch a Stripe %s", objectType)
}
