// Package worker is the SQS worker: the slow, idempotent, authoritative half of event billing.
// For each queued event it claims the ledger entry, picks a scenario from the ordered table in
// package ledger using durable state only, and runs that scenario's steps — bill, archive,
// insert, mark — any of which may run twice.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
)

// Limits.
const (
	// DefaultMaxQuarantines is how many times an analytics row may be refused before the event
	// ends UNINSERTABLE.
	DefaultMaxQuarantines = 3
	// maxBatchConcurrency bounds how many messages of one batch run at once (SQS batches are at
	// most 10).
	maxBatchConcurrency = 10
)

// StageClaim names the claim in hook points; the other stages are ledger.Stage values.
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
// died: nothing after it runs and the message is left for redelivery. Tests use it to kill the
// worker in each crash window; production leaves it nil.
type Hook func(ctx context.Context, p Point) error

// Archive is where payloads go before their analytics row.
type Archive interface {
	Put(ctx context.Context, key string, body []byte) error
	Exists(ctx context.Context, key string) (bool, error)
}

// Ledger is the worker's view of the event ledger.
type Ledger interface {
	Claim(ctx context.Context, e ledger.Entry) error
	Get(ctx context.Context, accountID, eventID string) (ledger.Entry, error)
	ledger.BillingStore
	Reject(ctx context.Context, accountID, eventID, reason string, nowMs int64) error
	Quarantine(ctx context.Context, accountID, eventID, reason string, nowMs int64) (int, error)
	MarkUninsertable(ctx context.Context, accountID, eventID string, nowMs int64) error
	MarkInserted(ctx context.Context, accountID, eventID string, nowMs int64) error
	// Batches (see batch.go).
	WriteBatchClaim(ctx context.Context, c ledger.BatchClaim) error
	ReadBatch(ctx context.Context, r ledger.BatchRead) (ledger.BatchState, error)
	MarkBatchDone(ctx context.Context, accountID, batch string, nowMs int64) error
	BatchDone(ctx context.Context, accountID, batch string) (bool, int64, error)
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
	// RowChunk is how many analytics rows of a batch go in one bulk write (at most, and by
	// default, 25: BatchWriteItem's bound). Tests make it small to crash between chunks.
	RowChunk int
	// Coalesce (batch mode) groups the messages of one invocation by account into units, each
	// claimed, metered and archived as one (coalesce.go); otherwise each message runs alone.
	Coalesce bool
	// Rollups plans the usage query's rollup writes of what a unit's claim moves; nil writes
	// none.
	Rollups Rollups
}

// Rollups plans the rollup items a unit's claim writes (package rollup): the items to read before
// the claim (Keys, given the contributions of every member the unit may admit: those of MAX and
// LATEST meters, which are replaced from what was read, and the hour items of meters with
// dimensions, whose groups bound what a claim adds), and the writes of the admitted
// contributions, planned from what was read.
type Rollups interface {
	Keys(accountID string, cs []ledger.Contribution) []ledger.ItemKey
	Writes(accountID string, cs []ledger.Contribution, read map[string][]map[string]types.AttributeValue) ([]types.TransactWriteItem, error)
}

// Result says what one message's processing did.
type Result struct {
	Scenario string
	// Final is the entry's status when processing stopped.
	Final ledger.Status
	// Billed is true when this delivery stamped the checkpoint.
	Billed bool
	// Events is, for a packed message, each event's result by event id; Scenario and Final
	// are then its first event's.
	Events map[string]Result
}

// errRetry marks a scenario that fails the message on purpose.
var errRetry = errors.New("retry later")

