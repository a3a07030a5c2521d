package holds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/holds/ratelimit"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// ErrCancelled is what the Store returns when a transaction was cancelled: one of its
// conditions did not hold, or another transaction conflicted with it. The Store does not say
// which; the service reads durable state to find out.
var ErrCancelled = errors.New("transaction cancelled")

// Allowances gives the limit of an allowance feature in a cycle (allowance.Service).
type Allowances interface {
	Limit(ctx context.Context, acct accounts.Account, feature, cycleLabel string) (plans.Limit, error)
}

// Reservation is the durable state that explains a cancelled reservation.
type Reservation struct {
	// Hold is the hold the job key already names, if any.
	Hold      *Hold
	Budget    usage.Totals
	RateCount int64
}

// Ref names a hold.
type Ref struct {
	AccountID string
	HoldID    string
}

// Store is where holds live. Table implements it.
type Store interface {
	// Reserve opens h, holding h.Amount on the budget row under h.Limit, and counts it against
	// rate, in one transaction.
	Reserve(ctx context.Context, h Hold, rate ratelimit.Limit, now time.Time) error
	ReadReservation(ctx context.Context, accountID, holdID, feature, cycleLabel string, rate ratelimit.Limit, now time.Time) (Reservation, error)
	Get(ctx context.Context, accountID, holdID string) (Hold, error)
	// ReadCharge returns the hold and, if the step key was charged before, its stored answer.
	ReadCharge(ctx context.Context, accountID, holdID, stepKey string) (Hold, *Step, error)
	Charge(ctx context.Context, h Hold, st Step) error
	Settle(ctx context.Context, h Hold, st Settlement, nowMs int64) error
	LapsedLeases(ctx context.Context, shard int, nowMs int64, pageSize int32, maxPages int) ([]Ref, error)
	// Tell writes a notification on its own, conditional on its absence (notify.Tell): told is
	// false, and nothing is written, when it was told before.
	Tell(ctx context.Context, n notify.Notification) (told bool, err error)
}

// Service runs the holds: reserve, charge, settle, and the sweep of lapsed leases.
type Service struct {
	Store    Store
	Accounts *accounts.Service
	Limits   limits.Source
	// Allowances gives an allowance feature's limit: the sum of the cycle's grant rows.
	Allowances Allowances
	Catalog    plans.Catalog
	Metrics    metrics.Recorder
	Log        *slog.Logger
	Now        func() time.Time
	// RatePerMinute is how many new holds one account may open per minute; 0 means
	// DefaultRatePerMinute.
	RatePerMinute int64
	// Sweep bounds; zero values mean the defaults in sweep.go.
	SweepPageSize int32
	SweepMaxPages int
	SweepMaxHolds int
	// SweepConcurrency is how many shards one sweep reads and settles at once; 0 means
	// sweepConcurrency. A harness that owns every interleaving sweeps one shard at a time.
	SweepConcurrency int

	// told remembers the hold.refused notifications this process has written or found written.
	told toldMemo
}

func (s *Service) rate() ratelimit.Limit {
	perMinute := s.RatePerMinute
	if perMinute <= 0 {
		perMinute = DefaultRatePerMinute
	}
	return ratelimit.Limit{Name: "holds", Max: perMinute, Window: rateWindow}
}

