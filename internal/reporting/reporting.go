// Package reporting composes what keeps the providers' meters a copy of Ferry's ledger — the
// reporter, the Stripe outbox and its drainer, the reconciler, corrections, the evidence and the
// review list — for the functions that run them (reporter, drainer, reconciler, meterapi). The
// services themselves live in the packages below it.
package reporting

import (
	"context"
	"fmt"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/platform/stripe"
	"github.com/ferrymeter/ferry/internal/reporting/corrections"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/reporting/report"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

// Config says which providers' meters usage is reported to. A nil provider is not reported to.
type Config struct {
	Kinde  *kinde.Config
	Stripe *stripe.Config
}

// ConfigFromSettings reads the providers usage is reported to: Kinde when FERRY_REPORT_KINDE is
// "true" (with the Kinde client's FERRY_KINDE_* settings), Stripe when an API key is given
// (FERRY_STRIPE_API_KEY, or the secret FERRY_STRIPE_API_KEY_SECRET_ARN names; FERRY_STRIPE_API_BASE
// for a stand-in). A provider that is asked for but misconfigured is an error at start, never a
// silent stop of reporting.
func ConfigFromSettings(ctx context.Context, c *compose.Composer) (Config, error) {
	var cfg Config
	s := c.Settings()
	on, err := s.Bool(resources.EnvReportKinde)
	if err != nil {
		return Config{}, err
	}
	if on {
		secret, err := c.Secret(ctx, resources.EnvKindeClientSecret, resources.EnvKindeClientSecretARN)
		if err != nil {
			return Config{}, fmt.Errorf("the Kinde client secret: %w", err)
		}
		kc := kinde.Config{Domain: s.Get(resources.EnvKindeDomain), ClientID: s.Get(resources.EnvKindeClientID), ClientSecret: secret}
		if err := kc.Validate(); err != nil {
			return Config{}, fmt.Errorf("%s=true: %w", resources.EnvReportKinde, err)
		}
		cfg.Kinde = &kc
	}
	key, err := c.Secret(ctx, resources.EnvStripeAPIKey, resources.EnvStripeAPIKeySecretARN)
	if err != nil {
		return Config{}, fmt.Errorf("the Stripe API key: %w", err)
	}
	if sc := (stripe.Config{APIKey: key, APIBase: s.Get(resources.EnvStripeAPIBase)}); sc.APIKey != "" || sc.APIBase != "" {
		if err := sc.Validate(); err != nil {
			return Config{}, fmt.Errorf("Stripe: %w", err)
		}
		cfg.Stripe = &sc
	}
	return cfg, nil
}

// Parts are the reporting and reconciliation services a function composed.
type Parts struct {
	Accounts    *accounts.Service
	Usage       usage.Table
	Reporter    *report.Reporter
	Drainer     *outbox.Drainer
	Reconciler  *reconcile.Reconciler
	Corrections *corrections.Service
	Evidence    *reconcile.EvidenceStore
	Review      *review.Table
	Requests    *reconcile.Requests
	Outbox      *outbox.Table
	State       *report.StateStore
	// KindeMeter and Stripe are the providers' clients (nil when usage is not reported there).
	KindeMeter *kinde.Client
	Stripe     *stripe.Client
}

// Drainer composes the providers' clients the settings ask for and the Stripe outbox's drainer
// over the outbox and review tables: what the drainer function runs.
func Drainer(c *compose.Composer) *Parts {
	p := &Parts{}
	cfg, err := ConfigFromSettings(context.Background(), c)
	c.Fail(err)
	if cfg.Kinde != nil {
		client, err := kinde.New(*cfg.Kinde)
		c.Fail(err)
		p.KindeMeter = client
	}
	if cfg.Stripe != nil {
		client, err := stripe.New(*cfg.Stripe)
		c.Fail(err)
		p.Stripe = client
	}
	// A row the drainer marks DEAD is marked with its notification (outbox.dead).
	p.Outbox = &outbox.Table{DB: c.DynamoDB(), Table: c.Table(resources.TableOutbox, resources.ReadWrite),
		Notifications: c.Table(resources.TableNotifications, resources.ReadWrite)}
	p.Review = &review.Table{DB: c.DynamoDB(), Table: c.Table(resources.TableReview, resources.ReadWrite), Metrics: c.Metrics}
	p.Drainer = &outbox.Drainer{Store: p.Outbox, Review: p.Review, Metrics: c.Metrics, Log: c.Log, Now: c.Now, Sender: unconfiguredStripe{}}
	if p.Stripe != nil {
		p.Drainer.Sender = p.Stripe
	}
	return p
}

// Compose composes the reporter, the reconciler and corrections over the drainer's parts:
// everything the reporter, the reconciler and the meter API use.
func Compose(c *compose.Composer) *Parts {
	p := Drainer(c)
	db := c.DynamoDB()
	p.Accounts = &accounts.Service{
		Store:   &accounts.Table{DB: db, AccountsTable: c.Table(resources.TableAccounts, resources.Read)},
		Catalog: c.Config.Catalog, Now: c.Now,
	}
	p.Usage = usage.Table{DB: db, Name: c.Table(resources.TableUsage, resources.ReadWrite)}
	p.State = &report.StateStore{DB: db, Table: c.Table(resources.TableMeters, resources.ReadWrite)}
	// Evidence whose verdict is not match is stored with its notification (reconcile.mismatch).
	p.Evidence = &reconcile.EvidenceStore{DB: db, Table: c.Table(resources.TableEvidence, resources.ReadWrite),
		Notifications: c.Table(resources.TableNotifications, resources.ReadWrite)}
	p.Requests = &reconcile.Requests{DB: db, Table: c.Table(resources.TableEvidence, resources.ReadWrite), Now: c.Now}
	p.Reporter = &report.Reporter{
		Usage: p.Usage, Marks: &report.MarkIndex{DB: db, Table: c.Table(resources.TableUsage, resources.ReadWrite)},
		State: p.State, Outbox: p.Outbox, Accounts: p.Accounts, Catalog: c.Config.Catalog,
		Stripe: p.Stripe != nil, Review: p.Review, Reconcile: p.Requests, Metrics: c.Metrics, Log: c.Log, Now: c.Now,
	}
	p.Reconciler = &reconcile.Reconciler{
		Usage: p.Usage,
		Ledger: &reconcile.LedgerReader{
			DB: db, LedgerTable: c.Table(resources.TableLedger, resources.Read), HoldsTable: c.Table(resources.TableHolds, resources.Read),
			Usage: p.Usage, Catalog: c.Config.Catalog,
		},
		State: p.State, Outbox: p.Outbox, Drainer: p.Drainer, Accounts: p.Accounts,
		Pager:   &reconcile.AccountPager{DB: db, Table: c.Table(resources.TableAccounts, resources.Read)},
		Catalog: c.Config.Catalog, Evidence: p.Evidence, Review: p.Review, Marks: p.Requests,
		Metrics: c.Metrics, Log: c.Log, Now: c.Now,
	}
	// A provider left off is a nil interface, never a typed nil.
	if p.KindeMeter != nil {
		p.Reporter.Kinde = p.KindeMeter
		p.Reconciler.Kinde = p.KindeMeter
	}
	if p.Stripe != nil {
		p.Reconciler.Stripe = p.Stripe
	}
	p.Corrections = &corrections.Service{Usage: p.Usage, Accounts: p.Accounts, Catalog: c.Config.Catalog, Review: p.Review, Now: c.Now}
	return p
}

// unconfiguredStripe refuses every send: no outbox row is written while Stripe is off, so it is
// reached only by a row written while it was on.
type unconfiguredStripe struct{}

func (unconfiguredStripe) Send(context.Context, stripe.MeterEvent) error {
	return &stripe.Error{What: "send meter event", Retryable: true, Msg: "Stripe is not configured in this deployment"}
}
