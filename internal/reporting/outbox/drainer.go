package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/platform/fanout"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/stripe"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

// Limits of one drain.
const (
	// MaxRowsPerRun bounds the rows one run claims.
	MaxRowsPerRun = 100
	// sendConcurrency bounds the rows sent at once.
	sendConcurrency = 10
	// recordTimeout bounds writing a send's outcome.
	recordTimeout = 5 * time.Second
)

// Sender sends one meter event to Stripe (the stripe client implements it).
type Sender interface {
	Send(ctx context.Context, e stripe.MeterEvent) error
}

// Store is what the drainer reads and writes (Table implements it).
type Store interface {
	Get(ctx context.Context, ref Ref) (Row, error)
	Rewrite(ctx context.Context, next Row, prev int64) (Row, error)
	// RewriteNotifying is Rewrite and, in the same write, the notification n (put once).
	RewriteNotifying(ctx context.Context, next Row, prev int64, n notify.Notification) (Row, error)
	Due(ctx context.Context, nowMs int64, limit int) ([]Ref, error)
}

// Reviewer lists what a person must settle (review.Table implements it).
type Reviewer interface {
	Add(ctx context.Context, e review.Entry) (bool, error)
}

// Point is a place in one row's drain, for Hook.
type Point string

// Points a Hook sees.
const (
	// BeforeClaim: the row is read and claimable; the claim is not written.
	BeforeClaim Point = "before claim"
	// AfterClaim: the claim is written, the event not sent.
	AfterClaim Point = "after claim"
	// AfterSend: Stripe accepted the event; the row does not say SENT yet.
	AfterSend Point = "after send"
)

// Drainer sends the outbox's due rows.
type Drainer struct {
	Store   Store
	Sender  Sender
	Review  Reviewer
	Metrics metrics.Recorder
	Log     *slog.Logger
	Now     func() time.Time
	// Owner names this drainer in its claims; empty picks a random name.
	Owner string
	// Concurrency bounds the rows one run sends at once; 0 means sendConcurrency. The fault
	// harness, which owns every interleaving, runs one at a time.
	Concurrency int
	// Hook runs at each Point; an error stops the row there, as if the process died. Tests use
	// it to kill the drainer in each crash window; production leaves it nil.
	Hook func(ctx context.Context, p Point, r Row) error

	holder LeaseOwner
}

// Result counts what one run did.
type Result struct {
	Due      int
	Sent     int
	Retrying int
	Dead     int
	Review   int
	Skipped  int
	Failed   int
}

// Run drains up to MaxRowsPerRun due rows, sendConcurrency at a time. It fails when a row could
// not be brought to a next state (its claim or its outcome could not be written); that row is
// due again when its claim lapses.
func (d *Drainer) Run(ctx context.Context) (Result, error) {
	refs, err := d.Store.Due(ctx, d.Now().UnixMilli(), MaxRowsPerRun)
	res := Result{Due: len(refs)}
	if err != nil {
		return res, err
	}
	var errs []error
	drain := func(ref Ref) (Outcome, error) { return d.Drain(ctx, ref) }
	concurrency := sendConcurrency
	if d.Concurrency > 0 {
		concurrency = d.Concurrency
	}
	fanout.Each(refs, concurrency, drain, func(_ Ref, out Outcome, err error) {
		switch {
		case err != nil:
			res.Failed++
			errs = append(errs, err)
		case out == OutcomeSent:
			res.Sent++
		case out == OutcomeRetrying:
			res.Retrying++
		case out == OutcomeDead:
			res.Dead++
		case out == OutcomeReview:
			res.Review++
		default:
			res.Skipped++
		}
	})
	return res, errors.Join(errs...)
}

