package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v85"

	"github.com/ferrymeter/ferry/internal/devstack"
	"github.com/ferrymeter/ferry/internal/provider/kinde/webhook/signer"
	stripewebhook "github.com/ferrymeter/ferry/internal/provider/stripe/webhook"
	"github.com/ferrymeter/ferry/internal/resources"
)

// maxAnswerBytes bounds an answer the webhook client reads.
const maxAnswerBytes = 1 << 20

// runWebhooks is `ferry webhooks send kinde|stripe …`: sign a delivery the way the provider
// does and post it to a running Ferry.
func runWebhooks(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 2 || args[0] != "send" || (args[1] != "kinde" && args[1] != "stripe") {
		fmt.Fprintln(stderr, "usage: ferry webhooks send kinde|stripe [flags]   (ferry webhooks send kinde -h for the flags)")
		return errors.New("want `webhooks send kinde` or `webhooks send stripe`")
	}
	if args[1] == "kinde" {
		return sendKinde(ctx, args[2:], stdout, stderr)
	}
	return sendStripe(ctx, args[2:], stdout, stderr)
}

// webhookClient posts deliveries to one Ferry.
type webhookClient struct {
	base string
	http *http.Client
}

func newWebhookClient(base string) *webhookClient {
	return &webhookClient{base: strings.TrimRight(base, "/"), http: &http.Client{Timeout: labRequestTimeout}}
}

