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
	httpapi.Serve(c, fn, (&routes{Parts: p, Catalog: c.Config.Catalog, Now: c.Now}).handlers(), httpapi.Authentication{})
	return fn, nil
}
