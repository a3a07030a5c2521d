package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// Store is where the inbox lives. Table implements it.
type Store interface {
	// Insert stores a new event, its payload and its first receipt together; ErrCancelled if
	// the event exists (or the write met another).
	Insert(ctx context.Context, e Event, payload []byte, r Receipt) error
	// AddCopy counts one more delivery of a stored event and writes its receipt together;
	// ErrCancelled if the event does not exist.
	AddCopy(ctx context.Context, id string, r Receipt) error
	Get(ctx context.Context, id string) (Event, error)
	// Load returns the event and its payload.
	Load(ctx context.Context, id string) (Event, []byte, error)
	// Transition writes next if the event is still at readRev; ErrCancelled otherwise.
	Transition(ctx context.Context, readRev int64, next Event) error
	// Apply commits the decision's effect and the event's mark in one transaction, the mark
	// conditioned on claimedRev; ErrCancelled if any condition was refused.
	Apply(ctx context.Context, claimedRev int64, marked Event, d Decision) error
	Receipts(ctx context.Context, id string, limit int) ([]Receipt, error)
	Due(ctx context.Context, nowMs int64, limit int) ([]string, error)
	List(ctx context.Context, q ListQuery) (Page, error)
	// Tell writes a notification on its own, conditional on its absence: told is false when it
	// was told before.
	Tell(ctx context.Context, n notify.Notification) (told bool, err error)
}

// Nudger starts the worker on events: a queue message per event, optionally delayed.
type Nudger interface {
	Nudge(ctx context.Context, id string, delay time.Duration) error
	NudgeAll(ctx context.Context, ids []string) error
}

// maxIntakeTries bounds intake's insert-or-count loop; each lap follows an event that vanished
// (expired) between the two writes, or a write that met another transaction.
const maxIntakeTries = 3

// Intake stores verified deliveries.
type Intake struct {
	Store   Store
	Nudger  Nudger
	Metrics metrics.Recorder
	Log     *slog.Logger
	Now     func() time.Time
}

// Validate checks a verified delivery before anything is written.
func (d Delivery) Validate() error {
	var problems []string
	if !d.Source.Valid() {
		problems = append(problems, fmt.Sprintf("unknown source %q", d.Source))
	}
	if !ValidEventID(d.EventID) {
		problems = append(problems, fmt.Sprintf("the event id must be 1–%d bytes of printable UTF-8", MaxEventIDBytes))
	}
	if d.Type == "" || len(d.Type) > MaxEventIDBytes || !utf8.ValidString(d.Type) {
		problems = append(problems, "the event type must be 1–255 bytes of UTF-8")
	}
	if len(d.Payload) == 0 || len(d.Payload) > MaxPayloadBytes {
		problems = append(problems, fmt.Sprintf("the payload must be 1–%d bytes", MaxPayloadBytes))
	}
	return problem.Fields(problems)
}

