package app

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/ferrymeter/ferry/internal/platform/kinde"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/platform/stripe"
	"github.com/ferrymeter/ferry/internal/reporting/corrections"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/reporting/report"
	"github.com/ferrymeter/ferry/internal/reporting/review"
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

// Meters are the reporting and reconciliation services a builder composed.
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
	// KindeMeter and Stripe are the providers' clients (nil when usage is not reported there).
	KindeMeter *kinde.Client
	Stripe     *stripe.Client
}

// providers builds the providers' clients the configuration asks for. MetersConfigFromEnv
// validated the configuration; a client that still cannot be built is a build error.
func (c *Composer) providers(m *Meters) {
	if k := c.Config.Meters.Kinde; k != nil {
		client, err := kinde.New(*k)
		c.fail(err)
		m.KindeMeter = client
	}
	if s := c.Config.Meters.Stripe; s != nil {
		client, err := stripe.New(*s)
		c.fail(err)
		m.Stripe = client
	}
}

// drainer is the Stripe outbox's drainer over the outbox and review tables.
func (c *Composer) drainer(m *Meters) {
	m.Outbox = &outbox.DynamoStore{DB: c.DynamoDB(), Table: c.Table(resources.TableOutbox, resources.ReadWrite)}
	m.Review = &review.DynamoStore{DB: c.DynamoDB(), Table: c.Table(resources.TableReview, resources.ReadWrite), Metrics: c.Metrics}
	m.Drainer = &outbox.Drainer{Store: m.Outbox, Review: m.Review, Metrics: c.Metrics, Log: c.Log, Now: c.Now, Sender: unconfiguredStripe{}}
	if m.Stripe != nil {
		m.Drainer.Sender = m.Stripe
	}
}

// reporting composes the reporter, the reconciler and corrections: everything the reporter, the
// reconciler and the meter API use.
func (c *Composer) reporting(fn *Function) {
	m := &fn.Meters
	c.providers(m)
	c.drainer(m)
	fn.Accounts = c.accounts(resources.Read, "", "")
	fn.Usage = c.usage(resources.ReadWrite)
	db := c.DynamoDB()
	m.State = &report.StateStore{DB: db, Table: c.Table(resources.TableMeters, resources.ReadWrite)}
	m.Evidence = &reconcile.EvidenceStore{DB: db, Table: c.Table(resources.TableEvidence, resources.ReadWrite)}
	m.Requests = &reconcile.Requests{DB: db, Table: c.Table(resources.TableEvidence, resources.ReadWrite), Now: c.Now}
	m.Reporter = &report.Reporter{
		Usage: fn.Usage, Marks: &report.MarkIndex{DB: db, Table: c.Table(resources.TableUsage, resources.ReadWrite)},
		State: m.State, Outbox: m.Outbox, Accounts: fn.Accounts, Catalog: c.Config.Catalog,
		Stripe: m.Stripe != nil, Review: m.Review, Reconcile: m.Requests, Metrics: c.Metrics, Log: c.Log, Now: c.Now,
	}
	m.Reconciler = &reconcile.Reconciler{
		Usage: fn.Usage,
		Ledger: &reconcile.LedgerReader{
			DB: db, LedgerTable: c.Table(resources.TableLedger, resources.Read), HoldsTable: c.Table(resources.TableHolds, resources.Read),
		},
		State: m.State, Outbox: m.Outbox, Drainer: m.Drainer, Accounts: fn.Accounts,
		Pager:   &reconcile.AccountPager{DB: db, Table: c.Table(resources.TableAccounts, resources.Read)},
		Catalog: c.Config.Catalog, Evidence: m.Evidence, Review: m.Review, Marks: m.Requests,
		Metrics: c.Metrics, Log: c.Log, Now: c.Now,
	}
	// A provider left off is a nil interface, never a typed nil.
	if m.KindeMeter != nil {
		m.Reporter.Kinde = m.KindeMeter
		m.Reconciler.Kinde = m.KindeMeter
	}
	if m.Stripe != nil {
		m.Reconciler.Stripe = m.Stripe
	}
	m.Corrections = &corrections.Service{Usage: fn.Usage, Accounts: fn.Accounts, Catalog: c.Config.Catalog, Review: m.Review, Now: c.Now}
}

// unconfiguredStripe refuses every send: no outbox row is written while Stripe is off, so it is
// reached only by a row written while it was on.
type unconfiguredStripe struct{}

func (unconfiguredStripe) Send(context.Context, stripe.MeterEvent) error {
	return &stripe.Error{What: "send meter event", Retryable: true, Msg: "Stripe is not configured in this deployment"}
}
