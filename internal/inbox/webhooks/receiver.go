// Package webhooks receives Kinde's and Stripe's deliveries: it verifies each with its
// provider's verifier and hands what verifies to the inbox's intake. Nothing that does not
// verify reaches the intake, so nothing unverified is ever stored.
package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/inbox"
	"github.com/ferrymeter/ferry/internal/metrics"
	kindewebhook "github.com/ferrymeter/ferry/internal/provider/kinde/webhook"
	stripewebhook "github.com/ferrymeter/ferry/internal/provider/stripe/webhook"
)

// ErrNotConfigured: the deployment has no key URL (Kinde) or signing secret (Stripe), so no
// delivery from that provider can be verified. It is answered 503 — Ferry's side is missing —
// and logged; the provider retries until it is configured.
var ErrNotConfigured = errors.New("webhooks from this provider are not configured")

// Config is where the verification keys come from.
type Config struct {
	// KindeJWKSURL is Kinde's key URL ("" : Kinde deliveries are not configured).
	KindeJWKSURL string
	// StripeSecret is the Stripe endpoint's signing secret ("" : not configured).
	StripeSecret string
}

// Receiver verifies deliveries and stores what verifies.
type Receiver struct {
	Config  Config
	Intake  *inbox.Intake
	Metrics metrics.Recorder
	Log     *slog.Logger
	Now     func() time.Time

	mu    sync.Mutex
	kinde *kindewebhook.Verifier
}

// kindeVerifier builds the Kinde verifier on first use, so that functions that never receive a
// Kinde delivery never fetch Kinde's keys.
func (r *Receiver) kindeVerifier() (*kindewebhook.Verifier, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kinde != nil {
		return r.kinde, nil
	}
	if r.Config.KindeJWKSURL == "" {
		return nil, fmt.Errorf("%w: set FERRY_KINDE_WEBHOOK_JWKS_URL or FERRY_KINDE_DOMAIN", ErrNotConfigured)
	}
	v, err := kindewebhook.New(kindewebhook.Config{JWKSURL: r.Config.KindeJWKSURL, Now: r.Now})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotConfigured, err)
	}
	r.kinde = v
	return v, nil
}

// Close stops the Kinde verifier's background refresh.
func (r *Receiver) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kinde != nil {
		r.kinde.Close()
	}
}

// Kinde verifies and stores a Kinde delivery: the token body and its unsigned webhook-id
// header (kept on the receipt only: the dedupe key is the signed event_id claim).
func (r *Receiver) Kinde(ctx context.Context, body []byte, webhookID string) (inbox.Stored, error) {
	v, err := r.kindeVerifier()
	if err != nil {
		r.Log.Error("a Kinde delivery cannot be verified", "err", err)
		return inbox.Stored{}, err
	}
	got, err := v.Verify(ctx, body)
	if err != nil {
		r.refused(inbox.Kinde, err)
		return inbox.Stored{}, err
	}
	return r.Intake.Accept(ctx, inbox.Delivery{
		Source: inbox.Kinde, EventID: got.EventID, Type: got.Type, OccurredAt: got.OccurredAt,
		Payload: got.Payload, WebhookID: webhookID, KeyID: got.KeyID, ReceivedAt: r.Now(),
	})
}

// Stripe verifies and stores a Stripe delivery.
func (r *Receiver) Stripe(ctx context.Context, body []byte, signature string) (inbox.Stored, error) {
	if r.Config.StripeSecret == "" {
		err := fmt.Errorf("%w: set FERRY_STRIPE_WEBHOOK_SECRET (or its secret's ARN)", ErrNotConfigured)
		r.Log.Error("a Stripe delivery cannot be verified", "err", err)
		return inbox.Stored{}, err
	}
	got, err := stripewebhook.Verifier{Secret: r.Config.StripeSecret}.Verify(body, signature)
	if err != nil {
		r.refused(inbox.Stripe, err)
		return inbox.Stored{}, err
	}
	return r.Intake.Accept(ctx, inbox.Delivery{
		Source: inbox.Stripe, EventID: got.EventID, Type: got.Type, OccurredAt: got.Created,
		Payload: got.Payload, APIVersion: got.APIVersion, ReceivedAt: r.Now(),
	})
}

func (r *Receiver) refused(source inbox.Source, err error) {
	var kinde *kindewebhook.UnverifiableError
	var stripe *stripewebhook.UnverifiableError
	if errors.As(err, &kinde) || errors.As(err, &stripe) {
		r.Metrics.Count(metrics.WebhooksRefused, 1)
	}
	r.Log.Warn("webhook delivery refused; nothing stored", "source", source, "err", err)
}