// Reserve opens a hold for a job, or returns the hold its key already names (created false).
// The check and the hold are one transaction, so jobs that start together can never hold more
// than the limit has room for. It returns *RefusedError when the limit has no room (and tells
// the platform, once per account, feature and cycle: hold.refused; ErrRefusalUntold when that
// cannot be written), *RateLimitedError past the account's rate, *limits.UnknownError when the
// limit cannot be known (fail closed), and *KeyReusedError when the key names a hold for another
// feature or amount.
func (s *Service) Reserve(ctx context.Context, acct accounts.Account, in ReserveInput) (h Hold, created bool, err error) {
	if err := in.Validate(s.Catalog); err != nil {
		return Hold{}, false, err
	}
	now := s.Now()
	id := ID(acct.ID, in.Key)
	log := s.Log.With("account", acct.ID, "hold", id)

	if err := acct.CanSpend(); err != nil {
		// The status rule (accounts.ErrInactive): no new hold. A repeated key still names the
		// hold it was given, which holds nothing new; its charges are refused.
		if existing, gerr := s.Store.Get(ctx, acct.ID, id); gerr == nil {
			return sameHold(existing, in)
		}
		s.Metrics.Count(metrics.HoldsRefused, 1)
		log.Info("hold refused: the account is inactive", "feature", in.Feature, "amount", in.Amount)
		return Hold{}, false, err
	}
	// An allowance feature's limit is the sum of its cycle's grant rows (read below, once the
	// cycle is fixed); every other feature's comes from the limit source.
	allowance := s.Catalog.Allowance(in.Feature)
	var limit plans.Limit
	if !allowance {
		if limit, err = s.Limits.Limit(ctx, acct, in.Feature); err != nil {
			return s.refuseNew(ctx, acct, id, in, err)
		}
	}
	// The first usage fixes the account's billing cycle; after it, the cycle of an instant can
	// no longer change under a running hold.
	if acct, err = s.Accounts.EnsureUsageStarted(ctx, acct, now); err != nil {
		return Hold{}, false, err
	}
	cycleLabel := acct.CycleAt(now).Label()
	if allowance {
		// Read strongly consistent just before the admission's own transaction. Grant rows only
		// ever add, so this limit is never more generous than the rows when the hold commits.
		if limit, err = s.Allowances.Limit(ctx, acct, in.Feature, cycleLabel); err != nil {
			log.Warn("allowance unreadable; admission refused (fail closed)", "feature", in.Feature, "err", err)
			return s.refuseNew(ctx, acct, id, in, &limits.UnknownError{CustomerID: acct.ID,
				Reason: fmt.Sprintf("The %s allowance of this cycle cannot be read; new holds are refused until it can be.", in.Feature)})
		}
	}
	nowMs := now.UnixMilli()
	h = Hold{
		ID: id, AccountID: acct.ID, Key: in.Key, Feature: in.Feature, Cycle: cycleLabel,
		Amount: in.Amount, Limit: limit, Status: Running, LeaseExpiresAtMs: nowMs + LeaseDuration.Milliseconds(),
		CreatedAtMs: nowMs, UpdatedAtMs: nowMs, Rev: 1,
	}
	rate := s.rate()
	// refusal is the hold.refused notification of a refusal for the limit, decided in the lap
	// from the budget it read.
	var refusal notify.Notification
	h, err = contended(ctx, func(ctx context.Context, _ retry.Lap) (Hold, error) {
		err := s.Store.Reserve(ctx, h, rate, now)
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, ErrCancelled) {
			return Hold{}, err
		}
		// Find out from durable state why the transaction was cancelled.
		r, err := s.Store.ReadReservation(ctx, acct.ID, id, h.Feature, h.Cycle, rate, now)
		switch {
		case errors.Is(err, ErrCancelled):
			// The snapshot read itself met a transaction in flight; back off and try again.
			return Hold{}, retry.Again(err)
		case err != nil:
			return Hold{}, err
		case r.Hold != nil:
			return Hold{}, &repeated{hold: *r.Hold}
		case r.RateCount >= rate.Max:
			s.Metrics.Count(metrics.HoldsRateLimited, 1)
			wait := ratelimit.WindowAt(now, rate.Window).RetryAfter(now)
			return Hold{}, &RateLimitedError{PerMinute: rate.Max, RetryAfter: wait}
		}
		if d := admit(r.Budget, limit, h.Amount); !d.Admitted {
			s.Metrics.Count(metrics.HoldsRefused, 1)
			log.Info("hold refused", "feature", h.Feature, "amount", h.Amount, "remaining", *d.Remaining)
			refusal = refusedNote(h, r.Budget.Committed, nowMs)
			return Hold{}, &RefusedError{Needed: h.Amount, Remaining: *d.Remaining, Limit: limit.Max}
		}
		// Nothing durable explains it: a conflicting transaction on the budget row.
		return Hold{}, retry.Again(errConflict)
	})
	var again *repeated
	var refused *RefusedError
	switch {
	case err == nil:
		s.Metrics.Count(metrics.HoldsAdmitted, 1)
		log.Info("hold admitted", "feature", h.Feature, "amount", h.Amount, "cycle", h.Cycle)
		return h, true, nil
	case errors.As(err, &again):
		return sameHold(again.hold, in)
	case errors.Is(err, ErrBusy):
		log.Warn("reservation still contended after bounded retries", "tries", retry.Contended.Tries)
		return Hold{}, false, ErrBusy
	case errors.As(err, &refused):
		return Hold{}, false, s.tellRefused(ctx, refusal, err, log)
	}
	return Hold{}, false, err
}

