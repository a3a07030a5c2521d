package app

import (
	"context"

	"github.com/ferrymeter/ferry/internal/analytics"
	"github.com/ferrymeter/ferry/internal/archive"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/httpapi"
	"github.com/ferrymeter/ferry/internal/inbox"
	"github.com/ferrymeter/ferry/internal/ingest"
	"github.com/ferrymeter/ferry/internal/ratelimit"
	"github.com/ferrymeter/ferry/internal/resources"
	"github.com/ferrymeter/ferry/internal/worker"
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
)

// Builders lists every builder. Capabilities add theirs here.
func Builders() []Builder {
	return []Builder{BuildIngest, BuildAPI, BuildWorker, BuildHolds, BuildSweeper, BuildWebhooks, BuildInbox, BuildInboxSweep}
}

func buildAPI(c *Composer) (*Function, error) {
	fn := c.Function()
	// The operator routes create accounts with their keys and link provider ids to them.
	fn.Accounts = c.accounts(resources.ReadWrite, resources.ReadWrite, resources.ReadWrite)
	fn.Usage = c.usage(resources.Read)
	fn.Ledger = c.ledger(resources.Read, resources.Read)
	// GET /v1/usage shows an allowance's grant rows; the billing-events routes read the inbox
	// and replay (a write and a nudge).
	fn.Allowances = c.allowances(resources.Read)
	store := c.inboxStore(resources.ReadWrite, &Function{})
	reader := &inbox.Reader{Store: store, Nudger: c.nudger(), Log: c.Log, Now: c.Now}
	fn.Inbox = &Inbox{Store: store, Reader: reader}
	api := httpapi.New(httpapi.Deps{
		Accounts: fn.Accounts, Events: fn.Ledger, Usage: fn.Usage, Catalog: c.Config.Catalog, Now: c.Now,
		Allowances: fn.Allowances, BillingEvents: reader,
	})
	return c.Serve(fn, api, httpapi.Authentication{Accounts: fn.Accounts}), nil
}

func buildIngest(c *Composer) (*Function, error) {
	fn := c.Function()
	// The advisory gate reads the ledger (is this a retry?) and the budget row; it writes nothing.
	fn.Usage = c.usage(resources.Read)
	fn.Ledger = c.ledger(resources.Read, resources.Read)
	fn.Ingest = &ingest.Service{
		Queue:  &ingest.SQSQueue{Client: c.Clients.SQS, URL: c.QueueURL(resources.QueueEvents, resources.Send)},
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
	fn.Worker = &worker.Worker{
		Accounts: fn.Accounts, Ledger: fn.Ledger, Archive: fn.Archive, Analytics: fn.Analytics,
		Schema: c.Config.Schema, Catalog: c.Config.Catalog, Metrics: c.Metrics, Log: c.Log, Now: c.Now,
		MaxQuarantines: c.Config.MaxQuarantines,
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
