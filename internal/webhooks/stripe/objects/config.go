package objects

import (
	"context"
	"fmt"

	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// ConfigFromSettings reads whether the inbox worker re-fetches each Stripe event's object from
// Stripe (FERRY_STRIPE_REFETCH) and, when it does, the API it reads (FERRY_STRIPE_API_BASE) and the
// key (FERRY_STRIPE_API_KEY or the secret FERRY_STRIPE_API_KEY_SECRET_ARN names). nil: no re-fetch.
func ConfigFromSettings(ctx context.Context, c *compose.Composer) (*Config, error) {
	on, err := c.Settings().Bool(resources.EnvStripeRefetch)
	if err != nil || !on {
		return nil, err
	}
	key, err := c.Secret(ctx, resources.EnvStripeAPIKey, resources.EnvStripeAPIKeySecretARN)
	if err != nil {
		return nil, fmt.Errorf("the Stripe API key: %w", err)
	}
	return &Config{APIBase: c.Settings().Get(resources.EnvStripeAPIBase), APIKey: key}, nil
}
