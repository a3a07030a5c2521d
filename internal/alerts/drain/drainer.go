package drain

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/alerts/send"
	"github.com/ferrymeter/ferry/internal/platform/fanout"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Limits of one run, with their units.
const (
	// MaxFanOutsPerRun bounds the notifications one run fans out.
	MaxFanOutsPerRun = 50
	// MaxDeliveriesPerRun bounds the deliveries one run looks at.
	MaxDeliveriesPerRun = 100
	// SendConcurrency bounds the attempts in flight at once.
	SendConcurrency = 10
	// recordTimeout bounds writing an attempt's outcome.
	recordTimeout = 5 * time.Second
	// StopMargin is the time a run keeps, before the end of its context, for the attempts in
	// flight to end and their outcomes to be written: no claim is taken within it.
	StopMargin = send.DefaultTimeout + recordTimeout + 5*time.Second
	// RunBudget bounds a run whose context has no deadline (ferry dev, tests) as the function's
	// timeout bounds it in Lambda.
	RunBudget = resources.NotifierTimeout - StopMargin
	// ownerRandomBytes is the randomness in the name of a notifier that was given none.
	ownerRandomBytes = 6
)

// Sender makes one attempt to deliver a message (send.Sender implements it).
type Sender interface {
	Send(ctx context.Context, ep send.Endpoint, msg send.Message) send.Outcome
}

// Endpoints lists the registered endpoints (endpoints.Store implements it).
type Endpoints interface {
	All(ctx context.Context) ([]endpoints.Endpoint, error)
}

// Point is a place in the notifier's work, for Hook.
type Point string

// Points a Hook sees.
const (
	// BeforeMark: a notification's deliveries are written; it is not marked fanned out yet.
	BeforeMark Point = "before mark"
	// BeforeClaim: the delivery is read and claimable; the claim is not written.
	BeforeClaim Point = "before claim"
	// AfterClaim: the claim is written, the attempt not made.
	AfterClaim Point = "after claim"
	// AfterSend: the attempt is made (whatever its outcome); the delivery does not record it yet.
	AfterSend Point = "after send"
)

// Drainer fans notifications out and delivers them: the notifier's run.
type Drainer struct {
	Store     *Store
	Endpoints Endpoints
	Sender    Sender
	Metrics   metrics.Recorder
	Log       *slog.Logger
	Now       func() time.Time
	// Rand draws the backoff jitter; nil uses a source seeded from crypto/rand. Tests give a
	// seeded one, so every wait is known. It is only read under the drainer's lock.
	Rand mathrand.Source
	// Owner names this notifier in its claims; empty picks a random name.
	Owner string
	// Concurrency bounds the attempts one run makes at once; 0 means SendConcurrency.
	Concurrency int
	// Hook runs at each Point; an error stops the work on that item there, as if the process
	// died. Tests use it to kill the notifier in each crash window; production leaves it nil.
	Hook func(ctx context.Context, p Point, ref Ref) error

	once  sync.Once
	owner string
	mu    sync.Mutex
	rand  mathrand.Source
}

// Result counts what one run did.
type Result struct {
	// Fanned counts the notifications marked fanned out; Created the deliveries written.
	Fanned  int
	Created int
	// Due counts the deliveries found due; the others count what became of them.
	Due       int
	Delivered int
	Retrying  int
	Dead      int
	Skipped   int
	Lapsed    int
	// Deferred counts the notifications and deliveries left for the next run because this one
	// neared its end.
	Deferred int
	Failed   int
}