// refusedNote is the hold.refused notification of a hold the limit refused: the limit it was
// refused under, the budget's committed figure (used + held) the refusal read, and what the hold
// asked for.
func refusedNote(h Hold, committed, nowMs int64) notify.Notification {
	return notify.Notification{
		Kind: notify.HoldRefused, Account: h.AccountID, Feature: h.Feature, Cycle: h.Cycle,
		Limit: h.Limit.Max, Used: committed, AtMs: nowMs, Detail: notify.Detail{Requested: h.Amount},
	}
}

// tellRefused tells the platform that the limit refused a hold, once per account, feature and
// cycle (hold.refused), and then answers the refusal.
//
// A refusal changes nothing durable, so no transaction decides its notification: it is written
// on its own, after the decision and before the answer, conditional on its absence
// (notify.Tell). When that write fails the answer is ErrRefusalUntold, a 503, and not the 402:
// the 402 would be final (an Idempotency-Key keeps it, and the client stops), and the
// notification would be lost, since nothing else decides it again. A 5xx releases the
// Idempotency-Key and asks the client to retry; the retry decides the refusal again and tells
// it then, and the notification's key keeps it one however many times it is told.
func (s *Service) tellRefused(ctx context.Context, n notify.Notification, refusal error, log *slog.Logger) error {
	id := n.ID()
	if s.told.has(id) {
		return refusal // told before, by this process: the write would find it there
	}
	told, err := s.Store.Tell(ctx, n)
	if err != nil {
		log.Error("hold refused, and the refusal could not be told; answered 503 for a retry", "feature", n.Feature, "err", err)
		return fmt.Errorf("%w: %w", ErrRefusalUntold, err)
	}
	s.told.add(id)
	if told {
		log.Info("hold.refused told", "feature", n.Feature, "cycle", n.Cycle, "notification", id)
	}
	return refusal
}

// maxToldMemo bounds the notifications one process remembers as told; past it the memory starts
// again, empty.
const maxToldMemo = 10_000

// toldMemo is the notifications a process has written or found written, by id: an account that
// keeps asking past its limit costs one conditional write per process and cycle, not one per
// refusal. It is only a cache of what the notifications table holds: forgetting (a new
// container, a memo that filled up) costs one write that finds the notification there. The zero
// value is ready to use.
type toldMemo struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (m *toldMemo) has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ids[id]
}

func (m *toldMemo) add(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ids == nil || len(m.ids) >= maxToldMemo {
		m.ids = map[string]bool{}
	}
	m.ids[id] = true
}

// refuseNew refuses a new admission with err (its limit cannot be known, the account is
// inactive); a job that already holds capacity keeps its hold, whatever holds now.
func (s *Service) refuseNew(ctx context.Context, acct accounts.Account, id string, in ReserveInput, err error) (Hold, bool, error) {
	if existing, gerr := s.Store.Get(ctx, acct.ID, id); gerr == nil {
		return sameHold(existing, in)
	}
	if limits.IsUnknown(err) {
		s.Log.Warn("limit unknown; admission refused (fail closed)", "account", acct.ID, "hold", id, "feature", in.Feature, "err", err)
	}
	return Hold{}, false, err
}

// errConflict is a cancelled write that durable state does not explain: it met a conflicting
// transaction on a shared row (the budget row is shared by every hold of the feature).
var errConflict = errors.New("cancelled by a conflicting transaction")

