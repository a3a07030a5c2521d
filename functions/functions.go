// Package functions lists Ferry's Lambda functions. Each folder below is one function: its
// package composes what the function runs (its Builder, from its entry in resources.Functions,
// and the Parts it builds), and its bootstrap/ folder is the Lambda binary, a main that hands the
// builder to compose.Run. A function's binary links only what its own package imports; ferry dev
// and the tests build every function through the same builders.
package functions

import (
	"github.com/ferrymeter/ferry/functions/api"
	"github.com/ferrymeter/ferry/functions/drainer"
	"github.com/ferrymeter/ferry/functions/holds"
	"github.com/ferrymeter/ferry/functions/inbox"
	"github.com/ferrymeter/ferry/functions/inboxsweep"
	"github.com/ferrymeter/ferry/functions/ingest"
	"github.com/ferrymeter/ferry/functions/meterapi"
	"github.com/ferrymeter/ferry/functions/notifier"
	"github.com/ferrymeter/ferry/functions/reconciler"
	"github.com/ferrymeter/ferry/functions/reporter"
	"github.com/ferrymeter/ferry/functions/sweeper"
	"github.com/ferrymeter/ferry/functions/webhooks"
	"github.com/ferrymeter/ferry/functions/worker"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

// Builders lists every function's builder. A capability adds its function's here.
func Builders() []compose.Builder {
	return []compose.Builder{ingest.Builder, api.Builder, worker.Builder, holds.Builder, sweeper.Builder,
		reporter.Builder, drainer.Builder, reconciler.Builder, meterapi.Builder, webhooks.Builder, inbox.Builder,
		inboxsweep.Builder, notifier.Builder}
}

// Definitions are Ferry's definitions: every resource, route and function, with the builders.
// The slices are copies: a test may append to them.
func Definitions() compose.Definitions { return compose.NewDefinitions(Builders()) }