// Run fans out the due notifications, then delivers the due deliveries (those it just wrote
// included), and stops claiming once the run nears its end. It fails when an item could not be
// brought to a next state; that item is due again at the next run (a claim, when its deadline
// lapses).
func (d *Drainer) Run(ctx context.Context) (Result, error) {
	d.init()
	var res Result
	stopAtMs := d.Now().Add(RunBudget).UnixMilli()
	refs, err := d.Store.Due(ctx, d.Now().UnixMilli())
	if err != nil || len(refs) == 0 {
		return res, err
	}
	// The endpoints are read once per run, and only by a run that has work: the fan-out and every
	// attempt of this run see the same endpoints.
	eps, err := d.Endpoints.All(ctx)
	if err != nil {
		return res, err
	}
	var errs []error
	fanned := 0
	for _, ref := range refs {
		if ref.IsDelivery() {
			continue
		}
		if fanned == MaxFanOutsPerRun || d.stopping(ctx, stopAtMs) {
			res.Deferred++
			continue
		}
		fanned++
		created, marked, err := d.FanOut(ctx, ref, eps)
		res.Created += created
		if marked {
			res.Fanned++
		}
		if err != nil {
			res.Failed++
			errs = append(errs, err)
		}
	}

	// The index is read again, so the deliveries just written are sent in this run.
	if refs, err = d.Store.Due(ctx, d.Now().UnixMilli()); err != nil {
		return res, errors.Join(append(errs, err)...)
	}
	var deliveries []Ref
	for _, ref := range refs {
		if ref.IsDelivery() && len(deliveries) < MaxDeliveriesPerRun {
			deliveries = append(deliveries, ref)
		}
	}
	res.Due = len(deliveries)
	byID := make(map[string]endpoints.Endpoint, len(eps))
	for _, ep := range eps {
		byID[ep.ID] = ep
	}
	concurrency := SendConcurrency
	if d.Concurrency > 0 {
		concurrency = d.Concurrency
	}
	deliver := func(ref Ref) (Outcome, error) {
		if d.stopping(ctx, stopAtMs) {
			return "", errDeferred
		}
		return d.Deliver(ctx, ref, byID)
	}
	fanout.Each(deliveries, concurrency, deliver, func(_ Ref, out Outcome, err error) {
		switch {
		case errors.Is(err, errDeferred):
			res.Deferred++
		case err != nil:
			res.Failed++
			errs = append(errs, err)
		case out == OutcomeDelivered:
			res.Delivered++
		case out == OutcomeRetrying:
			res.Retrying++
		case out == OutcomeDead:
			res.Dead++
		case out == OutcomeLapsed:
			res.Lapsed++
		default:
			res.Skipped++
		}
	})
	return res, errors.Join(errs...)
}

// errDeferred: the run neared its end before it came to the item.
var errDeferred = errors.New("left for the next run")

