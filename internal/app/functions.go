package app

import (
	"context"
	"errors"
	"time"

	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/holds/ratelimit"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// The builders, one per entry of resources.Functions. Each wires, where it can be read, exactly
// the services its function uses, from the resources its entry grants.
var (
	// BuildAPI composes the api function: accounts (operator routes), event status and usage.
	BuildAPI = Builder{Function: resources.FunctionAPI, Build: buildAPI}
	// BuildIngest composes the ingest function: accept events and queue them.
	BuildIngest = Builder{Function: resources.FunctionIngest, Build: buildIngest}
	// BuildWorker composes the SQS worker: claim, bill, archive, insert, mark.
	BuildWorker = Builder{Function: resources.FunctionWorker, Build: buildWorker}
	// BuildHolds composes the usage holds function: reserve, charge, settle, read.
	BuildHolds = Builder{Function: resources.FunctionHolds, Build: buildHolds}
	// BuildSweeper composes the sweeper: settle holds whose lease lapsed.
	BuildSweeper = Builder{Function: resources.FunctionSweeper, Build: buildSweeper}
	// BuildReporter composes the reporter: report changed cycles, reconcile marked ones.
	BuildReporter = Builder{Function: resources.FunctionReporter, Build: buildReporter}
	// BuildDrainer composes the Stripe outbox's drainer.
	BuildDrainer = Builder{Function: resources.FunctionDrainer, Build: buildDrainer}
	// BuildReconciler composes the nightly reconciler.
	BuildReconciler = Builder{Function: resources.FunctionReconciler, Build: buildReconciler}
	// BuildMeterAPI composes the operator routes of reporting and reconciliation.
	BuildMeterAPI = Builder{Function: resources.FunctionMeterAPI, Build: buildMeterAPI}
)

// Builders lists every builder. Capabilities add theirs here.
func Builders() []Builder {
	return []Builder{BuildIngest, BuildAPI, BuildWorker, BuildHolds, BuildSweeper,
		BuildReporter, BuildDrainer, BuildReconciler, BuildMeterAPI, BuildWebhooks, BuildInbox, BuildInboxSweep}
}

func buildAPI(c *Composer) (*Function, error) {
	fn := c.Function()
	// The operator routes create accounts with their keys and link provider ids to them.
	fn.Accounts = c.accounts(resources.ReadWrite, resources.ReadWrite, resources.ReadWrite)
	fn.Usage = c.usage(resources.Read)
	// The ledger: event status, the failed-event lists, and an operator's redrive (which reopens
	// an UNINSERTABLE entry and queues its archived payload again).
	fn.Ledger = c.ledger(resources.ReadWrite, resources.Read)
	fn.Archive = &archive.S3{Client: c.Clients.S3, Bucket: c.Bucket(resources.BucketArchive, resources.Read)}
	redrive := &worker.Redrive{
		Ledger: fn.Ledger, Archive: fn.Archive,
		Queue: &ingest.SQSQueue{Client: c.Clients.SQS, URL: c.QueueURL(resources.QueueEvents, resources.Send)},
		NowMs: func() int64 { return c.Now().UnixMilli() },
	}
	holdLister := &holds.DynamoStore{DB: c.DynamoDB(), Table: c.Table(resources.TableHolds, resources.Read)}
	// GET /v1/usage shows the limit the next admission is held to, from the holds' source, and
	// an allowance's grant rows; the billing-events routes read the inbox and replay (a write
	// and a nudge).
	fn.Limits = NewLimits(c.Config, c.Log, c.Metrics, c.Now)
	fn.Allowances = c.allowances(resources.Read)
	store := c.inboxStore(resources.ReadWrite, &Function{})
	reader := &inbox.Reader{Store: store, Nudger: c.nudger(), Log: c.Log, Now: c.Now}
	fn.Inbox = &Inbox{Store: store, Reader: reader}
	api := httpapi.New(httpapi.Deps{
		Accounts: fn.Accounts, Events: fn.Ledger, Usage: fn.Usage, Catalog: c.Config.Catalog, Now: c.Now,
		Limits: fn.Limits, Allowances: fn.Allowances, BillingEvents: reader,
		FailedEvents: fn.Ledger, Redrive: redrive, HoldLister: holdLister,
		Console: c.console(),
	})
	return c.Serve(fn, api, httpapi.Authentication{Accounts: fn.Accounts}), nil
}

func buildIngest(c *Composer) (*Function, error) {
	fn := c.Function()
	// The advisory gate reads the ledger (is this a retry?) and the budget row; it writes nothing.
	fn.Usage = c.usage(resources.Read)
	fn.Ledger = c.ledger(resources.Read, resources.Read)
	fn.Ingest = &ingest.Service{
		Queue: &ingest.SQSQueue{Client: c.Clients.SQS, URL: c.QueueURL(resources.QueueEvents, resources.Send),
			Pack: c.Config.BatchMode},
		Ledger: fn.Ledger, Usage: fn.Usage, Catalog: c.Config.Catalog, Metrics: c.Metrics, Log: c.Log, Now: c.Now,
	}
	return c.Serve(fn, httpapi.New(httpapi.Deps{Ingest: fn.Ingest}), httpapi.Authentication{}), nil
}

func buildWorker(c *Composer) (*Function, error) {
	fn := c.Function()
	// The worker reads accounts and stamps the first usage; it never touches API keys.
	fn.Accounts = c.accounts(resources.ReadWrite, "", "")
	fn.Usage = c.usage(resources.ReadWrite)
	fn.Ledger = c.ledger(resources.ReadWrite, resources.ReadWrite)
	fn.Archive = &archive.S3{Client: c.Clients.S3, Bucket: c.Bucket(resources.BucketArchive, resources.ReadWrite)}
	fn.Analytics = &analytics.DynamoWriter{DB: c.DynamoDB(), Table: c.Table(resources.TableAnalytics, resources.ReadWrite)}
	// A unit's claim puts its rows item in the same transaction.
	fn.Ledger.Analytics = fn.Analytics.Table
	fn.Worker = &worker.Worker{
		Accounts: fn.Accounts, Ledger: fn.Ledger, Archive: fn.Archive, Analytics: fn.Analytics,
		Schema: c.Config.Schema, Catalog: c.Config.Catalog, Metrics: c.Metrics, Log: c.Log, Now: c.Now,
		MaxQuarantines: c.Config.MaxQuarantines, Coalesce: c.Config.BatchMode,
	}
	fn.Consume = fn.Worker.HandleSQS
	return fn, nil
}

func buildHolds(c *Composer) (*Function, error) {
	fn := c.Function()
	// Accounts: authenticate keys, and stamp the first usage that fixes the billing cycle.
	fn.Accounts = c.accounts(resources.ReadWrite, resources.Read, "")
	fn.Usage = c.usage(resources.ReadWrite)
	fn.Limits = NewLimits(c.Config, c.Log, c.Metrics, c.Now)
	// An allowance feature's limit is the sum of its grant rows; the first admission of a cycle
	// writes the cycle's opening row.
	fn.Allowances = c.allowances(resources.ReadWrite)
	fn.Holds = &holds.Service{
		Store: &holds.DynamoStore{
			DB: c.DynamoDB(), Table: c.Table(resources.TableHolds, resources.ReadWrite), Usage: fn.Usage,
			RateLimits: ratelimit.Table{DB: c.DynamoDB(), Name: c.Table(resources.TableRateLimits, resources.ReadWrite)},
		},
		Accounts: fn.Accounts, Limits: fn.Limits, Allowances: fn.Allowances, Catalog: c.Config.Catalog, Metrics: c.Metrics, Log: c.Log, Now: c.Now,
	}
	api := httpapi.New(httpapi.Deps{Holds: fn.Holds})
	return c.Serve(fn, api, httpapi.Authentication{Accounts: fn.Accounts}), nil
}

func buildSweeper(c *Composer) (*Function, error) {
	fn := c.Function()
	fn.Usage = c.usage(resources.ReadWrite)
	// The sweep settles lapsed holds; it admits none, so it needs no accounts, limits or rate.
	fn.Holds = &holds.Service{
		Store:   &holds.DynamoStore{DB: c.DynamoDB(), Table: c.Table(resources.TableHolds, resources.ReadWrite), Usage: fn.Usage},
		Catalog: c.Config.Catalog, Metrics: c.Metrics, Log: c.Log, Now: c.Now,
	}
	// A run fails when a lapsed hold could not be settled, which the function's Errors alarm
	// reports; the next run retries it.
	fn.Run = func(ctx context.Context) error {
		res, err := fn.Holds.Sweep(ctx)
		c.Log.Info("sweep done", "found", res.Found, "expired", res.Expired, "skipped", res.Skipped,
			"failed", res.Failed, "truncated", res.Truncated)
		return err
	}
	return fn, nil
}

func buildReporter(c *Composer) (*Function, error) {
	fn := c.Function()
	c.reporting(fn)
	// The cycles to reconcile soon: Ferry's own requests, and the inbox's marks of provider
	// meters that changed (Kinde's customer.meter_usage_updated).
	fn.Reconciler.Marks = reconcile.Sources{fn.Requests,
		reconcile.InboxMarks{Marks: inbox.MeterMarkReader{Store: c.inboxStore(resources.ReadWrite, &Function{})}}}
	// A cycle it could not report stays marked for the next run; a run fails only when Ferry's
	// own state could not be read or written (the function's Errors alarm). It then reconciles
	// the cycles whose provider meter changed.
	fn.Run = func(ctx context.Context) error {
		res, err := fn.Reporter.Run(ctx)
		if res.Found > 0 || err != nil {
			c.Log.Info("report done", "found", res.Found, "reported", res.Reported, "unchanged", res.Unchanged,
				"review", res.Review, "retrying", res.Retrying, "failed", res.Failed, "truncated", res.Truncated)
		}
		results, merr := fn.Reconciler.RunMarked(ctx)
		if len(results) > 0 {
			c.Log.Info("marked cycles reconciled", "cycles", len(results))
		}
		return errors.Join(err, merr)
	}
	return fn, nil
}

func buildDrainer(c *Composer) (*Function, error) {
	fn := c.Function()
	c.providers(&fn.Meters)
	c.drainer(&fn.Meters)
	fn.Run = func(ctx context.Context) error {
		res, err := fn.Drainer.Run(ctx)
		if res.Due > 0 || err != nil {
			c.Log.Info("drain done", "due", res.Due, "sent", res.Sent, "retrying", res.Retrying, "dead", res.Dead,
				"review", res.Review, "skipped", res.Skipped, "failed", res.Failed)
		}
		return err
	}
	return fn, nil
}

// reconcileRunBudget bounds a nightly run when its context carries no deadline.
const reconcileRunBudget = resources.ReconcilerTimeout - time.Minute

func buildReconciler(c *Composer) (*Function, error) {
	fn := c.Function()
	c.reporting(fn)
	// Every account, 50 a page, 5 at a time, stopping cleanly before the function's timeout; the
	// run fails when a cycle could not be compared or a repair was not confirmed.
	fn.Run = func(ctx context.Context) error {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = c.Now().Add(reconcileRunBudget)
		}
		pages, accounts := 0, 0
		done, err := fn.Reconciler.RunAll(ctx, deadline, func(p reconcile.Page) {
			pages++
			accounts += p.Accounts
			c.Log.Info("reconcile page done", "page", pages, "accounts", accounts, "cycles", len(p.Results))
		})
		c.Log.Info("reconcile run done", "complete", done, "pages", pages, "accounts", accounts)
		return err
	}
	return fn, nil
}

func buildMeterAPI(c *Composer) (*Function, error) {
	fn := c.Function()
	c.reporting(fn)
	m := fn.Meters
	api := httpapi.New(httpapi.Deps{
		Accounts: fn.Accounts, Catalog: c.Config.Catalog, Now: c.Now,
		Meters: httpapi.MeterDeps{
			Corrections: m.Corrections, Reporter: m.Reporter, Reconciler: m.Reconciler, Evidence: m.Evidence,
			Review: m.Review, Drainer: m.Drainer, Outbox: m.Outbox,
		},
	})
	return c.Serve(fn, api, httpapi.Authentication{}), nil
}
