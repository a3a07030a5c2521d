package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
)

// Redrive is the operator's path back for an UNINSERTABLE event, once the cause of its refused
// row is fixed: the ledger entry goes back to INSERTING and the archived payload is queued again
// with its original envelope. The scenario table then stores and marks it without billing it
// again (its checkpoint is present). Rerunning a redrive is safe: an INSERTING entry is queued
// again, and a finished one is left alone.
type Redrive struct {
	Ledger interface {
		Get(ctx context.Context, accountID, eventID string) (ledger.Entry, error)
		Reopen(ctx context.Context, accountID, eventID string, nowMs int64) error
	}
	Archive interface {
		Read(ctx context.Context, loc archive.Location) ([]byte, error)
	}
	Queue interface {
		Send(ctx context.Context, env event.Envelope) error
	}
	NowMs func() int64
}

// ErrNotRedrivable: the event is finished (INSERTED or REJECTED); there is nothing to redrive.
var ErrNotRedrivable = errors.New("the event is not UNINSERTABLE or INSERTING")

// Run redrives one event and returns its status before the redrive.
func (r *Redrive) Run(ctx context.Context, accountID, eventID string) (ledger.Status, error) {
	e, err := r.Ledger.Get(ctx, accountID, eventID)
	if err != nil {
		return "", err
	}
	if e.Status != ledger.Uninsertable && e.Status != ledger.Inserting {
		return e.Status, fmt.Errorf("%s is %s: %w", eventID, e.Status, ErrNotRedrivable)
	}
	payload, err := r.Archive.Read(ctx, e.ArchiveLocation())
	if err != nil {
		return e.Status, fmt.Errorf("read the archived payload: %w", err)
	}
	if _, err := event.Parse(payload); err != nil {
		return e.Status, fmt.Errorf("the archived payload is not a valid event: %w", err)
	}
	// Reopen first: a crash before the send leaves an INSERTING entry, which a rerun queues.
	if e.Status == ledger.Uninsertable {
		if err := r.Ledger.Reopen(ctx, accountID, eventID, r.NowMs()); err != nil {
			return e.Status, err
		}
	}
	env := event.Envelope{AccountID: accountID, EventID: eventID, ReceivedAtMs: e.ReceivedAtMs, Event: payload}
	if err := r.Queue.Send(ctx, env); err != nil {
		return e.Status, fmt.Errorf("queue the event again (rerun the redrive): %w", err)
	}
	return e.Status, nil
}
