package ferry

import (
	"encoding/json"
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

// VerifyMessage verifies payload and headers as Verify does, then decodes the notification:
// its Type (ThresholdCrossed, LimitReached, …) and Data (the account, and the members its kind
// carries: for a threshold crossed, the feature, cycle, threshold, limit and usage). Its Id is
// the webhook-id, the same on every attempt and replay: dedupe on it. A kind this version does
// not know decodes with its Type as sent (Type.Valid() is false): answer it 2xx and ignore it,
// since an endpoint registered for every kind is sent the kinds added later too.
func (v *WebhookVerifier) VerifyMessage(payload []byte, headers http.Header) (*NotificationMessage, error) {
	if err := v.Verify(payload, headers); err != nil {
		return nil, err
	}
	var msg NotificationMessage
	if err := json.Unmarshal(payload, &msg); err != nil {
		return nil, fmt.Errorf("ferry: webhook verified, but it is not a notification: %w", err)
	}
	return &msg, nil
}