// repeated ends a reservation whose job key already names a hold: the hold it names is the
// answer, if the request is the same one.
type repeated struct{ hold Hold }

func (r *repeated) Error() string { return "the key already names hold " + r.hold.ID }

// sameHold answers a repeated job key with the hold it names, if the request is the same one.
func sameHold(h Hold, in ReserveInput) (Hold, bool, error) {
	if h.Feature != in.Feature || h.Amount != in.Amount {
		return Hold{}, false, &KeyReusedError{Detail: fmt.Sprintf(
			"The key %q already names a hold of %d %s; a repeated key must repeat the request.", in.Key, h.Amount, h.Feature)}
	}
	return h, false, nil
}

// Get returns one of the account's holds.
func (s *Service) Get(ctx context.Context, acct accounts.Account, holdID string) (Hold, error) {
	if !ValidID(holdID) {
		return Hold{}, ErrNotFound
	}
	return s.Store.Get(ctx, acct.ID, holdID)
}

// Charge charges one step of a job against its hold and renews the hold's lease. The step is
// cut to what the hold has left (Capped: the job must stop). A step key that was charged before
// returns its stored answer and charges nothing again. A hold that is no longer RUNNING takes no
// charge (*NotRunningError): its worker is late, and is ignored.
func (s *Service) Charge(ctx context.Context, acct accounts.Account, in ChargeInput) (Step, error) {
	if !ValidID(in.HoldID) {
		return Step{}, ErrNotFound
	}
	if err := in.Validate(); err != nil {
		return Step{}, err
	}
	var last lastWrite
	return contended(ctx, func(ctx context.Context, lap retry.Lap) (Step, error) {
		h, prior, err := s.Store.ReadCharge(ctx, acct.ID, in.HoldID, in.Key)
		if errors.Is(err, ErrCancelled) {
			// The snapshot read met a transaction in flight.
			return Step{}, retry.Again(err)
		}
		if err != nil {
			return Step{}, err
		}
		if prior != nil {
			if prior.Requested != in.Amount {
				return Step{}, &KeyReusedError{Detail: fmt.Sprintf(
					"The step key %q already charged a step of %d; a repeated key must repeat the request.", in.Key, prior.Requested)}
			}
			return *prior, nil
		}
		if h.Status != Running {
			return Step{}, &NotRunningError{HoldID: h.ID, Status: h.Status}
		}
		if err := acct.CanSpend(); err != nil {
			// The status rule: a new step records new usage. (A repeated step key was answered
			// above: it records nothing new.) The job must stop and settle.
			return Step{}, err
		}
		if err := last.before(ctx, lap, h); err != nil {
			return Step{}, err
		}
		nowMs := s.Now().UnixMilli()
		d := chargeStep(h.Amount, h.Used, in.Amount)
		st := Step{
			HoldID: h.ID, Key: in.Key, Requested: in.Amount, Charged: d.Charged, Capped: d.Capped,
			Used: h.Used + d.Charged, Amount: h.Amount, Status: Running,
			LeaseExpiresAtMs: nowMs + LeaseDuration.Milliseconds(), CreatedAtMs: nowMs,
		}
		err = s.Store.Charge(ctx, h, st)
		if err == nil {
			if st.Capped {
				s.Metrics.Count(metrics.HoldsCapped, 1)
				s.Log.Info("charge capped at the hold; the job must stop", "account", acct.ID, "hold", h.ID,
					"requested", st.Requested, "charged", st.Charged, "amount", h.Amount)
			}
			return st, nil
		}
		// Cancelled: the hold moved (another step, a settlement), an earlier attempt stored this
		// step, or a transaction conflicted. The next read says which.
		return Step{}, failedWrite(err)
	})
}

