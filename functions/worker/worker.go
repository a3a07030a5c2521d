// Package worker composes the worker function: the SQS consumer that claims, bills, archives and
// stores each queued event exactly once, in units of one account's events.
package worker

import (
	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	eventworker "github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Builder composes the worker from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionWorker, Build: build}

// Parts are the services the worker runs on.
type Parts struct {
	Accounts  *accounts.Service
	Usage     usage.Table
	Ledger    *ledger.Table
	Archive   *archive.S3
	Analytics *analytics.DynamoWriter
	Worker    *eventworker.Worker
}

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	// Earlier releases chose their worker design by this setting; a deployment that still asks
	// for the retired one is refused rather than given the other.
	if err := c.RetiredBool(resources.EnvRetiredBatchMode, true, resources.RetiredBatchModeWhy); err != nil {
		return nil, err
	}
	p := &Parts{
		// The worker reads accounts and stamps the first usage; it never touches API keys.
		Accounts: &accounts.Service{
			Store:   &accounts.Table{DB: c.DynamoDB(), AccountsTable: c.Table(resources.TableAccounts, resources.ReadWrite)},
			Catalog: c.Config.Catalog, Now: c.Now,
		},
		Usage:     usage.Table{DB: c.DynamoDB(), Name: c.Table(resources.TableUsage, resources.ReadWrite)},
		Archive:   &archive.S3{Client: c.Clients.S3, Bucket: c.Bucket(resources.BucketArchive, resources.ReadWrite)},
		Analytics: &analytics.DynamoWriter{DB: c.DynamoDB(), Table: c.Table(resources.TableAnalytics, resources.ReadWrite)},
	}
	// A unit's claim puts its rows item and the notifications it decides in the same transaction.
	p.Ledger = &ledger.Table{DB: c.DynamoDB(), Table: c.Table(resources.TableLedger, resources.ReadWrite), Usage: p.Usage,
		Analytics: p.Analytics.Table, Notifications: c.Table(resources.TableNotifications, resources.ReadWrite)}
	p.Worker = &eventworker.Worker{
		Accounts: p.Accounts, Ledger: p.Ledger, Archive: p.Archive, Analytics: p.Analytics,
		Schema: analytics.DefaultSchema, Catalog: c.Config.Catalog, Metrics: c.Metrics, Log: c.Log, Now: c.Now,
		MaxQuarantines: eventworker.DefaultMaxQuarantines,
		// A unit's claim carries the rollup writes of what it moves: the usage query's items.
		Rollups: rollup.Claims{Table: c.Table(resources.TableRollups, resources.ReadWrite)},
		Alerts:  true,
	}
	fn := c.Function(p)
	fn.Consume = p.Worker.HandleSQS
	return fn, nil
}
