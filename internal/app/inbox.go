package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/allowance"
	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/inbox"
	"github.com/ferrymeter/ferry/internal/inbox/webhooks"
	"github.com/ferrymeter/ferry/internal/metrics"
	kindewebhook "github.com/ferrymeter/ferry/internal/provider/kinde/webhook"
	"github.com/ferrymeter/ferry/internal/provider/stripe/objects"
	stripewebhook "github.com/ferrymeter/ferry/internal/provider/stripe/webhook"
	"github.com/ferrymeter/ferry/internal/resources"
)

// InboxConfig configures the webhook inbox.
type InboxConfig struct {
	// Webhooks are the verification keys: Kinde's JWKS URL and Stripe's signing secret.
	Webhooks webhooks.Config
	// Refetch, when set, makes the worker read each Stripe event's object again from Stripe.
	Refetch *objects.Config
}

// InboxConfigFromEnv reads the inbox's configuration: FERRY_KINDE_WEBHOOK_JWKS_URL (default
// from FERRY_KINDE_DOMAIN), FERRY_STRIPE_WEBHOOK_SECRET or the secret FERRY_STRIPE_WEBHOOK_
// SECRET_ARN names, and FERRY_STRIPE_REFETCH with FERRY_STRIPE_API_BASE and the API key
// (FERRY_STRIPE_API_KEY or FERRY_STRIPE_API_KEY_SECRET_ARN). A setting that cannot be used is
// an error at start; a provider left unconfigured answers its deliveries 503.
func InboxConfigFromEnv(ctx context.Context) (InboxConfig, error) {
	var cfg InboxConfig
	cfg.Webhooks.KindeJWKSURL = os.Getenv(resources.EnvKindeWebhookJWKSURL)
	if cfg.Webhooks.KindeJWKSURL == "" && os.Getenv(resources.EnvKindeDomain) != "" {
		cfg.Webhooks.KindeJWKSURL = kindewebhook.JWKSURLFor(os.Getenv(resources.EnvKindeDomain))
	}
	if cfg.Webhooks.KindeJWKSURL != "" {
		if err := kindewebhook.CheckURL(cfg.Webhooks.KindeJWKSURL); err != nil {
			return InboxConfig{}, fmt.Errorf("%s: %w", resources.EnvKindeWebhookJWKSURL, err)
		}
	}
	secret, err := secretFromEnv(ctx, resources.EnvStripeWebhookSecret, resources.EnvStripeWebhookSecretARN)
	if err != nil {
		return InboxConfig{}, fmt.Errorf("the Stripe webhook secret: %w", err)
	}
	cfg.Webhooks.StripeSecret = secret
	if raw := os.Getenv(resources.EnvStripeRefetch); raw != "" {
		on, err := strconv.ParseBool(raw)
		if err != nil {
			return InboxConfig{}, fmt.Errorf("%s=%q: want true or false", resources.EnvStripeRefetch, raw)
		}
		if on {
			key, err := secretFromEnv(ctx, resources.EnvStripeAPIKey, resources.EnvStripeAPIKeySecretARN)
			if err != nil {
				return InboxConfig{}, fmt.Errorf("the Stripe API key: %w", err)
			}
			cfg.Refetch = &objects.Config{APIBase: os.Getenv(resources.EnvStripeAPIBase), APIKey: key}
		}
	}
	return cfg, nil
}

// secretFromEnv reads a secret from its variable, or from the Secrets Manager secret the ARN
// variable names ("" when neither is set).
func secretFromEnv(ctx context.Context, valueVar, arnVar string) (string, error) {
	if v := os.Getenv(valueVar); v != "" {
		return v, nil
	}
	if arn := os.Getenv(arnVar); arn != "" {
		return readSecret(ctx, arn)
	}
	return "", nil
}

// Inbox is the webhook inbox's composed services.
type Inbox struct {
	Store      *inbox.DynamoStore
	Intake     *inbox.Intake
	Worker     *inbox.Worker
	Reader     *inbox.Reader
	Receiver   *webhooks.Receiver
	MeterMarks inbox.MeterMarks
}

func newInbox(cfg Config, clients cloud.Clients, accts *accounts.Service, grants *allowance.DynamoStore,
	log *slog.Logger, rec metrics.Recorder, now func() time.Time) *Inbox {
	names := cfg.Names
	accountsStore, _ := accts.Store.(*accounts.DynamoStore)
	store := &inbox.DynamoStore{
		DB: clients.DynamoDB, Table: names.Table(resources.TableInbox), Accounts: accountsStore, Grants: grants,
	}
	nudger := &inbox.SQSNudger{Client: clients.SQS, URL: names.QueueURL(resources.QueueInbox)}
	b := &Inbox{Store: store, MeterMarks: inbox.MeterMarkReader{Store: store}}
	b.Intake = &inbox.Intake{Store: store, Nudger: nudger, Metrics: rec, Log: log, Now: now}
	b.Receiver = &webhooks.Receiver{Config: cfg.Inbox.Webhooks, Intake: b.Intake, Metrics: rec, Log: log, Now: now}
	b.Reader = &inbox.Reader{Store: store, Nudger: nudger, Log: log, Now: now}
	stripeReader := stripewebhook.Interpreter{}
	if cfg.Inbox.Refetch != nil {
		client, err := objects.New(*cfg.Inbox.Refetch)
		if err != nil {
			// Fail every Stripe event's attempt (visibly, with backoff, then DEAD and its alarm)
			// rather than apply it from the payload the deployment said not to trust.
			log.Error("the Stripe re-fetch is misconfigured; Stripe events will fail", "err", err)
			stripeReader.Refetch = brokenFetcher{err: err}
		} else {
			stripeReader.Refetch = client
		}
	}
	b.Worker = &inbox.Worker{
		Store: store, Accounts: accts, Grants: grants, Catalog: cfg.Catalog, Nudger: nudger, Metrics: rec, Log: log, Now: now,
		Interpreters: map[inbox.Source]inbox.Interpreter{inbox.Kinde: kindewebhook.Interpreter{}, inbox.Stripe: stripeReader},
	}
	return b
}

// brokenFetcher is the re-fetch of a misconfigured deployment: every call fails with why.
type brokenFetcher struct{ err error }

func (b brokenFetcher) Object(context.Context, string, string) (json.RawMessage, error) {
	return nil, b.err
}
