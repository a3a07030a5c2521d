package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/operator/deliver"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

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

// webhookTimeout bounds one request of `ferry webhooks send`.
const webhookTimeout = 30 * time.Second

// parseWhen reads a time flag: RFC 3339 (offsets and fractions as the providers send them), a
// duration from now ("-1h" is an hour ago), or empty for now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return now, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration from now like -1h", s)
	}
	return t, nil
}

func sendKinde(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("webhooks send kinde", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://"+envOr(EnvAddr, devstack.DefaultAddr), "Ferry's base URL")
	signerURL := fs.String("signer", "", "the Kinde signer stand-in to sign with (default: ferry dev's, from "+deliver.DevInfoPath+")")
	typ := fs.String("type", "customer.plan_changed", "the event type")
	customer := fs.String("customer", "", "data.customer_id: the Kinde customer (an account's kindeCustomerId)")
	plan := fs.String("plan", "", "data.plan.key (e.g. customer_pro_plan)")
	eventID := fs.String("event-id", "", "the event_id claim, the dedupe key (default: a fresh one)")
	eventTime := fs.String("event-time", "", "event_timestamp: RFC 3339, or a duration from now such as -1h (default: now)")
	data := fs.String("data", "", "more data members, a JSON object merged into data")
	webhookID := fs.String("webhook-id", "", "the webhook-id header (default: one per event id)")
	repeat := fs.Int("repeat", 1, "deliver the same event this many times (copies, as a retrying provider sends)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *customer == "" || *repeat < 1 {
		return errors.New("--customer is required, and --repeat must be at least 1")
	}
	c := deliver.NewClient(*url, webhookTimeout)
	if *signerURL == "" {
		info, err := c.DevInfo(ctx)
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
		*eventID = deliver.RandomID("event_")
	}
	if *webhookID == "" {
		*webhookID = "msg_" + *eventID
	}
	token, err := c.Sign(ctx, *signerURL, deliver.KindeClaims(*typ, *eventID, at, now, *customer, *plan, extra))
	if err != nil {
		return err
	}
	for range *repeat {
		status, body, err := c.PostKinde(ctx, token, *webhookID)
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

func sendStripe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("webhooks send stripe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://"+envOr(EnvAddr, devstack.DefaultAddr), "Ferry's base URL")
	secret := fs.String("secret", os.Getenv(resources.EnvStripeWebhookSecret), "the endpoint's signing secret (default: "+resources.EnvStripeWebhookSecret+", else ferry dev's)")
	typ := fs.String("type", "invoice.paid", "the event type")
	customer := fs.String("customer", "", "the Stripe customer (an account's stripeCustomerId)")
	price := fs.String("price", "price_ferry_plus_monthly", "the price on the subscription item or invoice line")
	eventID := fs.String("id", "", "the event id, the dedupe key (default: a fresh evt_…)")
	created := fs.String("created", "", "the event's created time: RFC 3339, or a duration from now such as -1h (default: now)")
	objectID := fs.String("object-id", "", "the subscription or invoice id (default: a fresh one)")
	status := fs.String("status", "", "the object's status (default: active for subscriptions, paid for invoices)")
	repeat := fs.Int("repeat", 1, "deliver the same event this many times")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *customer == "" || *repeat < 1 {
		return errors.New("--customer is required, and --repeat must be at least 1")
	}
	c := deliver.NewClient(*url, webhookTimeout)
	if *secret == "" {
		info, err := c.DevInfo(ctx)
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
		*eventID = deliver.RandomID("evt_")
	}
	if *status == "" {
		*status = "paid"
		if strings.HasPrefix(*typ, "customer.subscription.") {
			*status = "active"
		}
	}
	body, err := deliver.StripeEvent(*typ, *eventID, at, *customer, *price, *objectID, *status)
	if err != nil {
		return err
	}
	for range *repeat {
		code, answer, err := c.PostStripe(ctx, body, *secret, time.Now())
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