// Drain claims one row and sends it. A row that is not claimable (sent, claimed by another
// drainer, not yet due) is skipped.
func (d *Drainer) Drain(ctx context.Context, ref Ref) (Outcome, error) {
	row, err := d.Store.Get(ctx, ref)
	if errors.Is(err, ErrNotFound) {
		return OutcomeSkipped, nil
	}
	if err != nil {
		return "", err
	}
	nowMs := d.Now().UnixMilli()
	if !row.Claimable(nowMs) {
		return OutcomeSkipped, nil
	}
	log := d.Log.With("account", row.Account, "feature", row.Feature, "cycle", row.Cycle, "identifier", row.Identifier())
	if row.TooLate(nowMs) {
		return d.toReview(ctx, row, nowMs, log)
	}
	if err := d.hook(ctx, BeforeClaim, row); err != nil {
		return "", err
	}
	claimed, err := d.Store.Rewrite(ctx, row.Claimed(d.holder.Name(d.Owner, "drainer"), nowMs), row.Rev)
	if errors.Is(err, ErrChanged) {
		return OutcomeSkipped, nil // another drainer claimed it first
	}
	if err != nil {
		return "", err
	}
	if err := d.hook(ctx, AfterClaim, claimed); err != nil {
		return "", err
	}
	// The claim must still have time to run: a drainer paused past its margin leaves the row to
	// whoever takes the claim over, rather than send alongside it.
	if !claimed.MaySend(d.Now().UnixMilli()) {
		log.Warn("claim too close to its deadline to send; leaving the row to the next drainer")
		return OutcomeLapsed, nil
	}
	sendErr := d.Sender.Send(ctx, stripe.MeterEvent{
		Identifier: claimed.Identifier(), EventName: claimed.EventName, Customer: claimed.Customer,
		Value: claimed.Value(), Timestamp: time.UnixMilli(claimed.TimestampMs),
	})
	nowMs = d.Now().UnixMilli()
	// The outcome is recorded even when the caller's context ended with the send: a row left
	// SENDING would wait out its claim for nothing.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if sendErr != nil {
		retryAfter := time.Duration(0)
		var se *stripe.Error
		if errors.As(sendErr, &se) {
			retryAfter = se.RetryAfter
		}
		next, out := claimed.AfterFailure(sendErr.Error(), stripe.IsRetryable(sendErr), retryAfter, nowMs)
		write := d.Store.Rewrite
		if out == OutcomeDead {
			// The alarm comes before the write: a DEAD row is never looked at again, so a write
			// that commits but whose answer is lost must not take the alarm with it. A write that
			// did not commit leaves the row claimed; the next drainer's last try raises it again.
			d.Metrics.Count(metrics.OutboxDead, 1)
			log.Error("outbox row DEAD: its meter event is not on Stripe's meter; the reconciler repairs the meter from the ledger",
				"attempts", claimed.Attempts, "err", sendErr)
			// The platform is told in the write that marks the row DEAD (outbox.dead): the
			// notification exists exactly when the row is DEAD, and once, whoever marks it.
			write = func(ctx context.Context, next Row, prev int64) (Row, error) {
				return d.Store.RewriteNotifying(ctx, next, prev, deadNote(next))
			}
		}
		if _, err := write(ctx, next, claimed.Rev); err != nil && !errors.Is(err, ErrChanged) {
			return "", fmt.Errorf("record the failed send of %s: %w", claimed.Identifier(), err)
		}
		if out != OutcomeDead {
			d.Metrics.Count(metrics.OutboxRetried, 1)
			log.Warn("meter event not sent; backing off", "attempts", claimed.Attempts, "nextAttemptAt", time.UnixMilli(next.NextAttemptAtMs).UTC(), "err", sendErr)
		}
		return out, nil
	}
	if err := d.hook(ctx, AfterSend, claimed); err != nil {
		return "", err
	}
	if _, err := d.Store.Rewrite(ctx, claimed.AfterSend(nowMs), claimed.Rev); err != nil {
		if errors.Is(err, ErrChanged) {
			// The claim lapsed and another drainer took the row over: it sends the same
			// identifier again, which Stripe counts once.
			log.Warn("meter event sent, but the row was taken over before it could be marked SENT")
			return OutcomeSent, nil
		}
		return "", fmt.Errorf("mark %s SENT: %w", claimed.Identifier(), err)
	}
	d.Metrics.Count(metrics.OutboxSent, 1)
	log.Info("meter event sent", "value", claimed.Value(), "absolute", claimed.Absolute, "attempts", claimed.Attempts)
	return OutcomeSent, nil
}

// deadNote is the outbox.dead notification of a row gone DEAD: one per row (its identifier is
// the notification's subject), with the row's account, feature and cycle and the last error.
func deadNote(dead Row) notify.Notification {
	return notify.Notification{
		Kind: notify.OutboxDead, Account: dead.Account, Feature: dead.Feature, Cycle: dead.Cycle,
		Subject: dead.Identifier(), AtMs: dead.UpdatedAtMs, Detail: notify.Detail{Reason: dead.LastError},
	}
}

// toReview takes an unsent row whose cycle closed more than LateSendGrace ago off the outbox and
// lists it for review: sending it now would date usage into a period whose invoice is final.
func (d *Drainer) toReview(ctx context.Context, row Row, nowMs int64, log *slog.Logger) (Outcome, error) {
	if _, err := d.Review.Add(ctx, review.Entry{
		Account: row.Account, Feature: row.Feature, Cycle: row.Cycle, Provider: "stripe", Reason: review.OutboxClosed,
		Ledger: row.Total, Sent: row.Total - row.Delta,
		Detail: fmt.Sprintf("The meter event %s (value %d) was still unsent when its cycle closed; it was not sent.", row.Identifier(), row.Value()),
		AtMs:   nowMs,
	}); err != nil {
		return "", err
	}
	next := row
	next.Status, next.UpdatedAtMs, next.LastError = Review, nowMs, "the cycle closed before the row was sent"
	if _, err := d.Store.Rewrite(ctx, next, row.Rev); err != nil && !errors.Is(err, ErrChanged) {
		return "", err
	}
	log.Warn("outbox row too late for its cycle; listed for review")
	return OutcomeReview, nil
}

func (d *Drainer) hook(ctx context.Context, p Point, r Row) error {
	if d.Hook == nil {
		return nil
	}
	return d.Hook(ctx, p, r)
}
