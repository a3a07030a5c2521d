package compose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Config is what every function may need besides its resources, clients and settings: the
// operator key (only a function that serves an operator route gets it) and the plan catalog.
type Config struct {
	// OperatorKey authenticates the operator routes.
	OperatorKey string
	Catalog     plans.Catalog
}

// DefaultConfig is the configuration with the built-in catalog and no operator key.
func DefaultConfig() Config { return Config{Catalog: plans.Default()} }

// Settings are a deployment's settings, by environment variable: what the CDK app sets on each
// function (resources.FunctionEnv), and what ferry dev and the tests give the functions they
// build. A capability reads the ones it uses where its function is composed, so a setting that
// cannot be used fails that function at start, naming it, and no other function reads it.
type Settings map[string]string

// Get returns a setting ("" when unset).
func (s Settings) Get(name string) string { return s[name] }

// With returns a copy of s with overlay's settings set over it.
func (s Settings) With(overlay Settings) Settings {
	out := Settings{}
	for k, v := range s {
		out[k] = v
	}
	for k, v := range overlay {
		out[k] = v
	}
	return out
}

// Bool reads a true/false setting; unset is false.
func (s Settings) Bool(name string) (bool, error) { return s.BoolOr(name, false) }

// BoolOr reads a true/false setting; unset is unset.
func (s Settings) BoolOr(name string, unset bool) (bool, error) {
	raw := s[name]
	if raw == "" {
		return unset, nil
	}
	on, err := strconv.ParseBool(raw)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, raw)
	}
	return on, nil
}

// RetiredBool checks a true/false setting an earlier release read and this one does not. Unset,
// or set to same — what this release does anyway — it changes nothing: the function starts, and
// logs that the setting is ignored. Set to anything else, the deployment asks for behaviour this
// release no longer has, and the function refuses to start, naming the setting and why (what
// replaced it), rather than silently running something other than what was asked for.
func (c *Composer) RetiredBool(name string, same bool, why string) error {
	raw := c.settings.Get(name)
	if raw == "" {
		return nil
	}
	if on, err := strconv.ParseBool(raw); err != nil || on != same {
		return fmt.Errorf("%s=%q: %s; remove the setting", name, raw, why)
	}
	if c.Log != nil {
		c.Log.Warn("retired setting ignored: it asks for what this release does anyway; remove it", "setting", name, "value", raw, "why", why)
	}
	return nil
}

// SettingsFromEnv reads Ferry's variables (FERRY_*) from the process environment: a Lambda
// function's settings, as the CDK app set them.
func SettingsFromEnv() Settings {
	s := Settings{}
	for _, kv := range os.Environ() {
		if name, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(name, "FERRY_") {
			s[name] = v
		}
	}
	return s
}

// SecretReader reads a secret by its ARN (Secrets Manager in AWS).
type SecretReader func(ctx context.Context, arn string) (string, error)

// Secret reads a secret from its variable, or from the secret the ARN variable names ("" when
// neither is set). Settings carry no reader of their own: the function's composer passes its
// environment's.
func (s Settings) Secret(ctx context.Context, read SecretReader, valueVar, arnVar string) (string, error) {
	if v := s[valueVar]; v != "" {
		return v, nil
	}
	arn := s[arnVar]
	if arn == "" {
		return "", nil
	}
	if read == nil {
		return "", fmt.Errorf("%s names a secret, and this environment reads no secrets", arnVar)
	}
	return read(ctx, arn)
}

// Secret reads a secret the way Settings.Secret does, with the function's secret reader.
func (c *Composer) Secret(ctx context.Context, valueVar, arnVar string) (string, error) {
	return c.settings.Secret(ctx, c.secrets, valueVar, arnVar)
}

// ConfigFromSettings reads the configuration every function shares: the plans (FERRY_PLANS or the
// built-in catalog) and, when needOperatorKey, the operator key (FERRY_ADMIN_KEY, or the secret
// FERRY_ADMIN_KEY_SECRET_ARN names).
func ConfigFromSettings(ctx context.Context, s Settings, read SecretReader, needOperatorKey bool) (Config, error) {
	cfg := DefaultConfig()
	if raw := s.Get(resources.EnvPlans); raw != "" {
		catalog, err := plans.Parse([]byte(raw))
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", resources.EnvPlans, err)
		}
		cfg.Catalog = catalog
	}
	if !needOperatorKey {
		return cfg, nil
	}
	key, err := s.Secret(ctx, read, resources.EnvAdminKey, resources.EnvAdminKeySecretARN)
	if err != nil {
		return Config{}, fmt.Errorf("the operator key: %w", err)
	}
	if key == "" {
		return Config{}, errors.New("no operator key: set FERRY_ADMIN_KEY or FERRY_ADMIN_KEY_SECRET_ARN")
	}
	cfg.OperatorKey = key
	return cfg, nil
}

// NewLogger is the JSON logger every function uses, at FERRY_LOG_LEVEL (default info).
func NewLogger(out io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv(resources.EnvLogLevel))); err != nil {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: level}))
}