// Accept stores a delivery and says whether it was a copy. The first delivery of an event
// inserts it (a conditional insert exactly one delivery can win); every later one adds 1 to its
// seen count; each writes its receipt in the same transaction. An error means nothing was
// stored: the provider must retry (503).
func (in *Intake) Accept(ctx context.Context, d Delivery) (Stored, error) {
	if err := d.Validate(); err != nil {
		return Stored{}, err
	}
	now := d.ReceivedAt
	if now.IsZero() {
		now = in.Now()
	}
	nowMs := now.UnixMilli()
	id := ID(d.Source, d.EventID)
	sha := PayloadSHA256(d.Payload)
	e := Event{
		ID: id, Source: d.Source, EventID: d.EventID, Type: d.Type, APIVersion: d.APIVersion,
		Status: Received, SeenCount: 1, Rev: 1, FirstSeenAtMs: nowMs, LastSeenAtMs: nowMs, UpdatedAtMs: nowMs,
		NextAttemptAtMs: nowMs, PayloadSHA256: sha, ExpiresAt: now.Add(Retention).Unix(),
	}
	if d.OccurredAt.Known() {
		e.OccurredAtMs, e.OrderKey = d.OccurredAt.Ms(), OrderKey(d.OccurredAt, d.Source, d.EventID)
	}
	r := Receipt{ReceivedAtMs: nowMs, WebhookID: d.WebhookID, KeyID: d.KeyID, PayloadSHA256: sha}
	log := in.Log.With("source", d.Source, "providerEvent", d.EventID, "event", id, "type", d.Type)
	// Each lap tries the insert and, when it is refused (the event is, probably, stored), counts
	// the copy; the copy's own condition says whether the event really exists. A lap whose copy is
	// refused too (the event vanished between the two, or a write met another) tries again.
	stored, err := retry.Do(ctx, retry.Contended.WithTries(maxIntakeTries), func(ctx context.Context, _ retry.Lap) (Stored, error) {
		r.Duplicate = false
		err := in.Store.Insert(ctx, e, d.Payload, r)
		if err == nil {
			return Stored{ID: id}, nil
		}
		if !IsCancelled(err) {
			return Stored{}, err
		}
		r.Duplicate = true
		err = in.Store.AddCopy(ctx, id, r)
		if err == nil {
			return Stored{ID: id, Duplicate: true}, nil
		}
		if IsCancelled(err) {
			return Stored{}, retry.Reread(err)
		}
		return Stored{}, err
	})
	if err != nil {
		in.Metrics.Count(metrics.WebhooksStoreFail, 1)
		return Stored{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if stored.Duplicate {
		in.Metrics.Count(metrics.WebhooksDuplicate, 1)
		log.Info("copy of a stored billing event counted")
		return stored, nil
	}
	in.Metrics.Count(metrics.WebhooksStored, 1)
	log.Info("billing event stored")
	if nerr := in.Nudger.Nudge(ctx, id, 0); nerr != nil {
		// Stored is what the answer promises; the sweep finds the event within a minute.
		log.Warn("the worker could not be nudged; the sweep will find the event", "err", nerr)
	}
	return stored, nil
}

// Applier claims stored events and applies them.
type Applier struct {
	Store Store
	// Accounts resolves a customer to its account; Grants reads the allowance rows.
	Accounts     *accounts.Service
	Grants       *allowance.Table
	Catalog      plans.Catalog
	Interpreters map[Source]Interpreter
	Nudger       Nudger
	Metrics      metrics.Recorder
	Log          *slog.Logger
	Now          func() time.Time
}

// Outcome is what one Process call left an event as.
type Outcome struct {
	Status Status
	// RetryAfter, when set, is when the event should be looked at again (a lease that lapses, a
	// backoff that ends); the caller nudges it with that delay.
	RetryAfter time.Duration
}

// maxClaimTries bounds the claim loop: each lap follows a claim that another writer overtook.
const maxClaimTries = 3

// maxReasonBytes bounds the failure text stored on an event.
const maxReasonBytes = 500

// Process looks at one event and, if it is due, claims and applies it. An error means the
// work stopped where it was (a worker that dies leaves the same state): the event stays as
// durable state says, and a later nudge or the sweep takes it up again.
func (w *Applier) Process(ctx context.Context, id string) (Outcome, error) {
	if !ValidID(id) {
		return Outcome{}, fmt.Errorf("process billing event %q: not an event id", id)
	}
	type claim struct {
		event   Event
		payload []byte
	}
	var out Outcome
	c, err := retry.Do(ctx, retry.Contended.WithTries(maxClaimTries), func(ctx context.Context, _ retry.Lap) (claim, error) {
		e, payload, err := w.Store.Load(ctx, id)
		if err != nil {
			return claim{}, err
		}
		now := w.Now()
		nowMs := now.UnixMilli()
		switch d := Claim(e, nowMs); d.Verdict {
		case AlreadyFinal:
			out = Outcome{Status: e.Status}
			return claim{}, nil
		case Leased, NotDue:
			out = Outcome{Status: e.Status, RetryAfter: RetryAt(nowMs, d.RetryAtMs)}
			return claim{}, nil
		case GiveUp:
			dead := e
			dead.Status, dead.Rev, dead.UpdatedAtMs, dead.FinishedAtMs = Dead, e.Rev+1, nowMs, nowMs
			dead.Reason = fmt.Sprintf("the worker stopped during the last of %d attempts (its lease lapsed)", MaxAttempts)
			// Before the write, see dead. The account is the one the event was last resolved to:
			// the payload is not interpreted again here, since interpreting it may be what kept
			// killing the worker (a Stripe re-fetch that hangs, a payload that exhausts memory).
			if err := w.dead(ctx, dead, e.AccountID); err != nil {
				return claim{}, err
			}
			if err := w.Store.Transition(ctx, e.Rev, dead); err != nil {
				return claim{}, rereadIfCancelled(err)
			}
			out = Outcome{Status: Dead}
			return claim{}, nil
		}
		claimed := e
		claimed.Status, claimed.Attempts, claimed.Rev = Processing, e.Attempts+1, e.Rev+1
		claimed.LeaseExpiresAtMs, claimed.UpdatedAtMs = now.Add(LeaseDuration).UnixMilli(), nowMs
		if err := w.Store.Transition(ctx, e.Rev, claimed); err != nil {
			// Refused: another worker claimed it first, or a replay moved it; read again.
			return claim{}, rereadIfCancelled(err)
		}
		return claim{event: claimed, payload: payload}, nil
	})
	switch {
	case errors.Is(err, ErrNotFound):
		w.Log.Warn("nudged for a billing event that does not exist", "event", id)
		return Outcome{}, nil
	case errors.Is(err, retry.ErrExhausted):
		// Claimed by someone else on every lap: its holder applies it.
		return Outcome{Status: Processing, RetryAfter: LeaseDuration}, nil
	case err != nil:
		return Outcome{}, err
	case c.payload == nil:
		return out, nil
	}
	return w.apply(ctx, c.event, c.payload)
}

// rereadIfCancelled asks the loop to read again when a write was refused: durable state says why.
func rereadIfCancelled(err error) error {
	if IsCancelled(err) {
		return retry.Reread(err)
	}
	return err
}

// apply decides and commits the claimed event's effect with its mark, resolving a cancelled
// transaction from durable state: if the event moved (a replay, or another worker after this
// one's lease lapsed) the work is not this worker's any more; if it did not, what the effect
// was decided from moved, and the worker decides again.
func (w *Applier) apply(ctx context.Context, claimed Event, payload []byte) (Outcome, error) {
	log := w.Log.With("event", claimed.ID, "source", claimed.Source, "type", claimed.Type, "attempt", claimed.Attempts)
	interp, ok := w.Interpreters[claimed.Source]
	if !ok {
		return w.fail(ctx, claimed, "", fmt.Errorf("no interpreter for source %s", claimed.Source))
	}
	facts, err := interp.Interpret(ctx, payload)
	if err != nil {
		return w.fail(ctx, claimed, "", fmt.Errorf("read the event: %w", err))
	}
	// resolved is the account the last lap resolved the event's customer to: the account a
	// failure that ends the event DEAD is told for.
	var resolved string
	// Each lap reads the inputs, decides and commits. A cancelled commit is resolved by reading
	// the event: if it moved, the work is another's; if not, what the effect was decided from
	// moved, and the next lap decides again.
	out, err := retry.Do(ctx, retry.Contended, func(ctx context.Context, _ retry.Lap) (Outcome, error) {
		in, err := w.inputs(ctx, claimed, facts)
		if err != nil {
			return Outcome{}, &attemptFailed{err}
		}
		resolved = ""
		if in.Account != nil {
			resolved = in.Account.ID
		}
		d := Decide(in)
		marked := markedAs(claimed, d, in.NowMs)
		err = w.Store.Apply(ctx, claimed.Rev, marked, d)
		if err == nil {
			w.done(log, marked, d)
			return Outcome{Status: d.Status}, nil
		}
		if !IsCancelled(err) {
			return Outcome{}, &attemptFailed{err}
		}
		cur, gerr := w.Store.Get(ctx, claimed.ID)
		if gerr != nil {
			return Outcome{}, &stopped{gerr}
		}
		if cur.Rev != claimed.Rev {
			log.Info("the claim was overtaken (a replay, or another worker after the lease lapsed); leaving the event to it",
				"status", cur.Status)
			return Outcome{Status: cur.Status}, nil
		}
		return Outcome{}, retry.Again(errInputsMoved)
	})
	var failed *attemptFailed
	var stop *stopped
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &failed):
		return w.fail(ctx, claimed, resolved, failed.cause)
	case errors.As(err, &stop):
		return Outcome{}, stop.cause
	case errors.Is(err, retry.ErrExhausted):
		return w.fail(ctx, claimed, resolved, fmt.Errorf("the account or its allowance kept changing: %w", err))
	}
	return w.fail(ctx, claimed, resolved, err)
}