// HandleSQS is the Lambda handler: it processes a batch and reports the messages that failed,
// so SQS redelivers only those (ReportBatchItemFailures).
func (w *Worker) HandleSQS(ctx context.Context, batch events.SQSEvent) (events.SQSEventResponse, error) {
	if w.Coalesce {
		return w.handleCoalesced(ctx, batch), nil
	}
	var (
		mu       sync.Mutex
		failures []events.SQSBatchItemFailure
		wg       sync.WaitGroup
		slots    = make(chan struct{}, maxBatchConcurrency)
	)
	for _, msg := range batch.Records {
		wg.Add(1)
		slots <- struct{}{}
		go func(msg events.SQSMessage) {
			defer wg.Done()
			defer func() { <-slots }()
			if _, err := w.process(ctx, msg.Body, redelivered(msg)); err != nil {
				w.Metrics.Count(metrics.WorkerFailures, 1)
				w.Log.Warn("message failed; it will be redelivered",
					"messageId", msg.MessageId, "receiveCount", msg.Attributes["ApproximateReceiveCount"], "err", err)
				mu.Lock()
				failures = append(failures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
				mu.Unlock()
			}
		}(msg)
	}
	wg.Wait()
	return events.SQSEventResponse{BatchItemFailures: failures}, nil
}

// job is one message's processing: the values every step reads.
type job struct {
	env     event.Envelope
	ev      event.Event
	account accounts.Account
	entry   ledger.Entry
	nowMs   int64
	log     *slog.Logger
	result  Result
}

// Process runs one queued event through the pipeline. A nil error means the message can be
// deleted: the event is INSERTED, REJECTED or UNINSERTABLE.
func (w *Worker) Process(ctx context.Context, body string) (Result, error) {
	return w.process(ctx, body, false)
}

// process is Process for a delivery SQS may have made before (redelivered).
func (w *Worker) process(ctx context.Context, body string, redelivered bool) (Result, error) {
	m, err := event.DecodeMessage(body)
	if err != nil {
		// Ingest never queues such a message; retrying cannot fix it, and after maxReceiveCount
		// it lands in the DLQ, whose alarm calls an operator.
		w.Log.Error("undecodable message", "err", err)
		return Result{}, err
	}
	if m.Packed {
		return w.processBatch(ctx, m, m.Raw, redelivered)
	}
	if w.metersBeyondCount(m) {
		// A unit of one single message is named by the message's body, as in batch mode.
		return w.processBatch(ctx, m, []byte(body), redelivered)
	}
	return w.processOne(ctx, m.Envelopes[0], m.Events[0], accounts.Account{}, nil)
}

// metersBeyondCount reports whether a single event gives its meters more than the built-in events
// count — a value, a dimension, another meter — or a value that refuses it. The per-event
// pipeline moves the events count alone, so such an event runs as a unit of one through the
// batch pipeline, whose claim moves every meter (or rejects the event with its reason) in one
// transaction; a redelivery reads the same event and takes the same path.
func (w *Worker) metersBeyondCount(m event.Message) bool {
	rs, err := w.readings(m.Events[0], m.Envelopes[0])
	if err != nil {
		return true
	}
	for _, r := range rs {
		if !r.BareCount() {
			return true
		}
	}
	return false
}

// processOne runs one event through the per-event pipeline. acct is the account when the
// caller has read it already, and known the event's entry when the caller read it strongly
// consistent (a batch handing over an event another unit claimed): the claim, which would be
// refused, and the re-read are then skipped.
func (w *Worker) processOne(ctx context.Context, env event.Envelope, ev event.Event, acct accounts.Account, known *ledger.Entry) (Result, error) {
	now := w.Now()
	j := &job{env: env, ev: ev, nowMs: now.UnixMilli()}
	j.log = w.Log.With("account", env.AccountID, "eventId", env.EventID)

	if acct.ID == "" {
		var err error
		if acct, err = w.account(ctx, env.AccountID, now); err != nil {
			return Result{}, err
		}
	}
	j.account = acct

	state, err := w.load(ctx, j, known)
	if err != nil {
		return Result{}, err
	}
	sc := ledger.Match(state)
	j.result.Scenario = sc.Name
	j.log = j.log.With("scenario", sc.Name)
	if err := w.hook(ctx, Point{Stage: StageClaim}); err != nil {
		return j.result, err
	}
	if sc.Retry {
		j.log.Warn("ledger state not usable; retrying later")
		return j.result, fmt.Errorf("event %s: %s: %w", env.EventID, sc.Name, errRetry)
	}
	if len(sc.Stages) == 0 {
		w.Metrics.Count(metrics.EventsDuplicate, 1)
		j.log.Info("redelivery of a finished event; acked")
		j.result.Final = j.entry.Status
		return j.result, nil
	}
	for _, stage := range sc.Stages {
		if err := w.hook(ctx, Point{Before: true, Stage: stage}); err != nil {
			return j.result, err
		}
		stop, err := w.run(ctx, j, stage)
		if err != nil {
			return j.result, err
		}
		if stop {
			return j.result, nil
		}
		if err := w.hook(ctx, Point{Stage: stage}); err != nil {
			return j.result, err
		}
	}
	j.log.Info("event stored")
	return j.result, nil
}

// account reads the account an event bills (every message reads it afresh: see the README on
// why there is no account cache) and records its first usage.
func (w *Worker) account(ctx context.Context, accountID string, now time.Time) (accounts.Account, error) {
	acct, err := w.Accounts.GetOrUnknown(ctx, accountID)
	if err != nil {
		return accounts.Account{}, fmt.Errorf("load account %s: %w", accountID, err)
	}
	return w.Accounts.EnsureUsageStarted(ctx, acct, now)
}

// load claims the event or, when another delivery claimed it first, reads the durable state a
// scenario is chosen from.
func (w *Worker) load(ctx context.Context, j *job, known *ledger.Entry) (ledger.State, error) {
	if known != nil {
		return w.stateOf(ctx, j, *known)
	}
	j.entry = ledger.Entry{
		AccountID: j.env.AccountID, EventID: j.env.EventID, Status: ledger.Inserting,
		RowInsertedAtMs: j.nowMs, ReceivedAtMs: j.env.ReceivedAtMs,
		Cycle:       j.account.CycleAt(time.UnixMilli(j.env.ReceivedAtMs)).Label(),
		CreatedAtMs: j.nowMs, UpdatedAtMs: j.nowMs,
	}
	err := w.Ledger.Claim(ctx, j.entry)
	if err == nil {
		return ledger.State{ClaimWon: true, Readable: true, Status: ledger.Inserting}, nil
	}
	if !errors.Is(err, ledger.ErrAlreadyClaimed) {
		j.log.Warn("claim failed", "err", err)
		return ledger.State{}, nil // unreadable: the table picks "retry"
	}
	stored, err := w.Ledger.Get(ctx, j.env.AccountID, j.env.EventID)
	if err != nil {
		j.log.Warn("ledger read failed", "err", err)
		return ledger.State{}, nil
	}
	return w.stateOf(ctx, j, stored)
}

// stateOf is the durable state of an event whose entry another delivery claimed, as read.
func (w *Worker) stateOf(ctx context.Context, j *job, stored ledger.Entry) (ledger.State, error) {
	j.entry = stored
	state := ledger.State{Readable: true, Status: stored.Status, Billed: stored.Billed()}
	if stored.Status == ledger.Inserting {
		present, err := w.Analytics.Exists(ctx, stored.RowRef())
		if err != nil {
			return ledger.State{}, err
		}
		state.RowPresent = present
	}
	return state, nil
}

func (w *Worker) hook(ctx context.Context, p Point) error {
	if w.Hook == nil {
		return nil
	}
	return w.Hook(ctx, p)
}

// run executes one stage. stop reports that the event reached a terminal state and no further
// stage may run.
func (w *Worker) run(ctx context.Context, j *job, stage ledger.Stage) (stop bool, err error) {
	switch stage {
	case ledger.StageBill:
		return w.bill(ctx, j)
	case ledger.StageArchive:
		return false, w.archiveOne(ctx, j)
	case ledger.StageInsert:
		return w.insert(ctx, j)
	case ledger.StageMark:
		if err := w.Ledger.MarkInserted(ctx, j.entry.AccountID, j.entry.EventID, j.nowMs); err != nil {
			return false, err
		}
		w.Metrics.Count(metrics.EventsInserted, 1)
		j.result.Final = ledger.Inserted
		return false, nil
	}
	return false, fmt.Errorf("unknown stage %q", stage)
}

func (w *Worker) bill(ctx context.Context, j *job) (bool, error) {
	billing := ledger.BillingFor(j.account, w.Catalog)
	if billing.Kind == ledger.BillReject {
		return w.reject(ctx, j, billing.Reason)
	}
	outcome, err := ledger.AcceptBilling(ctx, w.Ledger, j.entry, billing, j.nowMs)
	switch {
	case errors.Is(err, ledger.ErrLimitReached):
		return w.reject(ctx, j, ledger.LimitReason(billing))
	case errors.Is(err, ledger.ErrNotInserting):
		return false, fmt.Errorf("event %s: %w", j.entry.EventID, err) // re-read on redelivery
	case err != nil:
		return false, err
	}
	if outcome == ledger.Accepted {
		j.result.Billed = true
		w.Metrics.Count(metrics.EventsBilled, 1, metrics.Dimension{Name: "Tier", Value: string(billing.Tier)})
		j.log.Info("billing accepted", "tier", billing.Tier)
	} else {
		j.log.Info("billing already accepted by an earlier attempt")
	}
	j.entry.BillingAcceptedAtMs = j.nowMs
	return false, nil
}

func (w *Worker) reject(ctx context.Context, j *job, reason string) (bool, error) {
	if err := w.Ledger.Reject(ctx, j.entry.AccountID, j.entry.EventID, reason, j.nowMs); err != nil {
		return false, err
	}
	w.Metrics.Count(metrics.EventsRejected, 1)
	j.log.Info("event rejected", "reason", reason)
	j.result.Final = ledger.Rejected
	return true, nil
}

// archiveOne archives one event's payload. An event a batch claimed is archived in its batch's
// object, which only the batch's message can write (it holds every payload the object does): it
// is archived once that object exists, and until then the message is retried.
func (w *Worker) archiveOne(ctx context.Context, j *job) error {
	if j.entry.ArchiveKey == "" {
		return w.Archive.Put(ctx, archive.Key(j.entry.AccountID, j.entry.EventID, j.entry.RowInsertedAtMs), j.env.Event)
	}
	ok, err := w.Archive.Exists(ctx, j.entry.ArchiveKey)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("event %s: its batch %s has not archived it yet: %w", j.entry.EventID, j.entry.Batch, errRetry)
	}
	return nil
}

