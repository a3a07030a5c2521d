// Package inbox composes the inbox function: the SQS consumer that claims a stored billing event
// with a lease and applies its effect and its APPLIED mark in one transaction.
package inbox

import (
	"context"
	"encoding/json"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	kindewebhook "github.com/ferrymeter/ferry/internal/webhooks/kinde"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
	"github.com/ferrymeter/ferry/internal/webhooks/stripe/objects"
)

// Builder composes the inbox worker from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionInbox, Build: build}

// Parts are the services the inbox worker runs on.
type Parts struct {
	Accounts   *accounts.Service
	Allowances *allowance.Service
	Store      *inbox.Table
	Worker     *inbox.Applier
	// MeterMarks is the reconciler's reader of the provider meter marks.
	MeterMarks inbox.MeterMarks
}

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	db := c.DynamoDB()
	// Accounts: the plan and status an event changes, found through the provider's link.
	store := &accounts.Table{DB: db, AccountsTable: c.Table(resources.TableAccounts, resources.ReadWrite),
		LinksTable: c.Table(resources.TableAccountLinks, resources.Read)}
	p := &Parts{
		Accounts: &accounts.Service{Store: store, Catalog: c.Config.Catalog, Now: c.Now},
		Allowances: &allowance.Service{
			Store:   &allowance.Table{DB: db, Table: c.Table(resources.TableGrants, resources.ReadWrite)},
			Catalog: c.Config.Catalog, Now: c.Now,
		},
	}
	// The apply transactions span the account, its grant rows and the notifications a change
	// tells (account.plan_changed, account.status_changed); a DEAD event is told there too.
	p.Store = &inbox.Table{DB: db, Table: c.Table(resources.TableInbox, resources.ReadWrite), Accounts: store,
		Grants: p.Allowances.Store, Notifications: c.Table(resources.TableNotifications, resources.ReadWrite)}
	stripeReader := stripewebhook.Interpreter{}
	refetch, err := objects.ConfigFromSettings(context.Background(), c)
	c.Fail(err)
	if refetch != nil {
		client, err := objects.New(*refetch)
		if err != nil {
			// Fail every Stripe event's attempt (visibly, with backoff, then DEAD and its alarm)
			// rather than apply it from the payload the deployment said not to trust.
			c.Log.Error("the Stripe re-fetch is misconfigured; Stripe events will fail", "err", err)
			stripeReader.Refetch = brokenFetcher{err: err}
		} else {
			stripeReader.Refetch = client
		}
	}
	p.Worker = &inbox.Applier{
		Store: p.Store, Accounts: p.Accounts, Grants: p.Allowances.Store, Catalog: c.Config.Catalog,
		Nudger:  &inbox.SQSNudger{Client: c.Clients.SQS, URL: c.QueueURL(resources.QueueInbox, resources.Send)},
		Metrics: c.Metrics, Log: c.Log, Now: c.Now,
		Interpreters: map[inbox.Source]inbox.Interpreter{inbox.Kinde: kindewebhook.Interpreter{}, inbox.Stripe: stripeReader},
	}
	p.MeterMarks = inbox.MeterMarkReader{Store: p.Store}
	fn := c.Function(p)
	fn.Consume = p.Worker.HandleSQS
	return fn, nil
}

// brokenFetcher is the re-fetch of a misconfigured deployment: every call fails with why.
type brokenFetcher struct{ err error }

func (b brokenFetcher) Object(context.Context, string, string) (json.RawMessage, error) {
	return nil, b.err
}
