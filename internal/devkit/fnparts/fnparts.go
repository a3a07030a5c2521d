// Package fnparts reaches the parts of composed functions for tests and tools: the services each
// function's builder composed (functions/<name>.Parts), by function.
package fnparts

import (
	apifn "github.com/ferrymeter/ferry/functions/api"
	drainerfn "github.com/ferrymeter/ferry/functions/drainer"
	holdsfn "github.com/ferrymeter/ferry/functions/holds"
	inboxfn "github.com/ferrymeter/ferry/functions/inbox"
	inboxsweepfn "github.com/ferrymeter/ferry/functions/inboxsweep"
	ingestfn "github.com/ferrymeter/ferry/functions/ingest"
	meterapifn "github.com/ferrymeter/ferry/functions/meterapi"
	reconcilerfn "github.com/ferrymeter/ferry/functions/reconciler"
	reporterfn "github.com/ferrymeter/ferry/functions/reporter"
	sweeperfn "github.com/ferrymeter/ferry/functions/sweeper"
	webhooksfn "github.com/ferrymeter/ferry/functions/webhooks"
	workerfn "github.com/ferrymeter/ferry/functions/worker"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Of finds a composed function by name (a harness's or a stack's).
type Of func(name string) *compose.Function

// API are the api function's parts.
func (f Of) API() *apifn.Parts { return apifn.PartsOf(f(resources.FunctionAPI)) }

// Ingest are the ingest function's parts.
func (f Of) Ingest() *ingestfn.Parts { return ingestfn.PartsOf(f(resources.FunctionIngest)) }

// Worker are the worker function's parts.
func (f Of) Worker() *workerfn.Parts { return workerfn.PartsOf(f(resources.FunctionWorker)) }

// Holds are the holds function's parts.
func (f Of) Holds() *holdsfn.Parts { return holdsfn.PartsOf(f(resources.FunctionHolds)) }

// Sweeper are the sweeper function's parts.
func (f Of) Sweeper() *sweeperfn.Parts { return sweeperfn.PartsOf(f(resources.FunctionSweeper)) }

// Reporter are the reporter function's parts.
func (f Of) Reporter() *reporterfn.Parts { return reporterfn.PartsOf(f(resources.FunctionReporter)) }

// Drainer are the drainer function's parts.
func (f Of) Drainer() *drainerfn.Parts { return drainerfn.PartsOf(f(resources.FunctionDrainer)) }

// Reconciler are the reconciler function's parts.
func (f Of) Reconciler() *reconcilerfn.Parts {
	return reconcilerfn.PartsOf(f(resources.FunctionReconciler))
}

// MeterAPI are the meterapi function's parts.
func (f Of) MeterAPI() *meterapifn.Parts { return meterapifn.PartsOf(f(resources.FunctionMeterAPI)) }

// Webhooks are the webhooks function's parts.
func (f Of) Webhooks() *webhooksfn.Parts { return webhooksfn.PartsOf(f(resources.FunctionWebhooks)) }

// Inbox are the inbox function's parts.
func (f Of) Inbox() *inboxfn.Parts { return inboxfn.PartsOf(f(resources.FunctionInbox)) }

// InboxSweep are the inboxsweep function's parts.
func (f Of) InboxSweep() *inboxsweepfn.Parts {
	return inboxsweepfn.PartsOf(f(resources.FunctionInboxSweep))
}
