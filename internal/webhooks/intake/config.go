package intake

import (
	"context"
	"fmt"

	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	kindewebhook "github.com/ferrymeter/ferry/internal/webhooks/kinde"
)

// ConfigFromSettings reads the verification keys: FERRY_KINDE_WEBHOOK_JWKS_URL (the CDK app derives
// it from the Kinde domain), and FERRY_STRIPE_WEBHOOK_SECRET or the secret FERRY_STRIPE_WEBHOOK_SECRET_ARN
// names. A setting that cannot be used is an error at start; a provider left unconfigured answers
// its deliveries 503.
func ConfigFromSettings(ctx context.Context, c *compose.Composer) (Config, error) {
	s := c.Settings()
	var cfg Config
	cfg.KindeJWKSURL = s.Get(resources.EnvKindeWebhookJWKSURL)
	if cfg.KindeJWKSURL != "" {
		if err := kindewebhook.CheckURL(cfg.KindeJWKSURL); err != nil {
			return Config{}, fmt.Errorf("%s: %w", resources.EnvKindeWebhookJWKSURL, err)
		}
	}
	secret, err := c.Secret(ctx, resources.EnvStripeWebhookSecret, resources.EnvStripeWebhookSecretARN)
	if err != nil {
		return Config{}, fmt.Errorf("the Stripe webhook secret: %w", err)
	}
	cfg.StripeSecret = secret
	return cfg, nil
}
