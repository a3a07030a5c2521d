// Package notifier composes the notifier function: every minute it fans new notifications out to
// the webhook endpoints that want them and delivers them, signed (Standard Webhooks), under
// claim, backing off with jitter, DEAD after a bounded number of tries (package drain).
package notifier

import (
	"context"

	"github.com/ferrymeter/ferry/internal/alerts/drain"
	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/send"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Builder composes the notifier from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionNotifier, Build: build}

// Parts are the services the notifier runs on: the notifications and their deliveries, the
// endpoints, the sender and the drainer that uses them.
type Parts struct {
	Store     *drain.Store
	Endpoints *endpoints.Store
	Sender    *send.Sender
	Drainer   *drain.Drainer
}

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	allowLoopback, err := c.Settings().Bool(resources.EnvAlertsAllowLoopback)
	c.Fail(err)
	db := c.DynamoDB()
	p := &Parts{
		Store:     &drain.Store{DB: db, Table: c.Table(resources.TableNotifications, resources.ReadWrite)},
		Endpoints: &endpoints.Store{DB: db, Table: c.Table(resources.TableWebhookEndpoints, resources.Read)},
		Sender:    send.New(send.Config{Policy: send.Policy{AllowLoopback: allowLoopback}}),
	}
	p.Drainer = &drain.Drainer{Store: p.Store, Endpoints: p.Endpoints, Sender: p.Sender, Metrics: c.Metrics, Log: c.Log, Now: c.Now}
	if allowLoopback && c.Log != nil {
		c.Log.Warn("webhook deliveries may reach loopback addresses over http (" + resources.EnvAlertsAllowLoopback + "=true): for ferry dev only")
	}
	fn := c.Function(p)
	fn.Run = func(ctx context.Context) error {
		res, err := p.Drainer.Run(ctx)
		if res.Fanned > 0 || res.Due > 0 || err != nil {
			c.Log.Info("notify run done", "fanned", res.Fanned, "created", res.Created, "due", res.Due,
				"delivered", res.Delivered, "retrying", res.Retrying, "dead", res.Dead, "skipped", res.Skipped,
				"lapsed", res.Lapsed, "deferred", res.Deferred, "failed", res.Failed)
		}
		return err
	}
	return fn, nil
}
