// Package reporter composes the reporter function: every minute it reports the cycles whose usage
// changed to the providers' meters (absolute totals to Kinde, the Stripe outbox's deltas), then
// reconciles the cycles marked for it.
package reporter

import (
	"context"
	"errors"

	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// Builder composes the reporter from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionReporter, Build: build}

// Parts are the services the reporter runs on.
type Parts = reporting.Parts

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	p := reporting.Compose(c)
	// The cycles to reconcile soon: Ferry's own requests, and the inbox's marks of provider
	// meters that changed (Kinde's customer.meter_usage_updated).
	store := &inbox.Table{DB: c.DynamoDB(), Table: c.Table(resources.TableInbox, resources.ReadWrite)}
	p.Reconciler.Marks = reconcile.Sources{p.Requests, reconcile.InboxMarks{Marks: inbox.MeterMarkReader{Store: store}}}
	fn := c.Function(p)
	// A cycle it could not report stays marked for the next run; a run fails only when Ferry's
	// own state could not be read or written (the function's Errors alarm). It then reconciles
	// the cycles whose provider meter changed.
	fn.Run = func(ctx context.Context) error {
		res, err := p.Reporter.Run(ctx)
		if res.Found > 0 || err != nil {
			c.Log.Info("report done", "found", res.Found, "reported", res.Reported, "unchanged", res.Unchanged,
				"review", res.Review, "retrying", res.Retrying, "failed", res.Failed, "truncated", res.Truncated)
		}
		results, merr := p.Reconciler.RunMarked(ctx)
		if len(results) > 0 {
			c.Log.Info("marked cycles reconciled", "cycles", len(results))
		}
		return errors.Join(err, merr)
	}
	return fn, nil
}