// errInputsMoved: the commit was refused and the event had not moved, so what its effect was
// decided from did (or the transaction met another).
var errInputsMoved = errors.New("the account or its allowance changed since they were read")

// attemptFailed ends the apply loop with a failed attempt (recorded, with its backoff);
// stopped ends it with the work stopping where it is (durable state unread). Neither unwraps, so
// the retry policy never classes their causes as worth another lap.
type attemptFailed struct{ cause error }

func (e *attemptFailed) Error() string { return e.cause.Error() }

type stopped struct{ cause error }

func (e *stopped) Error() string { return e.cause.Error() }

// inputs reads what the claimed event's effect is decided from: the linked account and, for
// the kinds that grant, the allowance rows of the account's cycle at the event time.
func (w *Applier) inputs(ctx context.Context, claimed Event, facts Facts) (ApplyInput, error) {
	in := ApplyInput{Event: claimed, Facts: facts, Catalog: w.Catalog, NowMs: w.Now().UnixMilli()}
	for _, ref := range facts.Customers {
		a, err := w.Accounts.Linked(ctx, ref.Kind, ref.ID)
		if errors.Is(err, accounts.ErrNotFound) {
			continue
		}
		if err != nil {
			return ApplyInput{}, fmt.Errorf("resolve %s %s: %w", ref.Kind.Field(), ref.ID, err)
		}
		in.Account, in.Link = &a, ref
		break
	}
	if in.Account == nil || !facts.Time.Known() || (facts.Kind != PlanChange && facts.Kind != Payment) {
		return in, nil
	}
	label := in.Account.CycleAt(facts.Time.Time()).Label()
	in.Cycles = map[string]allowance.Cycle{}
	for _, feature := range w.Catalog.AllowanceFeatures() {
		c, err := w.Grants.Read(ctx, in.Account.ID, feature, label)
		if err != nil {
			return ApplyInput{}, err
		}
		in.Cycles[feature] = c
	}
	return in, nil
}

