// Package api composes the api function: the operator's account routes, an account's event
// status, usage, the usage query, holds and billing events, the webhook endpoints notifications
// go to, the operator console with its sessions and labs, and API Gateway's $default route (every path no other function serves).
package api

import (
	"context"
	"maps"
	// The IANA time zone database, compiled in: the usage query's DAY windows are days of any
	// zone, and a Lambda runtime (provided.al2023) need not carry the database.
	_ "time/tzdata"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/operator/console"
	"github.com/ferrymeter/ferry/internal/operator/session"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// Builder composes the api function from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionAPI, Build: build}

// Parts are the services the api function runs on.
type Parts struct {
	Accounts   *accounts.Service
	Usage      usage.Table
	Ledger     *ledger.Table
	Archive    *archive.S3
	Limits     limits.Source
	Allowances *allowance.Service
	Inbox      *inbox.Table
	Reader     *inbox.Reader
	Rollups    *rollup.Store
	// Endpoints serves the webhook endpoints' routes.
	Endpoints *WebhookEndpoints
	HTTP      *httpapi.Server
}

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	db := c.DynamoDB()
	p := &Parts{
		// The operator routes create accounts with their keys and link provider ids to them.
		Accounts: &accounts.Service{
			Store: &accounts.Table{DB: db, AccountsTable: c.Table(resources.TableAccounts, resources.ReadWrite),
				KeysTable: c.Table(resources.TableAPIKeys, resources.ReadWrite), LinksTable: c.Table(resources.TableAccountLinks, resources.ReadWrite)},
			Catalog: c.Config.Catalog, Now: c.Now,
		},
		Usage: usage.Table{DB: db, Name: c.Table(resources.TableUsage, resources.Read)},
		// The usage query reads the meters' rollups, eventually consistent: half the read units
		// of a strong read, for an answer that may miss the last second's claims.
		Rollups: &rollup.Store{DB: db, Table: c.Table(resources.TableRollups, resources.Read), Now: c.Now},
		Archive: &archive.S3{Client: c.Clients.S3, Bucket: c.Bucket(resources.BucketArchive, resources.Read)},
		// GET /v1/usage shows the limit the next admission is held to, from the holds' source,
		// and an allowance feature's grant rows.
		Limits: limits.Compose(context.Background(), c),
		Allowances: &allowance.Service{
			Store:   &allowance.Table{DB: db, Table: c.Table(resources.TableGrants, resources.Read)},
			Catalog: c.Config.Catalog, Now: c.Now,
		},
	}
	// The ledger: event status, the failed-event lists, and an operator's redrive (which reopens
	// an UNINSERTABLE entry and queues its archived payload again).
	p.Ledger = &ledger.Table{DB: db, Table: c.Table(resources.TableLedger, resources.ReadWrite), Usage: p.Usage}
	redrive := &worker.Redrive{
		Ledger: p.Ledger, Archive: p.Archive,
		Queue: &ingest.SQSQueue{Client: c.Clients.SQS, URL: c.QueueURL(resources.QueueEvents, resources.Send)},
		NowMs: func() int64 { return c.Now().UnixMilli() },
	}
	// The billing-events routes read the inbox and replay (a write and a nudge).
	p.Inbox = &inbox.Table{DB: db, Table: c.Table(resources.TableInbox, resources.ReadWrite)}
	nudger := &inbox.SQSNudger{Client: c.Clients.SQS, URL: c.QueueURL(resources.QueueInbox, resources.Send)}
	p.Reader = &inbox.Reader{Store: p.Inbox, Nudger: nudger, Log: c.Log, Now: c.Now}
	sessions := httpapi.Sessions(c, resources.ReadWrite)
	api := &routes{
		Accounts: p.Accounts, Events: p.Ledger, Usage: p.Usage, Catalog: c.Config.Catalog, Now: c.Now,
		Limits: p.Limits, Allowances: p.Allowances, BillingEvents: p.Reader,
		FailedEvents: p.Ledger, Redrive: redrive,
		UsageQuery: p.Rollups, UsageMeters: usageMeters(c),
		HoldLister: &holds.Table{DB: db, Table: c.Table(resources.TableHolds, resources.Read)},
		Console:    newConsoleDeps(c, sessions),
	}
	// The webhook endpoints the notifications go to: registration, rotation, the delivery log.
	p.Endpoints = newWebhookEndpoints(c)
	handlers := api.handlers()
	maps.Copy(handlers, p.Endpoints.handlers())
	fn := c.Function(p)
	p.HTTP = httpapi.Serve(c, fn, handlers,
		httpapi.Authentication{Accounts: p.Accounts, Sessions: sessions, Cookie: httpapi.Cookie(c)})
	return fn, nil
}

// newConsoleDeps is what the console's routes use: the embedded page, its sessions, and the labs,
// run against the stack's own public URL (FERRY_API_URL) with the operator key, as ferry lab
// runs them.
func newConsoleDeps(c *compose.Composer, sessions *session.Service) consoleDeps {
	return consoleDeps{
		Assets:   console.MustLoad(),
		Sessions: sessions,
		Cookie:   httpapi.Cookie(c),
		Labs: &console.LabRunner{
			Labs: console.Labs,
			Slots: &console.Slots{
				DB: c.DynamoDB(), Table: c.Table(resources.TableConsole, resources.ReadWrite),
				Count: resources.ConsoleLabSlots, Now: c.Now, Log: c.Log,
			},
			BaseURL: c.Settings().Get(resources.EnvAPIURL), OperatorKey: c.Config.OperatorKey, Log: c.Log, Now: c.Now,
		},
	}
}

// usageMeters are the meters the usage query answers for: the plans file's, the built-in count
// of every event among them.
func usageMeters(c *compose.Composer) rollup.Meters {
	set := c.Config.Catalog.Meters
	var ms rollup.Meters
	for _, name := range set.Names() {
		d, _ := set.Named(name)
		ms = append(ms, rollup.Meter{Name: d.Name, Aggregation: d.Aggregation, Dimensions: d.Dimensions.Names()})
	}
	return ms
}