// devInfo asks ferry dev how to sign its deliveries (GET /_dev/webhooks).
func (c *webhookClient) devInfo(ctx context.Context) (devWebhooks, error) {
	var info devWebhooks
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+devWebhooksPath, nil)
	if err != nil {
		return info, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return info, fmt.Errorf("reach %s (is ferry dev running?): %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return info, fmt.Errorf("%s answers %d: not a ferry dev stack, so it has no local signer; pass --signer or --secret", c.base+devWebhooksPath, resp.StatusCode)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(&info)
	return info, err
}

// sign asks a Kinde signer stand-in to sign claims.
func (c *webhookClient) sign(ctx context.Context, signerURL string, claims map[string]any) (string, error) {
	body, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(signerURL, "/")+signer.SignPath, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
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

// post sends a delivery and returns the answer's status and body.
func (c *webhookClient) post(ctx context.Context, path string, body []byte, headers map[string]string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("post to %s: %w", c.base+path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	return resp.StatusCode, data, err
}

// kindeClaims are a Kinde billing event's claims as Kinde sends them: offsets and nanoseconds
// in the times, the customer and plan under data.
func kindeClaims(typ, eventID string, eventAt, sentAt time.Time, customer, plan string, extra map[string]any) map[string]any {
	data := map[string]any{"customer_id": customer, "customer_type": "user"}
	if plan != "" {
		data["plan"] = map[string]any{"key": plan}
	}
	for k, v := range extra {
		data[k] = v
	}
	return map[string]any{
		"type": typ, "event_id": eventID, "source": "api", "data": data,
		"event_timestamp": eventAt.Format(time.RFC3339Nano), "timestamp": sentAt.Format(time.RFC3339Nano),
	}
}

func randomID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// parseWhen reads a time flag: RFC 3339, or empty for now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return now, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time", s)
	}
	return t, nil
}

func sendKinde(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("webhooks send kinde", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://"+envOr(EnvAddr, devstack.DefaultAddr), "Ferry's base URL")
	signerURL := fs.String("signer", "", "the Kinde signer stand-in to sign with (default: ferry dev's, from "+devWebhooksPath+")")
	typ := fs.String("type", "customer.plan_changed", "the event type")
	customer := fs.String("customer", "", "data.customer_id: the Kinde customer (an account's kindeCustomerId)")
	plan := fs.String("plan", "", "data.plan.key (e.g. customer_pro_plan)")
	eventID := fs.String("event-id", "", "the event_id claim, the dedupe key (default: a fresh one)")
	eventTime := fs.String("event-time", "", "event_timestamp, RFC 3339 (default: now)")
	data := fs.String("data", "", "more data members, a JSON object merged into data")
	webhookID := fs.String("webhook-id", "", "the webhook-id header (default: one per event id)")
	repeat := fs.Int("repeat", 1, "deliver the same event this many times (copies, as a retrying provider sends)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *customer == "" || *repeat < 1 {
		return errors.New("--customer is required, and --repeat must be at least 1")
	}
	c := newWebhookClient(*url)
	if *signerURL == "" {
		info, err := c.devInfo(ctx)
		if err != nil {
			return err
		}
		if info.Kinde == nil {
			return errors.New("this stack verifies Kinde deliveries against " + resources.EnvKindeWebhookJWKSURL + ", not a local signer; pass --signer")
		}
		*signerURL = info.Kinde.Signer
	}
	var extra map[string]any
	if *data != "" {
		if err := json.Unmarshal([]byte(*data), &extra); err != nil {
			return fmt.Errorf("--data: not a JSON object: %w", err)
		}
	}
	now := time.Now()
	at, err := parseWhen(*eventTime, now)
	if err != nil {
		return fmt.Errorf("--event-time: %w", err)
	}
	if *eventID == "" {
		*eventID = randomID("event_")
	}
	if *webhookID == "" {
		*webhookID = "msg_" + *eventID
	}
	token, err := c.sign(ctx, *signerURL, kindeClaims(*typ, *eventID, at, now, *customer, *plan, extra))
	if err != nil {
		return err
	}
	for range *repeat {
		status, body, err := c.post(ctx, "/v1/webhooks/kinde", []byte(token), map[string]string{"Content-Type": "application/jwt", "webhook-id": *webhookID})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d %s\n", status, bytes.TrimSpace(body))
		if status != http.StatusOK {
			return fmt.Errorf("the delivery was answered %d", status)
		}
	}
	return nil
}

// stripeEvent builds a Stripe event as Stripe sends it, around a subscription or an invoice.
func stripeEvent(typ, eventID string, created time.Time, customer, price, objectID, status string) ([]byte, error) {
	var object map[string]any
	if strings.HasPrefix(typ, "customer.subscription.") {
		if objectID == "" {
			objectID = randomID("sub_")
		}
		object = map[string]any{
			"id": objectID, "object": "subscription", "customer": customer, "status": status,
			"items": map[string]any{"object": "list", "data": []any{map[string]any{
				"id": randomID("si_"), "object": "subscription_item", "price": map[string]any{"id": price, "object": "price"},
			}}},
		}
	} else {
		if objectID == "" {
			objectID = randomID("in_")
		}
		object = map[string]any{
			"id": objectID, "object": "invoice", "customer": customer, "status": status,
			"lines": map[string]any{"object": "list", "data": []any{map[string]any{
				"id": randomID("il_"), "object": "line_item",
				"pricing": map[string]any{"type": "price_details", "price_details": map[string]any{"price": price}},
			}}},
		}
	}
	return json.Marshal(map[string]any{
		"id": eventID, "object": "event", "api_version": stripe.APIVersion, "created": created.Unix(),
		"livemode": false, "pending_webhooks": 1, "type": typ, "data": map[string]any{"object": object},
	})
}

func sendStripe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("webhooks send stripe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://"+envOr(EnvAddr, devstack.DefaultAddr), "Ferry's base URL")
	secret := fs.String("secret", os.Getenv(resources.EnvStripeWebhookSecret), "the endpoint's signing secret (default: "+resources.EnvStripeWebhookSecret+", else ferry dev's)")
	typ := fs.String("type", "invoice.paid", "the event type")
	customer := fs.String("customer", "", "the Stripe customer (an account's stripeCustomerId)")
	price := fs.String("price", "price_ferry_plus_monthly", "the price on the subscription item or invoice line")
	eventID := fs.String("id", "", "the event id, the dedupe key (default: a fresh evt_…)")
	created := fs.String("created", "", "the event's created time, RFC 3339 (default: now)")
	objectID := fs.String("object-id", "", "the subscription or invoice id (default: a fresh one)")
	status := fs.String("status", "", "the object's status (default: active for subscriptions, paid for invoices)")
	repeat := fs.Int("repeat", 1, "deliver the same event this many times")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *customer == "" || *repeat < 1 {
		return errors.New("--customer is required, and --repeat must be at least 1")
	}
	c := newWebhookClient(*url)
	if *secret == "" {
		info, err := c.devInfo(ctx)
		if err != nil {
			return err
		}
		if info.Stripe == nil {
			return errors.New("this stack has its own " + resources.EnvStripeWebhookSecret + "; pass --secret")
		}
		*secret = info.Stripe.Secret
	}
	now := time.Now()
	at, err := parseWhen(*created, now)
	if err != nil {
		return fmt.Errorf("--created: %w", err)
	}
	if *eventID == "" {
		*eventID = randomID("evt_")
	}
	if *status == "" {
		*status = "paid"
		if strings.HasPrefix(*typ, "customer.subscription.") {
			*status = "active"
		}
	}
	body, err := stripeEvent(*typ, *eventID, at, *customer, *price, *objectID, *status)
	if err != nil {
		return err
	}
	for range *repeat {
		sig := stripewebhook.Sign(body, *secret, time.Now())
		code, answer, err := c.post(ctx, "/v1/webhooks/stripe", body, map[string]string{"Content-Type": "application/json; charset=utf-8", "Stripe-Signature": sig})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d %s\n", code, bytes.TrimSpace(answer))
		if code != http.StatusOK {
			return fmt.Errorf("the delivery was answered %d", code)
		}
	}
	return nil
}
