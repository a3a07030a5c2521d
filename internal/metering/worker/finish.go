package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
)

// Finishing a member from its own entry: an event its unit did not claim — another unit claimed
// it (a redelivery grouped differently, the same event in two messages, a client's resend), or an
// operator's redrive reopened it — re-enters where its entry says. Its claim billed it, or it is
// finished; no step here ever bills. It may still need its payload archived (an entry an earlier
// release claimed alone, archived under a key of its own), its row written (a row the unit's
// rows item could not hold, or one refused and quarantined) and its mark.

// job is one member's finishing: the values every step reads.
type job struct {
	env     event.Envelope
	ev      event.Event
	account accounts.Account
	entry   ledger.Entry
	nowMs   int64
	log     *slog.Logger
	result  Result
}

// finishAlone finishes one member from entry, its entry as its unit's strongly consistent read
// returned it.
func (w *Worker) finishAlone(ctx context.Context, env event.Envelope, ev event.Event, acct accounts.Account, entry ledger.Entry) (Result, error) {
	j := &job{env: env, ev: ev, account: acct, entry: entry, nowMs: w.Now().UnixMilli()}
	j.log = w.Log.With("account", env.AccountID, "eventId", env.EventID)
	state := ledger.State{Status: entry.Status, Billed: entry.Billed()}
	if entry.Status == ledger.Inserting {
		present, err := w.Analytics.Exists(ctx, entry.RowRef())
		if err != nil {
			return Result{}, err
		}
		state.RowPresent = present
	}
	sc := ledger.Match(state)
	j.result.Scenario, j.result.Final = sc.Name, entry.Status
	j.log = j.log.With("scenario", sc.Name)
	if sc.Retry {
		j.log.Warn("ledger state not usable; retrying later")
		return j.result, fmt.Errorf("event %s: %s: %w", env.EventID, sc.Name, errRetry)
	}
	if len(sc.Stages) == 0 {
		w.Metrics.Count(metrics.EventsDuplicate, 1)
		j.log.Info("redelivery of a finished event; acked")
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

// run executes one stage. stop reports that the event reached a terminal state and no further
// stage may run.
func (w *Worker) run(ctx context.Context, j *job, stage ledger.Stage) (stop bool, err error) {
	switch stage {
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

// archiveOne archives one member's payload. An event a unit claimed is archived in its unit's
// object, which that unit wrote before its claim (and only a delivery holding every payload the
// object does can write): it is archived once that object exists, and until then the message is
// retried. An entry an earlier release claimed alone has an object of its own, written here (the
// conditional put makes it free if that release wrote it).
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

// insert writes one event's row of its own. A row the sink refuses is quarantined: the event
// stays INSERTING and its message is retried, up to MaxQuarantines, after which the event ends
// UNINSERTABLE with a metric for the alarm (its payload is archived; an operator redrives it once
// the cause is fixed).
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
