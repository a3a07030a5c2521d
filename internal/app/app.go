// Package app composes Ferry's services from configuration and SDK clients. Every Lambda
// function's main, ferry dev and the tests build the same graph through it, so what runs locally
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
	"github.com/ferrymeter/ferry/internal/analytics"
	"github.com/ferrymeter/ferry/internal/archive"
	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/httpapi"
	"github.com/ferrymeter/ferry/internal/idempotency"
	"github.com/ferrymeter/ferry/internal/ingest"
	"github.com/ferrymeter/ferry/internal/ledger"
	"github.com/ferrymeter/ferry/internal/limits"
	"github.com/ferrymeter/ferry/internal/metrics"
	"github.com/ferrymeter/ferry/internal/plans"
	"github.com/ferrymeter/ferry/internal/provider/kinde"
	"github.com/ferrymeter/ferry/internal/ratelimit"
	"github.com/ferrymeter/ferry/internal/resources"
	"github.com/ferrymeter/ferry/internal/usage"
	"github.com/ferrymeter/ferry/internal/worker"
)

// Config is everything the services need besides clients.
type Config struct {
	Names          resources.Names
	AdminKey       string
	Catalog        plans.Catalog
	Schema         analytics.Schema
	MaxQuarantines int
	// Limits selects where usage holds read limits from; the zero value reads the plans.
	Limits LimitsConfig
	// Meters selects the providers usage is reported to; the zero value reports to none.
	Meters MetersConfig
}

