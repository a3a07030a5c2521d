package app

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	webhooks "github.com/ferrymeter/ferry/internal/webhooks/intake"
	kindewebhook "github.com/ferrymeter/ferry/internal/webhooks/kinde"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
	"github.com/ferrymeter/ferry/internal/webhooks/stripe/objects"
)

// The webhook inbox's builders.
var (
	// BuildWebhooks composes the webhooks function: verify Kinde's and Stripe's deliveries, store
	// them, nudge the worker.
	BuildWebhooks = Builder{Function: resources.FunctionWebhooks, Build: buildWebhooks}
	// BuildInbox composes the inbox worker: claim a stored event, apply its effect with its mark.
	BuildInbox = Builder{Function: resources.FunctionInbox, Build: buildInbox}
	// BuildInboxSweep composes the sweep that nudges every due or lease-expired event.
	BuildInboxSweep = Builder{Function: resources.FunctionInboxSweep, Build: buildInboxSweep}
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
// (FERRY_STRIPE_API_KEY or FERRY_STRIPE_API_KEY_SECRET_ARN). Only the functions the deployment
// gives those variables read them. A setting that cannot be used is an error at start; a
// provider left unconfigured answers its deliveries 503.
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

// Inbox is the webhook inbox's services in one function: the ones its builder composed.
type Inbox struct {
	Store    *inbox.DynamoStore
	Intake   *inbox.Intake
	Worker   *inbox.Worker
	Reader   *inbox.Reader
	Receiver *webhooks.Receiver
	// MeterMarks is the reconciler's reader of the provider meter marks.
	MeterMarks inbox.MeterMarks
}

// inboxStore is the inbox table at access, with the accounts and grants its apply transactions
// span when the function applies events (nil otherwise).
func (c *Composer) inboxStore(access resources.Access, fn *Function) *inbox.DynamoStore {
	s := &inbox.DynamoStore{DB: c.DynamoDB(), Table: c.Table(resources.TableInbox, access)}
	if fn.Accounts != nil {
		s.Accounts, _ = fn.Accounts.Store.(*accounts.DynamoStore)
	}
	if fn.Allowances != nil {
		s.Grants = fn.Allowances.Store
	}
	return s
}

// nudger sends to the inbox queue.
func (c *Composer) nudger() *inbox.SQSNudger {
	return &inbox.SQSNudger{Client: c.Clients.SQS, URL: c.QueueURL(resources.QueueInbox, resources.Send)}
}

// allowances is the grants table at access.
func (c *Composer) allowances(access resources.Access) *allowance.Service {
	return &allowance.Service{
		Store: &allowance.DynamoStore{DB: c.DynamoDB(), Table: c.Table(resources.TableGrants, access)}, Catalog: c.Config.Catalog, Now: c.Now,
	}
}

func buildWebhooks(c *Composer) (*Function, error) {
	fn := c.Function()
	store := c.inboxStore(resources.ReadWrite, fn)
	intake := &inbox.Intake{Store: store, Nudger: c.nudger(), Metrics: c.Metrics, Log: c.Log, Now: c.Now}
	receiver := &webhooks.Receiver{Config: c.Config.Inbox.Webhooks, Intake: intake, Metrics: c.Metrics, Log: c.Log, Now: c.Now}
	fn.Inbox = &Inbox{Store: store, Intake: intake, Receiver: receiver}
	api := httpapi.New(httpapi.Deps{Webhooks: receiver})
	// The deliveries authenticate by their providers' signatures: the receiver verifies them.
	return c.Serve(fn, api, httpapi.Authentication{Signatures: receiver}), nil
}

func buildInbox(c *Composer) (*Function, error) {
	fn := c.Function()
	// Accounts: the plan and status an event changes, found through the provider's link.
	fn.Accounts = c.accounts(resources.ReadWrite, "", resources.Read)
	fn.Allowances = c.allowances(resources.ReadWrite)
	store := c.inboxStore(resources.ReadWrite, fn)
	stripeReader := stripewebhook.Interpreter{}
	if refetch := c.Config.Inbox.Refetch; refetch != nil {
		client, err := objects.New(*refetch)
		if err != nil {
			// Fail every Stripe event's attempt (visibly, with backoff, then DEAD and its alarm)
			// rather than apply it from the payload the deployment said not to trust.
			c.Log.Error("the Stripe re-fetch is misconfigured; Stripe events will fail", "err", err)
			stripeReader.Refetch = brokenFetcher{err: err}
		} else {
			stripeReader.Refetch = client
		}
	}
	worker := &inbox.Worker{
		Store: store, Accounts: fn.Accounts, Grants: fn.Allowances.Store, Catalog: c.Config.Catalog,
		Nudger: c.nudger(), Metrics: c.Metrics, Log: c.Log, Now: c.Now,
		Interpreters: map[inbox.Source]inbox.Interpreter{inbox.Kinde: kindewebhook.Interpreter{}, inbox.Stripe: stripeReader},
	}
	fn.Inbox = &Inbox{Store: store, Worker: worker, MeterMarks: inbox.MeterMarkReader{Store: store}}
	fn.Consume = worker.HandleSQS
	return fn, nil
}

func buildInboxSweep(c *Composer) (*Function, error) {
	fn := c.Function()
	// The sweep only reads which events are due and nudges the worker; it applies nothing.
	store := c.inboxStore(resources.Read, fn)
	worker := &inbox.Worker{Store: store, Nudger: c.nudger(), Metrics: c.Metrics, Log: c.Log, Now: c.Now}
	fn.Inbox = &Inbox{Store: store, Worker: worker}
	// A run fails when it cannot nudge, which the function's Errors alarm reports; the next run
	// nudges again.
	fn.Run = func(ctx context.Context) error {
		res, err := worker.Sweep(ctx)
		c.Log.Info("inbox sweep done", "found", res.Found, "nudged", res.Nudged)
		return err
	}
	return fn, nil
}

// brokenFetcher is the re-fetch of a misconfigured deployment: every call fails with why.
type brokenFetcher struct{ err error }

func (b brokenFetcher) Object(context.Context, string, string) (json.RawMessage, error) {
	return nil, b.err
}