// rowFor is an event's analytics row, pointing at its archived payload.
func (w *Worker) rowFor(ev event.Event, e ledger.Entry) (analytics.Row, error) {
	loc := e.ArchiveLocation()
	row, err := analytics.RowFor(w.Schema, ev, e.AccountID, e.ReceivedAtMs, e.RowInsertedAtMs, e.Cycle, loc.Key)
	row.ArchiveOffset, row.ArchiveLength = loc.Offset, loc.Length
	return row, err
}

func (w *Worker) insert(ctx context.Context, j *job) (bool, error) {
	row, err := w.rowFor(j.ev, j.entry)
	if err == nil {
		err = w.Analytics.Write(ctx, row)
	}
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, analytics.ErrRowRejected) {
		return false, err
	}
	count, qerr := w.Ledger.Quarantine(ctx, j.entry.AccountID, j.entry.EventID, err.Error(), j.nowMs)
	if qerr != nil {
		return false, qerr
	}
	limit := w.MaxQuarantines
	if limit <= 0 {
		limit = DefaultMaxQuarantines
	}
	if count < limit {
		w.Metrics.Count(metrics.EventsQuarantined, 1)
		j.log.Warn("analytics row refused; will retry", "quarantineCount", count, "err", err)
		return false, fmt.Errorf("event %s: quarantined %d of %d: %w", j.entry.EventID, count, limit, err)
	}
	if err := w.Ledger.MarkUninsertable(ctx, j.entry.AccountID, j.entry.EventID, j.nowMs); err != nil {
		return false, err
	}
	w.Metrics.Count(metrics.EventsUninsertable, 1)
	j.log.Error("event UNINSERTABLE: its payload is archived; fix the row's cause and re-drive it",
		"quarantineCount", count, "err", err)
	j.result.Final = ledger.Uninsertable
	return true, nil
}
