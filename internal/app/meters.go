package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/corrections"
	"github.com/ferrymeter/ferry/internal/metrics"
	"github.com/ferrymeter/ferry/internal/outbox"
	"github.com/ferrymeter/ferry/internal/provider/kinde"
	"github.com/ferrymeter/ferry/internal/provider/stripe"
	"github.com/ferrymeter/ferry/internal/reconcile"
	"github.com/ferrymeter/ferry/internal/report"
	"github.com/ferrymeter/ferry/internal/resources"
	"github.com/ferrymeter/ferry/internal/review"
)

// MetersConfig says which providers' meters usage is reported to. A nil provider is not
// reported to.
type MetersConfig struct {
	Kinde  *kinde.Config
	Stripe *stripe.Config
}

// MetersConfigFromEnv reads the providers usage is reported to: Kinde when FERRY_REPORT_KINDE is
// "true" (with the Kinde client's FERRY_KINDE_* settings), Stripe when an API key is given
// (FERRY_STRIPE_API_KEY, or the Secrets Manager secret FERRY_STRIPE_API_KEY_SECRET_ARN names;
// FERRY_STRIPE_API_BASE for a stand-in). A provider that is asked for but misconfigured is an
// error at start, never a silent stop of reporting.
func MetersConfigFromEnv(ctx context.Context) (MetersConfig, error) {
	var cfg MetersConfig
	if raw := os.Getenv(resources.EnvReportKinde); raw != "" {
		on, err := strconv.ParseBool(raw)
		if err != nil {
			return MetersConfig{}, fmt.Errorf("%s=%q: want true or false", resources.EnvReportKinde, raw)
		}
		if on {
			kc := kinde.Config{
				Domain: os.Getenv(resources.EnvKindeDomain), ClientID: os.Getenv(resources.EnvKindeClientID),
				ClientSecret: os.Getenv(resources.EnvKindeClientSecret),
			}
			if arn := os.Getenv(resources.EnvKindeClientSecretARN); kc.ClientSecret == "" && arn != "" {
				secret, err := readSecret(ctx, arn)
				if err != nil {
					return MetersConfig{}, fmt.Errorf("the Kinde client secret: %w", err)
				}
				kc.ClientSecret = secret
			}
			if err := kc.Validate(); err != nil {
				return MetersConfig{}, fmt.Errorf("%s=true: %w", resources.EnvReportKinde, err)
			}
			cfg.Kinde = &kc
		}
	}
	sc := stripe.Config{APIKey: os.Getenv(resources.EnvStripeAPIKey), APIBase: os.Getenv(resources.EnvStripeAPIBase)}
	if arn := os.Getenv(resources.EnvStripeAPIKeySecretARN); sc.APIKey == "" && arn != "" {
		key, err := readSecret(ctx, arn)
		if err != nil {
			return MetersConfig{}, fmt.Errorf("the Stripe API key: %w", err)
		}
		sc.APIKey = key
	}
	if sc.APIKey != "" || sc.APIBase != "" {
		if err := sc.Validate(); err != nil {
			return MetersConfig{}, fmt.Errorf("Stripe: %w", err)
		}
		cfg.Stripe = &sc
	}
	return cfg, nil
}

// Meters is the reporting and reconciliation graph.
type Meters struct {
	Reporter    *report.Reporter
	Drainer     *outbox.Drainer
	Reconciler  *reconcile.Reconciler
	Corrections *corrections.Service
	Evidence    *reconcile.EvidenceStore
	Review      *review.DynamoStore
	Requests    *reconcile.Requests
	Outbox      *outbox.DynamoStore
	State       *report.StateStore
	// Kinde and Stripe are the providers' clients (nil when usage is not reported there).
	Kinde  *kinde.Client
	Stripe *stripe.Client
}

// newMeters composes reporting and reconciliation. A provider client that cannot be built
// leaves that provider off with an error logged; MetersConfigFromEnv has validated the
// configuration, so this happens only with a configuration built by hand.
func newMeters(a *App, cfg MetersConfig, clients cloud.Clients, log *slog.Logger, rec metrics.Recorder) *Meters {
	names := a.Config.Names
	db := clients.DynamoDB
	m := &Meters{
		Evidence: &reconcile.EvidenceStore{DB: db, Table: names.Table(resources.TableEvidence)},
		Review:   &review.DynamoStore{DB: db, Table: names.Table(resources.TableReview), Metrics: rec},
		Requests: &reconcile.Requests{DB: db, Table: names.Table(resources.TableEvidence), Now: a.Now},
		Outbox:   &outbox.DynamoStore{DB: db, Table: names.Table(resources.TableOutbox)},
		State:    &report.StateStore{DB: db, Table: names.Table(resources.TableMeters)},
	}
	if cfg.Kinde != nil {
		c, err := kinde.New(*cfg.Kinde)
		if err != nil {
			log.Error("the Kinde meter client is misconfigured; usage is not reported to Kinde", "err", err)
		} else {
			m.Kinde = c
		}
	}
	if cfg.Stripe != nil {
		c, err := stripe.New(*cfg.Stripe)
		if err != nil {
			log.Error("the Stripe client is misconfigured; usage is not reported to Stripe", "err", err)
		} else {
			m.Stripe = c
		}
	}
	m.Drainer = &outbox.Drainer{Store: m.Outbox, Review: m.Review, Metrics: rec, Log: log, Now: a.Now}
	if m.Stripe != nil {
		m.Drainer.Sender = m.Stripe
	} else {
		m.Drainer.Sender = unconfiguredStripe{}
	}
	m.Reporter = &report.Reporter{
		Usage: a.Usage, Marks: &report.MarkIndex{DB: db, Table: names.Table(resources.TableUsage)},
		State: m.State, Outbox: m.Outbox, Accounts: a.Accounts, Catalog: a.Config.Catalog,
		Stripe: m.Stripe != nil, Review: m.Review, Reconcile: m.Requests, Metrics: rec, Log: log, Now: a.Now,
	}
	m.Reconciler = &reconcile.Reconciler{
		Usage: a.Usage,
		Ledger: &reconcile.LedgerReader{
			DB: db, LedgerTable: names.Table(resources.TableLedger), HoldsTable: names.Table(resources.TableHolds),
		},
		State: m.State, Outbox: m.Outbox, Drainer: m.Drainer, Accounts: a.Accounts,
		Pager:   &reconcile.AccountPager{DB: db, Table: names.Table(resources.TableAccounts)},
		Catalog: a.Config.Catalog, Evidence: m.Evidence, Review: m.Review, Marks: m.Requests,
		Metrics: rec, Log: log, Now: a.Now,
	}
	// Typed nils must not become non-nil interfaces: a provider left off is nil.
	if m.Kinde != nil {
		m.Reporter.Kinde = m.Kinde
		m.Reconciler.Kinde = m.Kinde
	}
	if m.Stripe != nil {
		m.Reconciler.Stripe = m.Stripe
	}
	m.Corrections = &corrections.Service{Usage: a.Usage, Accounts: a.Accounts, Catalog: a.Config.Catalog, Review: m.Review, Now: a.Now}
	return m
}

// unconfiguredStripe refuses every send: no outbox row is written while Stripe is off, so it is
// reached only by a row written while it was on.
type unconfiguredStripe struct{}

func (unconfiguredStripe) Send(context.Context, stripe.MeterEvent) error {
	return &stripe.Error{What: "send meter event", Retryable: true, Msg: "Stripe is not configured in this deployment"}
}
