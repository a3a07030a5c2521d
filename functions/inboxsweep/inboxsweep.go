// Package inboxsweep composes the inboxsweep function: every minute it nudges the inbox worker
// for each stored billing event that is due or whose lease lapsed.
package inboxsweep

import (
	"context"

	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// Builder composes the inbox sweep from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionInboxSweep, Build: build}

// Parts are the services the inbox sweep runs on.
type Parts struct {
	Store  *inbox.Table
	Worker *inbox.Applier
}

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	// The sweep only reads which events are due and nudges the worker; it applies nothing.
	p := &Parts{Store: &inbox.Table{DB: c.DynamoDB(), Table: c.Table(resources.TableInbox, resources.Read)}}
	nudger := &inbox.SQSNudger{Client: c.Clients.SQS, URL: c.QueueURL(resources.QueueInbox, resources.Send)}
	p.Worker = &inbox.Applier{Store: p.Store, Nudger: nudger, Metrics: c.Metrics, Log: c.Log, Now: c.Now}
	fn := c.Function(p)
	// A run fails when it cannot nudge, which the function's Errors alarm reports; the next run
	// nudges again.
	fn.Run = func(ctx context.Context) error {
		res, err := p.Worker.Sweep(ctx)
		c.Log.Info("inbox sweep done", "found", res.Found, "nudged", res.Nudged)
		return err
	}
	return fn, nil
}