// markedAs is the claimed event as its decision leaves it.
func markedAs(claimed Event, d Decision, nowMs int64) Event {
	e := claimed
	e.Status, e.Result, e.Reason, e.Rev = d.Status, d.Result, d.Reason, claimed.Rev+1
	e.UpdatedAtMs, e.FinishedAtMs, e.NextAttemptAtMs = nowMs, nowMs, 0
	if d.AccountID != "" {
		e.AccountID = d.AccountID
	}
	return e
}

// fail ends a claimed event's failed attempt: FAILED until its backoff ends, or DEAD after the
// last attempt. If even that write fails, the work stops where it is (a worker that died there
// leaves the same state) and the lease lapses. account is the account the attempt resolved the
// event to ("" if it did not get that far).
func (w *Applier) fail(ctx context.Context, claimed Event, account string, cause error) (Outcome, error) {
	now := w.Now().UnixMilli()
	status, next := AfterFailure(claimed, now)
	failed := claimed
	failed.Status, failed.NextAttemptAtMs, failed.Rev, failed.UpdatedAtMs = status, next, claimed.Rev+1, now
	failed.Reason = truncate(fmt.Sprintf("attempt %d of %d failed: %v", claimed.Attempts, MaxAttempts, cause), maxReasonBytes)
	if status == Dead {
		failed.FinishedAtMs = now
		// Before the write: see dead. An event that never resolved this time may have before
		// (it was applied, then replayed).
		if err := w.dead(ctx, failed, cmp.Or(account, claimed.AccountID)); err != nil {
			return Outcome{}, errors.Join(cause, err)
		}
	}
	if err := w.Store.Transition(ctx, claimed.Rev, failed); err != nil {
		if IsCancelled(err) {
			// Overtaken meanwhile (a replay, another worker): its state stands.
			return Outcome{}, nil
		}
		return Outcome{}, errors.Join(cause, err)
	}
	if status == Dead {
		return Outcome{Status: Dead}, nil
	}
	w.Metrics.Count(metrics.InboxFailed, 1)
	w.Log.Warn("billing event attempt failed; it will be retried", "event", claimed.ID, "attempt", claimed.Attempts,
		"nextAttemptAt", time.UnixMilli(next).UTC().Format(time.RFC3339), "err", cause)
	return Outcome{Status: Failed, RetryAfter: RetryAt(now, next)}, nil
}

