// Package meterapi composes the meterapi function: the operator routes of reporting and
// reconciliation (corrections, report and reconcile now, evidence, the review list, the outbox).
package meterapi

import (
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting"
)

// Builder composes the meterapi function from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionMeterAPI, Build: build}

// Parts are the services the meterapi function runs on.
type Parts = reporting.Parts

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	p := reporting.Compose(c)
	fn := c.Function(p)
	api := httpapi.New(httpapi.Deps{
		Accounts: p.Accounts, Catalog: c.Config.Catalog, Now: c.Now,
		Meters: httpapi.MeterDeps{
			Corrections: p.Corrections, Reporter: p.Reporter, Reconciler: p.Reconciler, Evidence: p.Evidence,
			Review: p.Review, Drainer: p.Drainer, Outbox: p.Outbox,
		},
	})
	httpapi.Serve(c, fn, api.HandlersOf(c.Routes(), c.Entry.Name), httpapi.Authentication{})
	return fn, nil
}