// Settle ends a job: it charges min(used, held) to the budget and releases the rest, in one
// transaction with marking the hold SETTLED. used defaults to what the charges recorded. A hold
// that is already final returns its stored settlement, and nothing moves again — whether its
// worker settled it before or the sweeper expired it.
func (s *Service) Settle(ctx context.Context, acct accounts.Account, in SettleInput) (Settlement, error) {
	if !ValidID(in.HoldID) {
		return Settlement{}, ErrNotFound
	}
	if err := in.Validate(); err != nil {
		return Settlement{}, err
	}
	st, err := s.settle(ctx, acct.ID, in.HoldID, Settled, in.Used, nil, acct.CanSpend())
	if err == nil && st.settledNow {
		s.Metrics.Count(metrics.HoldsSettled, 1)
		s.Log.Info("hold settled", "account", acct.ID, "hold", in.HoldID, "charged", st.Charged, "released", st.Released)
	}
	return st.Settlement, err
}

// settled is a settlement and whether this call made it.
type settled struct {
	Settlement
	settledNow bool
}

// settle runs the settlement loop shared by Settle and the sweeper. only, when set, decides
// from the freshly read hold whether to settle it at all (the sweeper settles only lapsed leases);
// a hold it declines is returned unsettled with settledNow false. spendErr is the account's
// status rule (accounts.Account.CanSpend): when set, a settlement at more usage than the charges
// recorded is refused with it.
func (s *Service) settle(ctx context.Context, accountID, holdID string, final Status, used *int64, only func(Hold, int64) bool, spendErr error) (settled, error) {
	var last lastWrite
	return contended(ctx, func(ctx context.Context, lap retry.Lap) (settled, error) {
		h, err := s.Store.Get(ctx, accountID, holdID)
		if err != nil {
			return settled{}, err
		}
		if h.Status.Final() {
			return settled{Settlement: h.Settlement()}, nil
		}
		if err := last.before(ctx, lap, h); err != nil {
			return settled{}, err
		}
		nowMs := s.Now().UnixMilli()
		if only != nil && !only(h, nowMs) {
			return settled{Settlement: Settlement{HoldID: h.ID, Status: h.Status, Used: h.Used}}, nil
		}
		finalUsed := h.Used
		if used != nil {
			finalUsed = *used
		}
		if spendErr != nil && finalUsed > h.Used {
			return settled{}, spendErr
		}
		d := settle(h.Amount, finalUsed)
		st := Settlement{HoldID: h.ID, Status: final, Used: finalUsed, Charged: d.Charged, Released: d.Released}
		err = s.Store.Settle(ctx, h, st, nowMs)
		if err == nil {
			return settled{Settlement: st, settledNow: true}, nil
		}
		// Cancelled: settled meanwhile (by an earlier attempt, the worker or the sweeper),
		// charged, or conflicted. The next read says which.
		return settled{}, failedWrite(err)
	})
}

// contended runs one of the holds' loops under the retry policy: each lap reads the hold's
// durable state, decides and writes. A loop still contended after its bound is ErrBusy: nothing
// moved, and the client retries with the same key.
func contended[T any](ctx context.Context, lap func(ctx context.Context, l retry.Lap) (T, error)) (T, error) {
	v, err := retry.Do(ctx, retry.Contended, lap)
	if errors.Is(err, retry.ErrExhausted) {
		var zero T
		return zero, ErrBusy
	}
	return v, err
}

// failedWrite is a lap's verdict on a write of the hold that failed: a cancelled write asks for
// another lap at once, whose read says why; any other error ends the loop.
func failedWrite(err error) error {
	if errors.Is(err, ErrCancelled) {
		return retry.Reread(err)
	}
	return err
}

// lastWrite remembers the revision of the hold the previous lap wrote on.
type lastWrite struct {
	rev  int64
	seen bool
}

// before is called by a lap once it has read the hold and before it writes: when the hold is at
// the revision the previous lap's cancelled write was decided on, nothing moved and that write met
// a conflicting transaction (the budget row is shared by every hold of the feature), so the lap
// backs off before trying again on the same state.
func (w *lastWrite) before(ctx context.Context, lap retry.Lap, h Hold) error {
	if w.seen && h.Rev == w.rev {
		if err := lap.Wait(ctx); err != nil {
			return err
		}
	}
	w.rev, w.seen = h.Rev, true
	return nil
}
