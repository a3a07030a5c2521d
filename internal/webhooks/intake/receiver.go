// Package webhooks receives Kinde's and Stripe's deliveries: it is the webhooks function's
// signature verifier (httpapi.SignatureVerifier) — the media type, the size and the provider's
// signature, checked before the handler runs — and its store (httpapi.WebhookStore), which
// verifies again and hands what verifies to the inbox's intake. Nothing that does not verify
// reaches the intake, so nothing unverified is ever stored.
package intake

import (
	"context"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	kindewebhook "github.com/ferrymeter/ferry/internal/webhooks/kinde"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// The webhook routes, by the provider each serves.
const (
	KindePath  = "/v1/webhooks/kinde"
	StripePath = "/v1/webhooks/stripe"
)

// Headers of the webhook routes.
const (
	// HeaderWebhookID is Kinde's per-delivery id, the same on every attempt. It is not signed,
	// so it is recorded on the receipt and never used as the dedupe key.
	HeaderWebhookID = "webhook-id"
	// HeaderStripeSignature carries Stripe's timestamped HMAC of the body.
	HeaderStripeSignature = "Stripe-Signature"
)

// ErrNotConfigured: the deployment has no key URL (Kinde) or signing secret (Stripe), so no
// delivery from that provider can be verified. It is answered 503 — Ferry's side is missing —
// and logged; the provider retries until it is configured.
var ErrNotConfigured = problem.New(problem.Unavailable, "webhooks from this provider are not configured",
	"Deliveries from this provider cannot be verified on this deployment yet; nothing was stored.")

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

// verified is a delivery that verified, in the form the intake stores.
type verified struct {
	delivery inbox.Delivery
}

// Verify implements httpapi.SignatureVerifier: the delivery to route has the route's media type,
// fits in inbox.MaxPayloadBytes and carries its provider's valid signature. It names the provider.
func (r *Receiver) Verify(ctx context.Context, route resources.Route, header http.Header, body []byte) (string, error) {
	v, err := r.verify(ctx, route.Path, header, body)
	if err != nil {
		return "", err
	}
	return string(v.delivery.Source), nil
}

// Store implements httpapi.WebhookStore: it verifies the delivery again (nothing is ever stored
// from an unverified reading) and stores it.
func (r *Receiver) Store(ctx context.Context, provider string, header http.Header, body []byte) (inbox.Stored, error) {
	path := map[string]string{string(inbox.Kinde): KindePath, string(inbox.Stripe): StripePath}[provider]
	v, err := r.verify(ctx, path, header, body)
	if err != nil {
		return inbox.Stored{}, err
	}
	return r.Intake.Accept(ctx, v.delivery)
}

func (r *Receiver) verify(ctx context.Context, path string, header http.Header, body []byte) (verified, error) {
	var want string
	switch path {
	case KindePath:
		want = "application/jwt"
	case StripePath:
		want = "application/json"
	default:
		return verified{}, fmt.Errorf("no provider delivers to %q", path) // a wiring defect
	}
	if mt, _, err := mime.ParseMediaType(header.Get("Content-Type")); err != nil || mt != want {
		return verified{}, problem.New(problem.UnsupportedMediaType, "wrong media type",
			fmt.Sprintf("Send the delivery as %s, not %q; nothing was stored.", want, header.Get("Content-Type")))
	}
	if len(body) > inbox.MaxPayloadBytes {
		return verified{}, problem.New(problem.TooLarge, "delivery too large",
			fmt.Sprintf("The delivery is over %d bytes; nothing was stored.", inbox.MaxPayloadBytes))
	}
	if path == KindePath {
		return r.verifyKinde(ctx, header, body)
	}
	return r.verifyStripe(header, body)
}

// kindeVerifier builds the Kinde verifier on first use, so that a function start never waits on
// Kinde's keys and an unreachable key URL fails deliveries (503), never the start.
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

// SetKindeJWKSURL points the receiver at another Kinde key URL (a local or test signer started
// after the function was composed); the next Kinde delivery builds its verifier from it.
func (r *Receiver) SetKindeJWKSURL(url string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Config.KindeJWKSURL == url {
		return
	}
	if r.kinde != nil {
		r.kinde.Close()
		r.kinde = nil
	}
	r.Config.KindeJWKSURL = url
}

// Close stops the Kinde verifier's background refresh.
func (r *Receiver) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kinde != nil {
		r.kinde.Close()
	}
}

func (r *Receiver) verifyKinde(ctx context.Context, header http.Header, body []byte) (verified, error) {
	v, err := r.kindeVerifier()
	if err != nil {
		r.Log.Error("a Kinde delivery cannot be verified", "err", err)
		return verified{}, err
	}
	got, err := v.Verify(ctx, body)
	if err != nil {
		r.refused(inbox.Kinde, err)
		return verified{}, err
	}
	return verified{delivery: inbox.Delivery{
		Source: inbox.Kinde, EventID: got.EventID, Type: got.Type, OccurredAt: got.OccurredAt,
		Payload: got.Payload, WebhookID: header.Get(HeaderWebhookID), KeyID: got.KeyID, ReceivedAt: r.Now(),
	}}, nil
}

func (r *Receiver) verifyStripe(header http.Header, body []byte) (verified, error) {
	if r.Config.StripeSecret == "" {
		err := fmt.Errorf("%w: set FERRY_STRIPE_WEBHOOK_SECRET (or its secret's ARN)", ErrNotConfigured)
		r.Log.Error("a Stripe delivery cannot be verified", "err", err)
		return verified{}, err
	}
	// The header is a comma-separated list (t=…,v1=…[,v1=…]); API Gateway's payload v2 joins a
	// header's values with commas and the Lambda adapter splits them again, so join them back.
	signature := strings.Join(header.Values(HeaderStripeSignature), ",")
	got, err := stripewebhook.Verifier{Secret: r.Config.StripeSecret}.Verify(body, signature)
	if err != nil {
		r.refused(inbox.Stripe, err)
		return verified{}, err
	}
	return verified{delivery: inbox.Delivery{
		Source: inbox.Stripe, EventID: got.EventID, Type: got.Type, OccurredAt: got.Created,
		Payload: got.Payload, APIVersion: got.APIVersion, ReceivedAt: r.Now(),
	}}, nil
}

func (r *Receiver) refused(source inbox.Source, err error) {
	if problem.KindOf(err) == problem.SignatureInvalid {
		r.Metrics.Count(metrics.WebhooksRefused, 1)
	}
	r.Log.Warn("webhook delivery refused; nothing stored", "source", source, "err", err)
}
