// Package drainer composes the drainer function: every minute it sends the Stripe outbox's due
// meter events, with a claim deadline, backoff and a dead letter after a bounded number of tries.
package drainer

import (
	"context"

	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting"
)

// Builder composes the drainer from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionDrainer, Build: build}

// Parts are the services the drainer runs on: the providers' clients, the outbox, the review list
// and the drainer.
type Parts = reporting.Parts

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	p := reporting.Drainer(c)
	fn := c.Function(p)
	fn.Run = func(ctx context.Context) error {
		res, err := p.Drainer.Run(ctx)
		if res.Due > 0 || err != nil {
			c.Log.Info("drain done", "due", res.Due, "sent", res.Sent, "retrying", res.Retrying, "dead", res.Dead,
				"review", res.Review, "skipped", res.Skipped, "failed", res.Failed)
		}
		return err
	}
	return fn, nil
}
