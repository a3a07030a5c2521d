// Package app composes each of Ferry's Lambda functions from its entry in resources.Functions: a
// small builder per function (functions.go) wires the services that function uses from a
// Composer that hands out only the resources the entry grants, so asking for anything else fails
// when the function is built, not with an AccessDenied in AWS. Every function's main, ferry dev
// and the tests build functions through the same builders and definitions, so what runs locally
// is what runs in AWS.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Config is everything the functions need besides resources and clients. A function gets only
// the settings its entry says it uses: the operator key only if it serves an operator route,
// the limit source only if it reads limits.
type Config struct {
	// OperatorKey authenticates the operator routes.
	OperatorKey    string
	Catalog        plans.Catalog
	Schema         analytics.Schema
	MaxQuarantines int
	// Limits selects where usage holds read limits from; the zero value reads the plans.
	Limits LimitsConfig
	// Meters selects the providers usage is reported to; the zero value reports to none.
	Meters MetersConfig
	// Inbox is where the webhook inbox's verification keys come from, and whether its worker
	// re-fetches Stripe objects.
	Inbox InboxConfig
	// APIURL is the stack's own public base URL (FERRY_API_URL): the console's labs drive the
	// stack through it, and a plain-http loopback URL makes the session cookie non-Secure.
	APIURL string
	// BatchMode packs the batch route's events into packed queue messages (ingest.SQSQueue.Pack).
	// The worker reads both kinds of message in either mode.
	BatchMode bool
}

// DefaultConfig is the configuration with the built-in catalog and schema and no operator key.
func DefaultConfig() Config {
	return Config{Catalog: plans.Default(), Schema: analytics.DefaultSchema, MaxQuarantines: worker.DefaultMaxQuarantines}
}

// ConfigFromEnv reads a function's configuration: the plans (FERRY_PLANS or the built-in
// catalog), the operator key when needOperatorKey (FERRY_ADMIN_KEY, or the Secrets Manager secret
// named by FERRY_ADMIN_KEY_SECRET_ARN) and the limit source when readsLimits.
func ConfigFromEnv(ctx context.Context, needOperatorKey, readsLimits bool) (Config, error) {
	cfg := DefaultConfig()
	if raw := os.Getenv(resources.EnvPlans); raw != "" {
		catalog, err := plans.Parse([]byte(raw))
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", resources.EnvPlans, err)
		}
		cfg.Catalog = catalog
	}
	if readsLimits {
		limits, err := LimitsConfigFromEnv(ctx)
		if err != nil {
			return Config{}, err
		}
		cfg.Limits = limits
	}
	switch raw := os.Getenv(resources.EnvBatchMode); raw {
	case "", "false":
	case "true":
		cfg.BatchMode = true
	default:
		return Config{}, fmt.Errorf("%s=%q: want true or false", resources.EnvBatchMode, raw)
	}
	// Only the functions the deployment gives the inbox's variables read anything here.
	inboxCfg, err := InboxConfigFromEnv(ctx)
	if err != nil {
		return Config{}, err
	}
	cfg.Inbox = inboxCfg
	cfg.APIURL = os.Getenv(resources.EnvAPIURL)
	if !needOperatorKey {
		return cfg, nil
	}
	cfg.OperatorKey = os.Getenv(resources.EnvAdminKey)
	if arn := os.Getenv(resources.EnvAdminKeySecretARN); cfg.OperatorKey == "" && arn != "" {
		key, err := readSecret(ctx, arn)
		if err != nil {
			return Config{}, err
		}
		cfg.OperatorKey = key
	}
	if cfg.OperatorKey == "" {
		return Config{}, errors.New("no operator key: set FERRY_ADMIN_KEY or FERRY_ADMIN_KEY_SECRET_ARN")
	}
	return cfg, nil
}

// LimitsConfig selects where admissions read limits: the account's plan, or Kinde's billing
// entitlements through a machine-to-machine client.
type LimitsConfig struct {
	// Source is limits.SourcePlan ("" too) or limits.SourceKinde.
	Source string
	Kinde  kinde.Config
}

