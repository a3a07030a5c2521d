package limits

import (
	"context"
	"fmt"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Config selects where admissions read limits: the account's plan, or Kinde's billing
// entitlements through a machine-to-machine client.
type Config struct {
	// Source is SourcePlan ("" too) or SourceKinde.
	Source string
	Kinde  kinde.Config
}

// ConfigFromSettings reads the limit source of a function that admits holds: FERRY_LIMITS_SOURCE,
// and for kinde FERRY_KINDE_DOMAIN, FERRY_KINDE_CLIENT_ID and the client secret
// (FERRY_KINDE_CLIENT_SECRET, or the secret FERRY_KINDE_CLIENT_SECRET_ARN names). A misconfigured
// source is an error at start, never a silent fall back to another source.
func ConfigFromSettings(ctx context.Context, c *compose.Composer) (Config, error) {
	s := c.Settings()
	cfg := Config{Source: s.Get(resources.EnvLimitsSource)}
	switch cfg.Source {
	case "", SourcePlan:
		cfg.Source = SourcePlan
		return cfg, nil
	case SourceKinde:
	default:
		return Config{}, fmt.Errorf("%s=%q: use %q or %q", resources.EnvLimitsSource, cfg.Source, SourcePlan, SourceKinde)
	}
	secret, err := c.Secret(ctx, resources.EnvKindeClientSecret, resources.EnvKindeClientSecretARN)
	if err != nil {
		return Config{}, fmt.Errorf("the Kinde client secret: %w", err)
	}
	cfg.Kinde = kinde.Config{Domain: s.Get(resources.EnvKindeDomain), ClientID: s.Get(resources.EnvKindeClientID), ClientSecret: secret}
	if err := cfg.Kinde.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s=kinde: %w", resources.EnvLimitsSource, err)
	}
	return cfg, nil
}

// Compose builds the limit source a function's settings select. A setting that cannot be used
// fails the build — the function does not start, naming the setting — and never falls back to
// another source.
func Compose(ctx context.Context, c *compose.Composer) Source {
	cfg, err := ConfigFromSettings(ctx, c)
	if err != nil {
		c.Fail(err)
		return nil
	}
	if cfg.Source != SourceKinde {
		return Plan{Catalog: c.Config.Catalog}
	}
	client, err := kinde.New(cfg.Kinde)
	if err != nil {
		c.Fail(fmt.Errorf("%s=kinde: %w", resources.EnvLimitsSource, err))
		return nil
	}
	return &Cached{Fetch: client, CustomerID: kindeCustomer, Metrics: c.Metrics, Log: c.Log, Now: c.Now}
}

// kindeCustomer is the Kinde customer whose entitlements limit an account: the linked one, or
// (for accounts created before links) the account id.
func kindeCustomer(a accounts.Account) string {
	if a.KindeCustomerID != "" {
		return a.KindeCustomerID
	}
	return a.ID
}
