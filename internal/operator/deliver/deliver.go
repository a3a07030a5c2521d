// Package deliver is the sending side of the webhook inbox, for ferry dev's tools: it builds
// Kinde and Stripe deliveries as those providers send them, signs them (a Kinde signer stand-in,
// a Stripe endpoint secret) and posts them to a running Ferry. `ferry webhooks send` and the
// webhooks lab use it; no deployed function does.
package deliver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v85"

	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// Local-only paths ferry dev serves beside the API, for the tools that sign deliveries.
const (
	// DevInfoPath answers how to sign deliveries for this stack (a DevInfo).
	DevInfoPath = "/_dev/webhooks"
	// DevCrashPath arms the apply-crash injector for one stored billing event: POST
	// {"event": "<billing event id>"} kills that event's next apply before it commits.
	DevCrashPath = "/_dev/faults/inbox-apply"
)

// SignPath is where a Kinde signer stand-in signs the claims POSTed to it and answers the token
// (application/jwt).
const SignPath = "/sign"

// Paths of the webhook routes.
const (
	KindePath  = "/v1/webhooks/kinde"
	StripePath = "/v1/webhooks/stripe"
)

// DevInfo is what GET /_dev/webhooks answers: the local Kinde signer (when ferry dev runs one)
// and the Stripe signing secret (when it is ferry dev's own).
type DevInfo struct {
	Kinde  *DevKinde  `json:"kinde"`
	Stripe *DevStripe `json:"stripe"`
	// CrashInjector is true when POST /_dev/faults/inbox-apply is available.
	CrashInjector bool `json:"crashInjector"`
}

// DevKinde is ferry dev's local Kinde signer: where it signs (POST Signer + /sign) and where
// Ferry reads its keys.
type DevKinde struct {
	Signer  string `json:"signer"`
	JWKSURL string `json:"jwksUrl"`
}

// DevStripe is ferry dev's own Stripe endpoint secret.
type DevStripe struct {
	Secret string `json:"secret"`
}

// maxAnswerBytes bounds an answer the client reads.
const maxAnswerBytes = 1 << 20

// Client posts deliveries to one Ferry.
type Client struct {
	Base string
	HTTP *http.Client
}

// NewClient is a client of the Ferry at base whose requests give up after timeout.
func NewClient(base string, timeout time.Duration) *Client {
	return &Client{Base: strings.TrimRight(base, "/"), HTTP: &http.Client{Timeout: timeout}}
}

// DevInfo asks ferry dev how to sign its deliveries.
func (c *Client) DevInfo(ctx context.Context) (DevInfo, error) {
	var info DevInfo
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+DevInfoPath, nil)
	if err != nil {
		return info, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return info, fmt.Errorf("reach %s (is ferry dev running?): %w", c.Base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return info, fmt.Errorf("%s answers %d: not a ferry dev stack, so it has no local signer; pass --signer or --secret", c.Base+DevInfoPath, resp.StatusCode)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(&info)
	return info, err
}

// Sign asks a Kinde signer stand-in to sign claims into a token.
func (c *Client) Sign(ctx context.Context, signerURL string, claims map[string]any) (string, error) {
	body, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(signerURL, "/")+SignPath, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("sign with %s: %w", signerURL, err)
	}
	defer resp.Body.Close()
	token, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("sign with %s: %d %s", signerURL, resp.StatusCode, token)
	}
	return string(token), nil
}

// Post sends a body with headers and returns the answer's status and body.
func (c *Client) Post(ctx context.Context, path string, body []byte, headers map[string]string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("post to %s: %w", c.Base+path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	return resp.StatusCode, data, err
}

// PostKinde posts a signed Kinde token as Kinde does: application/jwt, with its webhook-id.
func (c *Client) PostKinde(ctx context.Context, token, webhookID string) (int, []byte, error) {
	return c.Post(ctx, KindePath, []byte(token), map[string]string{"Content-Type": "application/jwt", "webhook-id": webhookID})
}

// PostStripe signs a Stripe event with the endpoint secret at now and posts it as Stripe does.
func (c *Client) PostStripe(ctx context.Context, body []byte, secret string, now time.Time) (int, []byte, error) {
	sig := stripewebhook.Sign(body, secret, now)
	return c.Post(ctx, StripePath, body, map[string]string{"Content-Type": "application/json; charset=utf-8", "Stripe-Signature": sig})
}

// KindeStamp is a time as Kinde may write it: an offset and nanoseconds.
func KindeStamp(t time.Time) string {
	return t.In(time.FixedZone("", 11*3600)).Format("2006-01-02T15:04:05.000000000Z07:00")
}

// KindeClaims are a Kinde billing event's claims as Kinde sends them: the event's time and the
// sending time, the customer and plan under data, and extra merged into data.
func KindeClaims(typ, eventID string, eventAt, sentAt time.Time, customer, plan string, extra map[string]any) map[string]any {
	data := map[string]any{"customer_id": customer, "customer_type": "user"}
	if plan != "" {
		data["plan"] = map[string]any{"key": plan}
	}
	for k, v := range extra {
		data[k] = v
	}
	return map[string]any{
		"type": typ, "event_id": eventID, "source": "api", "data": data,
		"event_timestamp": KindeStamp(eventAt), "timestamp": KindeStamp(sentAt),
	}
}

// StripeEvent builds a Stripe event as Stripe sends it, around a subscription
// (customer.subscription.*) or an invoice (anything else). Empty objectID makes a fresh one.
func StripeEvent(typ, eventID string, created time.Time, customer, price, objectID, status string) ([]byte, error) {
	var object map[string]any
	if strings.HasPrefix(typ, "customer.subscription.") {
		if objectID == "" {
			objectID = RandomID("sub_")
		}
		object = map[string]any{
			"id": objectID, "object": "subscription", "customer": customer, "status": status,
			"items": map[string]any{"object": "list", "data": []any{map[string]any{
				"id": RandomID("si_"), "object": "subscription_item", "price": map[string]any{"id": price, "object": "price"},
			}}},
		}
	} else {
		if objectID == "" {
			objectID = RandomID("in_")
		}
		object = map[string]any{
			"id": objectID, "object": "invoice", "customer": customer, "status": status,
			"lines": map[string]any{"object": "list", "data": []any{map[string]any{
				"id": RandomID("il_"), "object": "line_item",
				"pricing": map[string]any{"type": "price_details", "price_details": map[string]any{"price": price}},
			}}},
		}
	}
	return json.Marshal(map[string]any{
		"id": eventID, "object": "event", "api_version": stripe.APIVersion, "created": created.Unix(),
		"livemode": false, "pending_webhooks": 1, "type": typ, "data": map[string]any{"object": object},
	})
}

// RandomID is prefix and 20 random hex digits.
func RandomID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