// LimitsConfigFromEnv reads the limit source of a function that admits holds: FERRY_LIMITS_SOURCE,
// and for kinde FERRY_KINDE_DOMAIN, FERRY_KINDE_CLIENT_ID and the client secret
// (FERRY_KINDE_CLIENT_SECRET, or the Secrets Manager secret named by
// FERRY_KINDE_CLIENT_SECRET_ARN). A misconfigured source is an error at start, never a silent
// fall back to another source.
func LimitsConfigFromEnv(ctx context.Context) (LimitsConfig, error) {
	cfg := LimitsConfig{Source: os.Getenv(resources.EnvLimitsSource)}
	switch cfg.Source {
	case "", limits.SourcePlan:
		cfg.Source = limits.SourcePlan
		return cfg, nil
	case limits.SourceKinde:
	default:
		return LimitsConfig{}, fmt.Errorf("%s=%q: use %q or %q", resources.EnvLimitsSource, cfg.Source, limits.SourcePlan, limits.SourceKinde)
	}
	cfg.Kinde = kinde.Config{
		Domain: os.Getenv(resources.EnvKindeDomain), ClientID: os.Getenv(resources.EnvKindeClientID), ClientSecret: os.Getenv(resources.EnvKindeClientSecret),
	}
	if arn := os.Getenv(resources.EnvKindeClientSecretARN); cfg.Kinde.ClientSecret == "" && arn != "" {
		secret, err := readSecret(ctx, arn)
		if err != nil {
			return LimitsConfig{}, fmt.Errorf("the Kinde client secret: %w", err)
		}
		cfg.Kinde.ClientSecret = secret
	}
	if err := cfg.Kinde.Validate(); err != nil {
		return LimitsConfig{}, fmt.Errorf("%s=kinde: %w", resources.EnvLimitsSource, err)
	}
	return cfg, nil
}

// NewLimits builds the limit source a configuration selects. A Kinde source that cannot be built
// refuses every admission with the reason (fail closed) rather than falling back to the plans.
func NewLimits(cfg Config, log *slog.Logger, rec metrics.Recorder, now func() time.Time) limits.Source {
	if cfg.Limits.Source != limits.SourceKinde {
		return limits.Plan{Catalog: cfg.Catalog}
	}
	client, err := kinde.New(cfg.Limits.Kinde)
	if err != nil {
		log.Error("the Kinde limit source is misconfigured; every admission will be refused", "err", err)
		return unknownLimits{reason: "The limit source is misconfigured: " + err.Error()}
	}
	return &limits.Cached{Fetch: client, CustomerID: kindeCustomer, Metrics: rec, Log: log, Now: now}
}

// kindeCustomer is the Kinde customer whose entitlements limit an account: the linked one, or
// (for accounts created before links) the account id.
func kindeCustomer(a accounts.Account) string {
	if a.KindeCustomerID != "" {
		return a.KindeCustomerID
	}
	return a.ID
}

// unknownLimits is a source that knows no limit.
type unknownLimits struct{ reason string }

func (u unknownLimits) Limit(_ context.Context, acct accounts.Account, _ string) (plans.Limit, error) {
	return plans.Limit{}, &limits.UnknownError{CustomerID: acct.ID, Reason: u.reason}
}

func readSecret(ctx context.Context, arn string) (string, error) {
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return "", fmt.Errorf("load AWS configuration: %w", err)
	}
	out, err := secretsmanager.NewFromConfig(awsCfg).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return "", fmt.Errorf("read the secret %s: %w", arn, err)
	}
	return strings.TrimSpace(aws.ToString(out.SecretString)), nil
}

// NewLogger is the JSON logger every function uses, at FERRY_LOG_LEVEL (default info).
func NewLogger(out io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv(resources.EnvLogLevel))); err != nil {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: level}))
}