// dead raises the alarm, and tells billing_event.dead, for an event about to be written DEAD.
// Both come before the write: a DEAD event is never looked at again, so a write that commits but
// whose answer is lost must not take the alarm or the notification with it. A write that does
// not commit leaves the event to a later attempt, which raises the alarm again (an alarm twice,
// never none) and tells again, which the notification's key makes the same one (told once).
// The one notification a write that does not commit can leave behind is for a death a
// concurrent replay overtook: the operator who replayed it is told it had died.
//
// The notification is not in a transaction with the DEAD mark: the mark is a single conditional
// update, as every status transition but the apply is, and the crash instrumentation the tests
// and the harness use (package inboxfault) models a killed worker by those updates. If the
// telling fails, the mark is not written: the event stays PROCESSING until its lease lapses, and
// the worker that gives up then tells again (with no account if it knows none: the key is the
// same, so a notification the failed telling did write stands as it was).
//
// account is the account the event was resolved to, "" when none is known here: its payload
// unreadable, its customer linked to no account, or its last worker dead (the account an attempt
// resolves is not kept on the event, so the worker that gives up after the lease knows only the
// one an earlier apply recorded). Such an event is told all the same, with no account: the
// endpoints registered for every account receive it, and those for chosen accounts do not.
func (w *Applier) dead(ctx context.Context, e Event, account string) error {
	w.Metrics.Count(metrics.InboxDead, 1)
	w.Log.Error("billing event is DEAD: replay it once the cause is fixed", "event", e.ID, "source", e.Source,
		"type", e.Type, "attempts", e.Attempts, "account", account, "reason", e.Reason)
	n := deadNote(e, account, e.UpdatedAtMs)
	told, err := w.Store.Tell(ctx, n)
	if err != nil {
		return fmt.Errorf("tell billing event %s is DEAD: %w", e.ID, err)
	}
	if told {
		w.Log.Info("told billing_event.dead", "event", e.ID, "account", account, "notification", n.ID())
	}
	return nil
}

