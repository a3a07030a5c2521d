// Package worker is the SQS worker: the slow, idempotent, authoritative half of event billing.
// Each invocation's messages are grouped by account into units of at most event.MaxPackedEvents
// events (coalesce.go); each unit is archived in one object, then claimed, checkpointed, metered
// and given its analytics rows in one transaction (batch.go). Every member's re-entry point comes
// from the ordered scenario table in package ledger, using durable state only, and every step may
// run twice.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
)

// Limits.
const (
	// DefaultMaxQuarantines is how many times an analytics row may be refused before the event
	// ends UNINSERTABLE.
	DefaultMaxQuarantines = 3
	// maxAccountConcurrency bounds how many accounts of one invocation run at once; one
	// account's units run one after another.
	maxAccountConcurrency = 10
)

// StageClaim names the unit's claim transaction in hook points; the other stages are
// ledger.Stage values.
const StageClaim ledger.Stage = "claim"

// Point is a place in the pipeline between two durable writes.
type Point struct {
	Before bool
	Stage  ledger.Stage
}

func (p Point) String() string {
	if p.Before {
		return "before " + string(p.Stage)
	}
	return "after " + string(p.Stage)
}

// Hook runs at every Point. A non-nil error stops the work right there, as if the process had
// died: nothing after it runs and the messages are left for redelivery. Tests use it to kill
// the worker in each crash window; production leaves it nil.
type Hook func(ctx context.Context, p Point) error

// Archive is where payloads go before their analytics row.
type Archive interface {
	Put(ctx context.Context, key string, body []byte) error
	Exists(ctx context.Context, key string) (bool, error)
}

// Ledger is the worker's view of the event ledger.
type Ledger interface {
	// A unit's claim, its read, and its record of being done (batch.go).
	WriteBatchClaim(ctx context.Context, c ledger.BatchClaim) error
	ReadBatch(ctx context.Context, r ledger.BatchRead) (ledger.BatchState, error)
	MarkBatchDone(ctx context.Context, accountID, batch string, nowMs int64) error
	BatchDone(ctx context.Context, accountID, batch string) (bool, int64, error)
	// What a member finished on its own needs (finish.go).
	Quarantine(ctx context.Context, accountID, eventID, reason string, nowMs int64) (int, error)
	MarkUninsertable(ctx context.Context, accountID, eventID string, nowMs int64) error
	MarkInserted(ctx context.Context, accountID, eventID string, nowMs int64) error
}

// Worker processes queued events.
type Worker struct {
	Accounts       *accounts.Service
	Ledger         Ledger
	Archive        Archive
	Analytics      analytics.Writer
	Schema         analytics.Schema
	Catalog        plans.Catalog
	Metrics        metrics.Recorder
	Log            *slog.Logger
	Now            func() time.Time
	MaxQuarantines int
	Hook           Hook
	// RowChunk is how many analytics rows of a unit written after its claim go in one bulk
	// write (at most, and by default, 25: BatchWriteItem's bound). Tests make it small to crash
	// between chunks.
	RowChunk int
	// Rollups plans the usage query's rollup writes of what a unit's claim moves; nil writes
	// none.
	Rollups Rollups
	// Alerts: a unit's claim decides the thresholds it crosses and the limits it reaches, and puts
	// their notifications (the ledger's store must have the notifications table).
	Alerts bool
}

// Rollups plans the rollup items a unit's claim writes (package rollup): the items to read before
// the claim (Keys, given the contributions of every member the unit may admit: those of MAX and
// LATEST meters, which are replaced from what was read, and the hour items of meters with
// dimensions, whose groups bound what a claim adds), and the writes of the admitted
// contributions, planned from what was read.
type Rollups interface {
	Keys(accountID string, cs []meter.Contribution) []ledger.ItemKey
	Writes(accountID string, cs []meter.Contribution, read map[string][]map[string]types.AttributeValue) ([]types.TransactWriteItem, error)
}

// Result says what one message's processing did.
type Result struct {
	Scenario string
	// Final is the entry's status when processing stopped.
	Final ledger.Status
	// Billed is true when this delivery's claim stamped the checkpoint.
	Billed bool
	// Events is each of the message's events' result by event id; Scenario, Final and Billed
	// are its first event's.
	Events map[string]Result
}

// errRetry marks a scenario that fails the message on purpose.
var errRetry = errors.New("retry later")

// HandleSQS is the Lambda handler: it processes one invocation's messages and reports those
// that failed, so SQS redelivers only them (ReportBatchItemFailures).
func (w *Worker) HandleSQS(ctx context.Context, batch events.SQSEvent) (events.SQSEventResponse, error) {
	out := w.handle(ctx, batch.Records)
	var resp events.SQSEventResponse
	for _, rec := range batch.Records {
		if out[rec.MessageId].err != nil {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
		}
	}
	return resp, nil
}

// Process runs one message as an invocation of its own, as a first delivery (sparse traffic:
// one message waiting when the event source polls). A nil error means the message can be
// deleted: every event in it is INSERTED, REJECTED or UNINSERTABLE.
func (w *Worker) Process(ctx context.Context, body string) (Result, error) {
	const id = "message"
	out := w.handle(ctx, []events.SQSMessage{{MessageId: id, Body: body}})[id]
	return out.Result, out.err
}

// account reads the account an event bills (every invocation reads it afresh: see
// docs/performance.md on why there is no account cache) and records its first usage.
func (w *Worker) account(ctx context.Context, accountID string, now time.Time) (accounts.Account, error) {
	acct, err := w.Accounts.GetOrUnknown(ctx, accountID)
	if err != nil {
		return accounts.Account{}, fmt.Errorf("load account %s: %w", accountID, err)
	}
	return w.Accounts.EnsureUsageStarted(ctx, acct, now)
}

func (w *Worker) hook(ctx context.Context, p Point) error {
	if w.Hook == nil {
		return nil
	}
	return w.Hook(ctx, p)
}
