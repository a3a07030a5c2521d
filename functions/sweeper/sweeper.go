// Package sweeper composes the sweeper function: every minute it settles the RUNNING holds whose
// lease lapsed, at their recorded usage, as EXPIRED.
package sweeper

import (
	"context"

	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Builder composes the sweeper from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionSweeper, Build: build}

// Parts are the services the sweeper runs on.
type Parts struct {
	Usage usage.Table
	Holds *holds.Service
}

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	p := &Parts{Usage: usage.Table{DB: c.DynamoDB(), Name: c.Table(resources.TableUsage, resources.ReadWrite)}}
	// The sweep settles lapsed holds; it admits none, so it needs no accounts, limits or rate.
	p.Holds = &holds.Service{
		Store:   &holds.Table{DB: c.DynamoDB(), Table: c.Table(resources.TableHolds, resources.ReadWrite), Usage: p.Usage},
		Catalog: c.Config.Catalog, Metrics: c.Metrics, Log: c.Log, Now: c.Now,
	}
	fn := c.Function(p)
	// A run fails when a lapsed hold could not be settled, which the function's Errors alarm
	// reports; the next run retries it.
	fn.Run = func(ctx context.Context) error {
		res, err := p.Holds.Sweep(ctx)
		c.Log.Info("sweep done", "found", res.Found, "expired", res.Expired, "skipped", res.Skipped,
			"failed", res.Failed, "truncated", res.Truncated)
		return err
	}
	return fn, nil
}
