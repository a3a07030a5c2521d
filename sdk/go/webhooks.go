package ferry

import (
	"fmt"
	"net/http"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// WebhookVerifier verifies the notifications Ferry sends to an endpoint (Standard Webhooks:
// the webhook-id, webhook-timestamp and webhook-signature headers, HMAC-SHA256 under the
// endpoint's secret, a timestamp within five minutes), with the Standard Webhooks reference
// library Ferry signs with. It is safe for concurrent use.
type WebhookVerifier struct {
	wh *standardwebhooks.Webhook
}

// NewWebhookVerifier returns a verifier for an endpoint's signing secret ("whsec_…", base64).
func NewWebhookVerifier(secret string) (*WebhookVerifier, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("ferry: webhook secret: %w", err)
	}
	return &WebhookVerifier{wh: wh}, nil
}

// Verify checks that payload — the request's body, byte for byte as it arrived — and headers
// are a notification signed with the endpoint's secret, recently. Act on a notification only
// after it verifies; dedupe on its webhook-id, which every retry of it repeats.
func (v *WebhookVerifier) Verify(payload []byte, headers http.Header) error {
	if err := v.wh.Verify(payload, headers); err != nil {
		return fmt.Errorf("ferry: webhook not verified: %w", err)
	}
	return nil
}