// stopping reports whether the run must take no more work: its context ended or is within
// StopMargin of its deadline (Lambda's timeout, on the wall clock), or its budget (on the
// drainer's clock) is spent.
func (d *Drainer) stopping(ctx context.Context, stopAtMs int64) bool {
	if ctx.Err() != nil {
		return true
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < StopMargin {
		return true
	}
	return d.Now().UnixMilli() >= stopAtMs
}

// FanOut writes a delivery of the notification at ref for every endpoint of eps that wants it,
// then marks the notification fanned out. A notification that is gone or no longer NEW is left
// alone. It returns how many deliveries it wrote (a delivery already there is not rewritten) and
// whether it wrote the mark.
func (d *Drainer) FanOut(ctx context.Context, ref Ref, eps []endpoints.Endpoint) (created int, marked bool, err error) {
	id := ref.Notification()
	item, n, err := d.Store.notification(ctx, id)
	if errors.Is(err, errNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if n.Status != notify.StatusNew {
		return 0, false, nil
	}
	nowMs := d.Now().UnixMilli()
	targets := Targets(n, eps)
	for _, ep := range targets {
		ok, err := d.Store.putDelivery(ctx, NewRecord(n, ep.ID, nowMs))
		if err != nil {
			return created, false, fmt.Errorf("fan out %s: %w", id, err)
		}
		if ok {
			created++
		}
	}
	if err := d.hook(ctx, BeforeMark, ref); err != nil {
		return created, false, err
	}
	if marked, err = d.Store.markFanned(ctx, item, sortedIDs(targets), nowMs); err != nil {
		return created, false, err
	}
	if marked {
		d.Log.Info("notification fanned out", "notification", id, "kind", n.Kind, "account", n.Account, "endpoints", len(targets))
	}
	return created, marked, nil
}

// Deliver claims the delivery at ref, makes one attempt to its endpoint (from eps, by id) and
// records the outcome. A delivery that is not claimable (finished, claimed by another notifier,
// not yet due) is skipped.
func (d *Drainer) Deliver(ctx context.Context, ref Ref, eps map[string]endpoints.Endpoint) (Outcome, error) {
	d.init()
	r, err := d.Store.delivery(ctx, ref)
	if errors.Is(err, errNotFound) {
		return OutcomeSkipped, nil
	}
	if err != nil {
		return "", err
	}
	nowMs := d.Now().UnixMilli()
	if !r.Claimable(nowMs) {
		return OutcomeSkipped, nil
	}
	log := d.Log.With("notification", r.Notification, "endpoint", r.Endpoint, "kind", r.Kind, "account", r.Account)
	_, n, err := d.Store.notification(ctx, r.Notification)
	if errors.Is(err, errNotFound) {
		return d.abandon(ctx, r, "its notification is no longer stored", nowMs, log)
	}
	if err != nil {
		return "", err
	}
	ep, ok := eps[r.Endpoint]
	switch {
	case !ok:
		return d.abandon(ctx, r, "its endpoint was removed", nowMs, log)
	case ep.Disabled:
		return d.abandon(ctx, r, "its endpoint is disabled", nowMs, log)
	}

	if err := d.hook(ctx, BeforeClaim, ref); err != nil {
		return "", err
	}
	claimed, err := d.Store.rewrite(ctx, r.Claimed(d.owner, nowMs), r.Rev)
	if errors.Is(err, errChanged) {
		return OutcomeSkipped, nil // another notifier claimed it first
	}
	if err != nil {
		return "", err
	}
	if err := d.hook(ctx, AfterClaim, ref); err != nil {
		return "", err
	}
	// The claim must still have time to run: a notifier paused past its margin leaves the
	// delivery to whoever takes the claim over, rather than send alongside it.
	at := d.Now()
	if !claimed.MaySend(at.UnixMilli()) {
		log.Warn("claim too close to its deadline to send; leaving the delivery to the next notifier")
		return OutcomeLapsed, nil
	}
	out := d.Sender.Send(ctx, send.Endpoint{URL: ep.URL, Secrets: ep.SigningSecrets(at.UnixMilli())},
		send.Message{ID: n.ID, Timestamp: at, Body: n.Body})
	if err := d.hook(ctx, AfterSend, ref); err != nil {
		return "", err
	}

	nowMs = d.Now().UnixMilli()
	// The outcome is recorded even when the caller's context ended with the attempt: a delivery
	// left SENDING would wait out its claim for nothing.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if out.Delivered {
		if _, err := d.Store.rewrite(ctx, claimed.AfterDelivered(out, nowMs), claimed.Rev); err != nil {
			if errors.Is(err, errChanged) {
				// The claim lapsed and another notifier took the delivery over: it sends the same
				// webhook-id again, which the receiver recognises.
				log.Warn("delivered, but the delivery was taken over before it could be marked DELIVERED")
				return OutcomeDelivered, nil
			}
			return "", fmt.Errorf("mark the delivery of %s to %s DELIVERED: %w", r.Notification, r.Endpoint, err)
		}
		d.Metrics.Count(metrics.NotificationsDelivered, 1)
		log.Info("notification delivered", "status", out.Status, "attempts", claimed.Attempts)
		return OutcomeDelivered, nil
	}

	next, outcome := claimed.AfterFailure(out, d.jitter(BackoffWindow(claimed.Attempts)), nowMs)
	if outcome == OutcomeDead {
		// The alarm comes before the write: a DEAD delivery is never looked at again, so a write
		// that commits but whose answer is lost must not take the alarm with it. A write that did
		// not commit leaves the delivery claimed; the next notifier's last try raises it again.
		d.Metrics.Count(metrics.NotificationsDead, 1)
		log.Error("delivery DEAD: the endpoint did not accept the notification; read the endpoint's delivery log, fix the receiver, then replay it",
			"attempts", claimed.Attempts, "status", out.Status, "retryable", out.Retryable, "err", out.Err)
	}
	if _, err := d.Store.rewrite(ctx, next, claimed.Rev); err != nil && !errors.Is(err, errChanged) {
		return "", fmt.Errorf("record the failed attempt of %s to %s: %w", r.Notification, r.Endpoint, err)
	}
	if outcome == OutcomeRetrying {
		d.Metrics.Count(metrics.NotificationsRetried, 1)
		log.Warn("notification not delivered; backing off", "attempts", claimed.Attempts, "status", out.Status,
			"nextAttemptAt", time.UnixMilli(next.NextAttemptAtMs).UTC(), "err", out.Err)
	}
	return outcome, nil
}

// abandon makes a delivery DEAD without an attempt: what it would be sent to, or with, is gone.
// The operator did that (removed or disabled the endpoint), so no alarm is raised.
func (d *Drainer) abandon(ctx context.Context, r Record, why string, nowMs int64, log *slog.Logger) (Outcome, error) {
	if _, err := d.Store.rewrite(ctx, r.Abandoned(why, nowMs), r.Rev); err != nil {
		if errors.Is(err, errChanged) {
			return OutcomeSkipped, nil
		}
		return "", err
	}
	log.Warn("delivery DEAD without an attempt", "why", why)
	return OutcomeDead, nil
}

// init names the drainer's owner and its jitter source, once.
func (d *Drainer) init() {
	d.once.Do(func() {
		d.owner = d.Owner
		if d.owner == "" {
			var b [ownerRandomBytes]byte
			_, _ = rand.Read(b[:])
			d.owner = "notifier-" + hex.EncodeToString(b[:])
		}
		d.rand = d.Rand
		if d.rand == nil {
			var seed [32]byte
			_, _ = rand.Read(seed[:])
			d.rand = mathrand.NewChaCha8(seed)
		}
	})
}

// jitter draws the wait from window (see Jitter).
func (d *Drainer) jitter(window time.Duration) time.Duration {
	d.mu.Lock()
	u := d.rand.Uint64()
	d.mu.Unlock()
	return Jitter(window, u)
}

func (d *Drainer) hook(ctx context.Context, p Point, ref Ref) error {
	if d.Hook == nil {
		return nil
	}
	return d.Hook(ctx, p, ref)
}
