// Package reconciler composes the reconciler function: every night it compares every account's
// cycles with the providers' meters, repairs them from the ledger and keeps the evidence.
package reconciler

import (
	"context"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
)

// Builder composes the reconciler from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionReconciler, Build: build}

// Parts are the services the reconciler runs on.
type Parts = reporting.Parts

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

// runBudget bounds a nightly run when its context carries no deadline.
const runBudget = resources.ReconcilerTimeout - time.Minute

func build(c *compose.Composer) (*compose.Function, error) {
	p := reporting.Compose(c)
	fn := c.Function(p)
	// Every account, 50 a page, 5 at a time, stopping cleanly before the function's timeout; the
	// run fails when a cycle could not be compared or a repair was not confirmed.
	fn.Run = func(ctx context.Context) error {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = c.Now().Add(runBudget)
		}
		pages, accounts := 0, 0
		done, err := p.Reconciler.RunAll(ctx, deadline, func(pg reconcile.Page) {
			pages++
			accounts += pg.Accounts
			c.Log.Info("reconcile page done", "page", pages, "accounts", accounts, "cycles", len(pg.Results))
		})
		c.Log.Info("reconcile run done", "complete", done, "pages", pages, "accounts", accounts)
		return err
	}
	return fn, nil
}
