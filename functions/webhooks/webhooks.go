// Package webhooks composes the webhooks function: Kinde's and Stripe's deliveries, verified by
// their signatures, stored once each (a copy is counted), then answered; the inbox worker is
// nudged to apply them.
package webhooks

import (
	"context"

	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	"github.com/ferrymeter/ferry/internal/webhooks/intake"
)

// Builder composes the webhooks function from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionWebhooks, Build: build}

// Parts are the services the webhooks function runs on.
type Parts struct {
	Store    *inbox.Table
	Intake   *inbox.Intake
	Receiver *intake.Receiver
	HTTP     *httpapi.Server
}

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	cfg, err := intake.ConfigFromSettings(context.Background(), c)
	c.Fail(err)
	p := &Parts{Store: &inbox.Table{DB: c.DynamoDB(), Table: c.Table(resources.TableInbox, resources.ReadWrite)}}
	nudger := &inbox.SQSNudger{Client: c.Clients.SQS, URL: c.QueueURL(resources.QueueInbox, resources.Send)}
	p.Intake = &inbox.Intake{Store: p.Store, Nudger: nudger, Metrics: c.Metrics, Log: c.Log, Now: c.Now}
	p.Receiver = &intake.Receiver{Config: cfg, Intake: p.Intake, Metrics: c.Metrics, Log: c.Log, Now: c.Now}
	fn := c.Function(p)
	fn.Close = p.Receiver.Close
	// The deliveries authenticate by their providers' signatures: the receiver verifies them.
	p.HTTP = httpapi.Serve(c, fn, (&routes{Webhooks: p.Receiver}).handlers(), httpapi.Authentication{Signatures: p.Receiver})
	return fn, nil
}