func (w *Applier) done(log *slog.Logger, e Event, d Decision) {
	if d.Status == Applied {
		w.Metrics.Count(metrics.InboxApplied, 1)
		log.Info("billing event applied", "account", d.AccountID, "result", d.Result)
		return
	}
	w.Metrics.Count(metrics.InboxIgnored, 1)
	log.Info("billing event ignored", "account", d.AccountID, "reason", d.Reason)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// maxSweep bounds the events one sweep nudges; the next sweep takes the rest.
const maxSweep = 500

// SweepResult is what one sweep did.
type SweepResult struct {
	Found  int
	Nudged int
}

// Sweep nudges the worker for every event that is due: stored but never nudged (a nudge was
// lost), failed and past its backoff, or processing past its lease (its worker stopped). It
// is what keeps a stored event from being stranded.
func (w *Applier) Sweep(ctx context.Context) (SweepResult, error) {
	ids, err := w.Store.Due(ctx, w.Now().UnixMilli(), maxSweep)
	res := SweepResult{Found: len(ids)}
	if err != nil {
		return res, err
	}
	if len(ids) == 0 {
		return res, nil
	}
	if err := w.Nudger.NudgeAll(ctx, ids); err != nil {
		return res, err
	}
	res.Nudged = len(ids)
	w.Metrics.Count(metrics.InboxSweepNudged, len(ids))
	return res, nil
}

// Scope is who reads or replays events: the operator (every event) or one account (its own).
type Scope struct {
	Operator  bool
	AccountID string
}

func (s Scope) sees(e Event) bool {
	return s.Operator || (s.AccountID != "" && e.AccountID == s.AccountID)
}

// Reader serves the billing-events routes.
type Reader struct {
	Store  Store
	Nudger Nudger
	Log    *slog.Logger
	Now    func() time.Time
}

// ListInput is a request for a page of events.
type ListInput struct {
	Scope Scope
	// AccountID narrows the operator's list to one account (an account always lists its own).
	AccountID string
	Status    string
	Cursor    string
	Limit     int
}

// List returns a page of the events the scope may see, newest first.
func (r *Reader) List(ctx context.Context, in ListInput) (Page, error) {
	var problems []string
	q := ListQuery{Cursor: in.Cursor, Limit: in.Limit, AccountID: in.AccountID}
	if !in.Scope.Operator {
		if in.AccountID != "" && in.AccountID != in.Scope.AccountID {
			// Another account is not found, as its resources are; nothing says whether it exists.
			return Page{}, ErrOtherAccount
		}
		q.AccountID = in.Scope.AccountID
	} else if in.AccountID != "" && !accounts.ValidID(in.AccountID) {
		problems = append(problems, "account is not an account id")
	}
	if in.Status != "" {
		if !Status(in.Status).Valid() {
			problems = append(problems, "status must be one of "+statusList())
		}
		q.Status = Status(in.Status)
	}
	switch {
	case q.Limit == 0:
		q.Limit = DefaultPageSize
	case q.Limit < 1 || q.Limit > MaxPageSize:
		problems = append(problems, fmt.Sprintf("limit must be 1–%d", MaxPageSize))
	}
	if err := problem.Fields(problems); err != nil {
		return Page{}, err
	}
	return r.Store.List(ctx, q)
}

func statusList() string {
	names := make([]string, len(Statuses))
	for i, s := range Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Get returns an event the scope may see and its receipts (another account's event is
// ErrNotFound, exactly like one that does not exist).
func (r *Reader) Get(ctx context.Context, scope Scope, id string) (Event, []Receipt, error) {
	if !ValidID(id) {
		return Event{}, nil, ErrNotFound
	}
	e, err := r.Store.Get(ctx, id)
	if err != nil {
		return Event{}, nil, err
	}
	if !scope.sees(e) {
		return Event{}, nil, ErrNotFound
	}
	receipts, err := r.Store.Receipts(ctx, id, MaxReceiptsShown)
	if err != nil {
		return Event{}, nil, err
	}
	return e, receipts, nil
}

// Replay puts an event the scope may see back to RECEIVED with a fresh set of attempts, and
// nudges the worker. It is safe whatever the event did before: every effect is keyed or
// guarded, so a replayed payment finds its grant row and a replayed old plan change finds a
// newer one.
func (r *Reader) Replay(ctx context.Context, scope Scope, id string) (Event, error) {
	if !ValidID(id) {
		return Event{}, ErrNotFound
	}
	next, err := retry.Do(ctx, retry.Contended.WithTries(maxClaimTries), func(ctx context.Context, _ retry.Lap) (Event, error) {
		e, err := r.Store.Get(ctx, id)
		if err != nil {
			return Event{}, err
		}
		if !scope.sees(e) {
			return Event{}, ErrNotFound
		}
		now := r.Now().UnixMilli()
		next := e
		next.Status, next.Attempts, next.Replays, next.Rev = Received, 0, e.Replays+1, e.Rev+1
		next.NextAttemptAtMs, next.UpdatedAtMs, next.LeaseExpiresAtMs, next.FinishedAtMs = now, now, 0, 0
		next.Result, next.Reason = "", ""
		if err := r.Store.Transition(ctx, e.Rev, next); err != nil {
			return Event{}, rereadIfCancelled(err)
		}
		r.Log.Info("billing event replayed", "event", id, "by", scopeName(scope), "was", e.Status)
		return next, nil
	})
	if errors.Is(err, retry.ErrExhausted) {
		return Event{}, fmt.Errorf("replay %s: %w: %w", id, ErrBusy, err)
	}
	if err != nil {
		return Event{}, err
	}
	if err := r.Nudger.Nudge(ctx, id, 0); err != nil {
		r.Log.Warn("the worker could not be nudged; the sweep will find the event", "event", id, "err", err)
	}
	return next, nil
}

// ErrBusy: the event kept changing while a replay tried to move it.
var ErrBusy = problem.New(problem.Unavailable, "the billing event kept changing",
	"The billing event kept changing; nothing was replayed. Retry it.")

func scopeName(s Scope) string {
	if s.Operator {
		return "operator"
	}
	return "account " + s.AccountID
}