// ConfigFromEnv reads a function's configuration: resource names, plans (FERRY_PLANS or the
// built-in catalog) and, when needAdminKey is set, the operator key (FERRY_ADMIN_KEY, or the
// Secrets Manager secret named by FERRY_ADMIN_KEY_SECRET_ARN).
func ConfigFromEnv(ctx context.Context, needAdminKey bool) (Config, error) {
	names, err := resources.NamesFromEnv(nil)
	if err != nil {
		return Config{}, err
	}
	catalog := plans.Default()
	if raw := os.Getenv(resources.EnvPlans); raw != "" {
		if catalog, err = plans.Parse([]byte(raw)); err != nil {
			return Config{}, fmt.Errorf("%s: %w", resources.EnvPlans, err)
		}
	}
	cfg := Config{Names: names, Catalog: catalog, Schema: analytics.DefaultSchema, MaxQuarantines: worker.DefaultMaxQuarantines}
	if !needAdminKey {
		return cfg, nil
	}
	cfg.AdminKey = os.Getenv(resources.EnvAdminKey)
	if arn := os.Getenv(resources.EnvAdminKeySecretARN); cfg.AdminKey == "" && arn != "" {
		if cfg.AdminKey, err = readSecret(ctx, arn); err != nil {
			return Config{}, err
		}
	}
	if cfg.AdminKey == "" {
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

// newLimits builds the limit source a configuration selects. A Kinde source that cannot be built
// refuses every admission with the reason (fail closed) rather than falling back to the plans.
func newLimits(cfg Config, log *slog.Logger, rec metrics.Recorder, now func() time.Time) limits.Source {
	if cfg.Limits.Source != limits.SourceKinde {
		return limits.Plan{Catalog: cfg.Catalog}
	}
	client, err := kinde.New(cfg.Limits.Kinde)
	if err != nil {
		log.Error("the Kinde limit source is misconfigured; every admission will be refused", "err", err)
		return unknownLimits{reason: "The limit source is misconfigured: " + err.Error()}
	}
	return &limits.Cached{Fetch: client, Metrics: rec, Log: log, Now: now}
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

// App is the composed service graph.
type App struct {
	Config    Config
	Clients   cloud.Clients
	Accounts  *accounts.Service
	Ledger    *ledger.DynamoStore
	Usage     usage.Table
	Archive   *archive.S3
	Analytics *analytics.DynamoWriter
	Ingest    *ingest.Service
	Worker    *worker.Worker
	API       *httpapi.API
	Log       *slog.Logger
	Metrics   metrics.Recorder
	Now       func() time.Time

	// Idempotency claims Idempotency-Keys for every mutating route. Its middleware is installed
	// on API here, so every function, ferry dev and the tests get it.
	Idempotency *idempotency.Service

	// Holds runs the usage holds and their sweeper; Limits is where admissions read limits.
	Holds  *holds.Service
	Limits limits.Source

	// Meters reports usage to the providers and reconciles their meters with the ledger.
	Meters *Meters
}

// New composes the services. now is the clock every service reads (once per unit of work).
func New(cfg Config, clients cloud.Clients, log *slog.Logger, rec metrics.Recorder, now func() time.Time) *App {
	names := cfg.Names
	a := &App{Config: cfg, Clients: clients, Log: log, Metrics: rec, Now: now}
	a.Accounts = &accounts.Service{
		Store: &accounts.DynamoStore{
			DB: clients.DynamoDB, AccountsTable: names.Table(resources.TableAccounts), KeysTable: names.Table(resources.TableAPIKeys),
			LinksTable: names.Table(resources.TableAccountLinks),
		},
		Catalog: cfg.Catalog, Now: now,
	}
	a.Usage = usage.Table{DB: clients.DynamoDB, Name: names.Table(resources.TableUsage)}
	a.Ledger = &ledger.DynamoStore{DB: clients.DynamoDB, Table: names.Table(resources.TableLedger), Usage: a.Usage}
	a.Archive = &archive.S3{Client: clients.S3, Bucket: names.Bucket(resources.BucketArchive)}
	a.Analytics = &analytics.DynamoWriter{DB: clients.DynamoDB, Table: names.Table(resources.TableAnalytics)}
	a.Ingest = &ingest.Service{
		Queue:  &ingest.SQSQueue{Client: clients.SQS, URL: names.QueueURL(resources.QueueEvents)},
		Ledger: a.Ledger,
		Usage:  a.Usage, Catalog: cfg.Catalog, Metrics: rec, Log: log, Now: now,
	}
	a.Worker = &worker.Worker{
		Accounts: a.Accounts, Ledger: a.Ledger, Archive: a.Archive, Analytics: a.Analytics,
		Schema: cfg.Schema, Catalog: cfg.Catalog, Metrics: rec, Log: log, Now: now,
		MaxQuarantines: cfg.MaxQuarantines,
	}
	a.Limits = newLimits(cfg, log, rec, now)
	a.Holds = &holds.Service{
		Store: &holds.DynamoStore{
			DB: clients.DynamoDB, Table: names.Table(resources.TableHolds), Usage: a.Usage,
			RateLimits: ratelimit.Table{DB: clients.DynamoDB, Name: names.Table(resources.TableRateLimits)},
		},
		Accounts: a.Accounts, Limits: a.Limits, Catalog: cfg.Catalog, Metrics: rec, Log: log, Now: now,
	}
	a.Meters = newMeters(a, cfg.Meters, clients, log, rec)
	a.API = httpapi.New(httpapi.Deps{
		Accounts: a.Accounts, Ingest: a.Ingest, Events: a.Ledger, Usage: a.Usage, Catalog: cfg.Catalog,
		Holds: a.Holds, AdminKey: cfg.AdminKey, Log: log, Now: now, Limits: a.Limits,
		Meters: httpapi.MeterDeps{
			Corrections: a.Meters.Corrections, Reporter: a.Meters.Reporter, Reconciler: a.Meters.Reconciler,
			Evidence: a.Meters.Evidence, Review: a.Meters.Review, Drainer: a.Meters.Drainer,
		},
	})
	a.Idempotency = &idempotency.Service{
		Store:  &idempotency.DynamoStore{DB: clients.DynamoDB, Table: names.Table(resources.TableIdempotency)},
		Policy: idempotency.DefaultPolicy(), Now: now,
	}
	a.API.Use(httpapi.Idempotency(a.Idempotency, log))
	return a
}

// FromEnv composes the app the way a Lambda function runs it: configuration from the
// environment, clients built once for the container, JSON logs and EMF metrics on stdout, the
// wall clock.
func FromEnv(ctx context.Context, needAdminKey bool) (*App, error) {
	log := NewLogger(os.Stdout)
	cfg, err := ConfigFromEnv(ctx, needAdminKey)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	if cfg.Limits, err = LimitsConfigFromEnv(ctx); err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	if cfg.Meters, err = MetersConfigFromEnv(ctx); err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	clients, err := cloud.New(ctx, cloud.EndpointsFromEnv(), cloud.Options{})
	if err != nil {
		return nil, fmt.Errorf("clients: %w", err)
	}
	return New(cfg, clients, log, metrics.NewEMF(os.Stdout, time.Now), time.Now), nil
}
