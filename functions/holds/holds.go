// Package holds composes the holds function: the usage holds routes (reserve, charge, settle,
// read), which admit work against a limit before it starts.
package holds

import (
	"context"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/holds/ratelimit"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Builder composes the holds function from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionHolds, Build: build}

// Parts are the services the holds function runs on.
type Parts struct {
	Accounts   *accounts.Service
	Usage      usage.Table
	Limits     limits.Source
	Allowances *allowance.Service
	Holds      *holds.Service
	HTTP       *httpapi.Server
}

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	db := c.DynamoDB()
	p := &Parts{
		// Accounts: authenticate keys, and stamp the first usage that fixes the billing cycle.
		Accounts: &accounts.Service{
			Store: &accounts.Table{DB: db, AccountsTable: c.Table(resources.TableAccounts, resources.ReadWrite),
				KeysTable: c.Table(resources.TableAPIKeys, resources.Read)},
			Catalog: c.Config.Catalog, Now: c.Now,
		},
		Usage:  usage.Table{DB: db, Name: c.Table(resources.TableUsage, resources.ReadWrite)},
		Limits: limits.Compose(context.Background(), c),
		// An allowance feature's limit is the sum of its grant rows; the first admission of a
		// cycle writes the cycle's opening row.
		Allowances: &allowance.Service{
			Store:   &allowance.Table{DB: db, Table: c.Table(resources.TableGrants, resources.ReadWrite)},
			Catalog: c.Config.Catalog, Now: c.Now,
		},
	}
	p.Holds = &holds.Service{
		Store: &holds.Table{
			DB: db, Table: c.Table(resources.TableHolds, resources.ReadWrite), Usage: p.Usage,
			RateLimits: ratelimit.Table{DB: db, Name: c.Table(resources.TableRateLimits, resources.ReadWrite)},
			// A reservation the limit refuses tells the platform (hold.refused).
			Notifications: c.Table(resources.TableNotifications, resources.ReadWrite),
		},
		Accounts: p.Accounts, Limits: p.Limits, Allowances: p.Allowances, Catalog: c.Config.Catalog,
		Metrics: c.Metrics, Log: c.Log, Now: c.Now,
	}
	fn := c.Function(p)
	p.HTTP = httpapi.Serve(c, fn, (&routes{Holds: p.Holds}).handlers(), httpapi.Authentication{Accounts: p.Accounts})
	return fn, nil
}
