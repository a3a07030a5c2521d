package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/retry"
	"github.com/ferrymeter/ferry/internal/platform/stripe"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/report"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

// ConfirmedCause is the cause of the evidence row that records a confirmed repair.
const ConfirmedCause = "Repaired and confirmed: the read-back equals the ledger."

// errListed is a repair that could not be made and went to the review list instead.
var errListed = errors.New("listed for review")

// check compares one provider's meter with the ledger, repairs an open cycle, and stores the
// evidence. res carries the cycle as measured (its Ledger and Corrections are set).
func (r *Reconciler) check(ctx context.Context, acct accounts.Account, k report.Key, c cycle.Cycle, provider string,
	st report.State, res Result, pending bool, log *slog.Logger) (Check, error) {
	now := r.Now()
	def := r.Catalog.Definition(k.Feature)
	ev := Evidence{Ledger: *res.Ledger, Closed: c.Closed(now), Pending: pending}
	switch provider {
	case report.ProviderKinde:
		ev.Sent = st.KindeSent
		ev.Meter, ev.Unread = r.readKinde(ctx, acct, def, ev.Closed)
	case report.ProviderStripe:
		ev.Sent = st.StripeSent
		dead, inFlight, err := r.settleOutbox(ctx, k)
		if err != nil {
			return Check{Provider: provider, Ledger: ev.Ledger, Error: err.Error()}, err
		}
		ev.Failed = dead
		if inFlight != "" {
			ev.Unread = inFlight
		} else {
			ev.Meter, ev.Unread = r.readStripe(ctx, acct, def, c)
		}
	}
	d := Decide(ev)
	ch := Check{Provider: provider, Ledger: ev.Ledger, Sent: ev.Sent, Meter: ev.Meter, Verdict: d.Verdict, Cause: d.Cause}
	rec := Record{
		Account: k.Account, Cycle: k.Cycle, Feature: k.Feature, Provider: provider, Ledger: ev.Ledger, Sent: ev.Sent,
		Meter: ev.Meter, Verdict: d.Verdict, Cause: d.Cause, Rebuilt: res.Rebuilt, Corrections: *res.Corrections, AtMs: now.UnixMilli(),
	}
	r.Metrics.Count(metrics.ReconcileChecked, 1, metrics.Dimension{Name: "Verdict", Value: string(d.Verdict)})
	log = log.With("provider", provider, "verdict", d.Verdict, "ledger", ev.Ledger, "sent", ev.Sent)

	var runErr error
	switch d.Verdict {
	case Unreadable:
		r.Metrics.Count(metrics.ReconcileUnreadable, 1, metrics.Dimension{Name: "Provider", Value: provider})
		log.Warn("provider meter unreadable", "why", ev.Unread)
	case ClosedCycleDrift:
		r.Metrics.Count(metrics.ReconcileDrift, 1, metrics.Dimension{Name: "Provider", Value: provider})
		if _, err := r.Review.Add(ctx, review.Entry{
			Account: k.Account, Feature: k.Feature, Cycle: k.Cycle, Provider: provider, Reason: review.ClosedCycleDrift,
			Ledger: ev.Ledger, Sent: ev.Sent, Meter: ev.Meter, Detail: d.Cause, AtMs: now.UnixMilli(),
		}); err != nil {
			return ch, err
		}
		log.Warn("closed cycle drifted; listed for review", "meter", *ev.Meter)
	case OverBilled, UnderBilled:
		if d.Review {
			// Nothing Ferry may send would repair it (a ledger below zero): a person settles it,
			// and the run says the cycle is not proven.
			r.Metrics.Count(metrics.ReconcileUnconfirmed, 1, metrics.Dimension{Name: "Provider", Value: provider})
			if _, err := r.Review.Add(ctx, review.Entry{
				Account: k.Account, Feature: k.Feature, Cycle: k.Cycle, Provider: provider, Reason: review.NegativeLedger,
				Ledger: ev.Ledger, Sent: ev.Sent, Meter: ev.Meter, Detail: d.Cause, AtMs: now.UnixMilli(),
			}); err != nil {
				return ch, err
			}
			ch.Error = fmt.Sprintf("the ledger (%d) is below zero: nothing was sent to %s, and the cycle is listed for review", ev.Ledger, provider)
			runErr = fmt.Errorf("%w: %s %s: %s", ErrUnconfirmed, k, provider, ch.Error)
			log.Error("ledger below zero; listed for review, nothing sent")
			break
		}
		ch.Repair, rec.Repair = d.Repair, d.Repair
		readBack, err := r.repair(ctx, acct, k, c, provider, def, ev, st, log)
		ch.ReadBack, rec.ReadBack = readBack, readBack
		switch {
		case errors.Is(err, errListed):
			// The repair could not be made: the meter stays above the ledger, so nothing is
			// confirmed, and the run says so.
			ch.Error = "the meter is above the ledger and Stripe no longer allows cancelling the events that would bring it down: listed for review"
			runErr = fmt.Errorf("%w: %s %s: %s", ErrUnconfirmed, k, provider, ch.Error)
			r.Metrics.Count(metrics.ReconcileUnconfirmed, 1, metrics.Dimension{Name: "Provider", Value: provider})
		case err != nil:
			ch.Error = err.Error()
			runErr = err
			r.Metrics.Count(metrics.ReconcileUnconfirmed, 1, metrics.Dimension{Name: "Provider", Value: provider})
		case readBack == nil || *readBack != ev.Ledger:
			got := "nothing"
			if readBack != nil {
				got = fmt.Sprint(*readBack)
			}
			ch.Error = fmt.Sprintf("repaired, but the read-back (%s) does not equal the ledger (%d)", got, ev.Ledger)
			runErr = fmt.Errorf("%w: %s %s", ErrUnconfirmed, k, ch.Error)
			r.Metrics.Count(metrics.ReconcileUnconfirmed, 1, metrics.Dimension{Name: "Provider", Value: provider})
		default:
			ch.Confirmed, rec.Confirmed = true, true
			r.Metrics.Count(metrics.ReconcileRepaired, 1, metrics.Dimension{Name: "Provider", Value: provider})
		}
		if ch.Error != "" {
			log.Error("repair not confirmed", "err", ch.Error)
		} else {
			log.Info("repaired and confirmed", "meter", *ev.Meter, "readBack", *readBack)
		}
	}
	// Evidence whose verdict is not match tells the platform, with the record (reconcile.mismatch).
	added, err := r.Evidence.Add(ctx, rec, mismatchNotes(rec)...)
	if err != nil {
		return ch, err
	}
	ch.Evidence, ch.NewEvidence = rec.Key(), added
	if ch.Confirmed {
		// The repaired state is itself proven: record it, so the next run that finds the same
		// numbers adds nothing.
		confirmed := rec
		confirmed.Sent, confirmed.Meter, confirmed.Verdict, confirmed.Cause = ev.Ledger, ch.ReadBack, Match, ConfirmedCause
		confirmed.Repair, confirmed.ReadBack = nil, nil
		if _, err := r.Evidence.Add(ctx, confirmed); err != nil {
			return ch, err
		}
	}
	return ch, runErr
}

// readKinde reads Kinde's total for the account's current cycle (the only one Kinde reads back).
func (r *Reconciler) readKinde(ctx context.Context, acct accounts.Account, def plans.Definition, closed bool) (*int64, string) {
	if closed {
		return nil, "Kinde reads back only the current cycle"
	}
	total, err := r.Kinde.ReadTotal(ctx, acct.KindeAgreementID, def.Kinde.FeatureCode)
	if err != nil {
		return nil, err.Error()
	}
	return &total, ""
}

// readStripe reads the customer's aggregated usage over the cycle's window.
func (r *Reconciler) readStripe(ctx context.Context, acct accounts.Account, def plans.Definition, c cycle.Cycle) (*int64, string) {
	total, err := r.Stripe.Summary(ctx, def.Stripe.MeterID, acct.StripeCustomerID, c.Start, c.End)
	if err != nil {
		return nil, err.Error()
	}
	return &total, ""
}

// settleOutbox sends the cycle's due outbox rows before the meter is read, so that a delta still
// on its way is not taken for drift. It returns how many rows are DEAD and, if a row is still on
// its way (claimed elsewhere, backing off), says which.
func (r *Reconciler) settleOutbox(ctx context.Context, k report.Key) (dead int, inFlight string, err error) {
	rows, err := r.Outbox.Cycle(ctx, k.Account, k.Feature, k.Cycle)
	if err != nil {
		return 0, "", err
	}
	for _, row := range rows {
		if row.Status == outbox.Dead {
			dead++
		}
		if !row.Status.Due() {
			continue
		}
		if _, err := r.Drainer.Drain(ctx, outbox.RefOf(row)); err != nil {
			return 0, "", err
		}
		now, err := r.Outbox.Get(ctx, outbox.RefOf(row))
		if err != nil {
			return 0, "", err
		}
		switch now.Status {
		case outbox.Dead:
			dead++
		case outbox.Pending, outbox.Sending:
			inFlight = fmt.Sprintf("the report %s to Stripe is still on its way (%s, attempt %d)", now.Identifier(), now.Status, now.Attempts)
		}
	}
	return dead, inFlight, nil
}

// repair brings an open cycle's meter to the ledger and reads it back.
func (r *Reconciler) repair(ctx context.Context, acct accounts.Account, k report.Key, c cycle.Cycle, provider string,
	def plans.Definition, ev Evidence, st report.State, log *slog.Logger) (*int64, error) {
	switch provider {
	case report.ProviderKinde:
		if err := r.Kinde.RecordAbsolute(ctx, acct.KindeAgreementID, def.Kinde.FeatureCode, ev.Ledger); err != nil {
			return nil, fmt.Errorf("write %d to Kinde: %w", ev.Ledger, err)
		}
		if err := r.State.SetKindeSent(ctx, k, ev.Ledger, r.Now().UnixMilli()); err != nil {
			return nil, err
		}
		meter, unread := r.readKinde(ctx, acct, def, false)
		if meter == nil {
			return nil, fmt.Errorf("read Kinde back after the repair: %s", unread)
		}
		return meter, nil
	case report.ProviderStripe:
		if err := r.repairStripe(ctx, acct, k, c, def, ev, st, log); err != nil {
			return nil, err
		}
		return r.confirmStripe(ctx, acct, def, c, ev.Ledger)
	}
	return nil, fmt.Errorf("unknown provider %q", provider)
}

// repairStripe writes what brings Stripe's meter to the ledger: for under-billing an outbox row
// for the shortfall, keyed by the evidence; for over-billing, cancellations of Ferry's own events
// that Stripe still allows (newest first), then a row for any shortfall they leave. lastSent
// becomes the ledger in the same transaction as the row.
func (r *Reconciler) repairStripe(ctx context.Context, acct accounts.Account, k report.Key, c cycle.Cycle,
	def plans.Definition, ev Evidence, st report.State, log *slog.Logger) error {
	if r.Catalog.StripeAggregation(k.Feature) == plans.StripeLast {
		return r.repairStripeLast(ctx, acct, k, c, def, ev, st, log)
	}
	meter := *ev.Meter
	nowMs := r.Now().UnixMilli()
	cancelled := int64(0)
	if meter > ev.Ledger {
		picked, err := r.cancellable(ctx, k, meter-ev.Ledger, nowMs)
		if err != nil {
			return err
		}
		if picked == nil {
			_, err := r.Review.Add(ctx, review.Entry{
				Account: k.Account, Feature: k.Feature, Cycle: k.Cycle, Provider: report.ProviderStripe,
				Reason: review.OverBilledUncancellable, Ledger: ev.Ledger, Sent: ev.Sent, Meter: ev.Meter, AtMs: nowMs,
				Detail: fmt.Sprintf("Stripe's meter is %d above the ledger; the events that would bring it down are past Stripe's 24-hour cancellation window.", meter-ev.Ledger),
			})
			if err != nil {
				return err
			}
			return errListed
		}
		for _, row := range picked {
			if err := r.Stripe.Cancel(ctx, row.EventName, row.Identifier()); err != nil {
				return fmt.Errorf("cancel %s: %w", row.Identifier(), err)
			}
			next := row
			next.Status, next.CancelledAtMs, next.UpdatedAtMs = outbox.Cancelled, nowMs, nowMs
			if _, err := r.Outbox.Rewrite(ctx, next, row.Rev); err != nil {
				return fmt.Errorf("record the cancellation of %s: %w", row.Identifier(), err)
			}
			cancelled += row.Delta
			log.Info("cancelled a meter event", "identifier", row.Identifier(), "value", row.Delta)
		}
	}
	shortfall := ev.Ledger - (meter - cancelled)
	sentItem := r.State.StripeSentItem(k, st.StripeSent, ev.Ledger, nowMs)
	if cancelled > 0 || ev.Ledger < st.StripeSent {
		// lastSent goes down: a new epoch of report keys, so no later total reuses a key.
		sentItem = r.State.StripeCancelledItem(k, st.StripeSent, ev.Ledger, nowMs)
	}
	if shortfall == 0 {
		return r.State.Commit(ctx, sentItem)
	}
	row := outbox.Row{
		Account: k.Account, Feature: k.Feature, Cycle: k.Cycle,
		Key:  outbox.RepairKey(fmt.Sprintf("%d-%d-%d", ev.Ledger, ev.Sent, meter)),
		Kind: outbox.KindRepair, Total: ev.Ledger, Delta: shortfall, EventName: def.Stripe.MeterEventName,
		MeterID: def.Stripe.MeterID, Customer: acct.StripeCustomerID, TimestampMs: nowMs, CycleEndMs: c.End.UnixMilli(),
		CreatedAtMs: nowMs, UpdatedAtMs: nowMs,
	}
	item, err := r.Outbox.InsertItem(row)
	if err != nil {
		return err
	}
	if err := r.State.Commit(ctx, item, sentItem); err != nil {
		if !errors.Is(err, report.ErrSentChanged) {
			return err
		}
		// A run on these same numbers wrote the row before (its send had not landed): send it.
		if _, gerr := r.Outbox.Get(ctx, outbox.RefOf(row)); gerr != nil {
			return fmt.Errorf("write the repair row %s: lastSent moved under the reconciler", row.Identifier())
		}
	}
	out, err := r.Drainer.Drain(ctx, outbox.RefOf(row))
	if err != nil {
		return err
	}
	log.Info("repair row sent to Stripe", "identifier", row.Identifier(), "value", shortfall, "outcome", out)
	return nil
}

// repairStripeLast brings a Stripe meter that takes its last event's value (a MAX, UNIQUE_COUNT
// or LATEST meter's) to the ledger with one absolute meter event, over- and under-billing alike:
// dated after every event Ferry sent it, it is the value Stripe reads. Its key carries the
// report state's count of Stripe writes, so a repair to a figure repaired to before is a new
// event, not one Stripe deduplicates.
func (r *Reconciler) repairStripeLast(ctx context.Context, acct accounts.Account, k report.Key, c cycle.Cycle,
	def plans.Definition, ev Evidence, st report.State, log *slog.Logger) error {
	nowMs := r.Now().UnixMilli()
	row := outbox.Row{
		Account: k.Account, Feature: k.Feature, Cycle: k.Cycle,
		Key:  outbox.RepairKey(fmt.Sprintf("%d-%d-%d-s%d", ev.Ledger, ev.Sent, *ev.Meter, st.StripeSeq+1)),
		Kind: outbox.KindRepair, Absolute: true, Total: ev.Ledger, Delta: ev.Ledger - *ev.Meter,
		EventName: def.Stripe.MeterEventName, MeterID: def.Stripe.MeterID, Customer: acct.StripeCustomerID,
		TimestampMs: report.LastTimestampMs(nowMs, st.StripeSentAtMs, c), CycleEndMs: c.End.UnixMilli(),
		CreatedAtMs: nowMs, UpdatedAtMs: nowMs,
	}
	item, err := r.Outbox.InsertItem(row)
	if err != nil {
		return err
	}
	if err := r.State.Commit(ctx, item, r.State.StripeSentItem(k, st.StripeSent, ev.Ledger, row.TimestampMs)); err != nil {
		if errors.Is(err, report.ErrSentChanged) {
			return fmt.Errorf("write the repair row %s: lastSent moved under the reconciler", row.Identifier())
		}
		return err
	}
	out, err := r.Drainer.Drain(ctx, outbox.RefOf(row))
	if err != nil {
		return err
	}
	log.Info("absolute repair sent to Stripe", "identifier", row.Identifier(), "value", ev.Ledger, "outcome", out)
	return nil
}

// cancellable picks Ferry's own sent events of the cycle, newest first, that Stripe still lets it
// cancel, until they cover excess; nil when they cannot.
func (r *Reconciler) cancellable(ctx context.Context, k report.Key, excess, nowMs int64) ([]outbox.Row, error) {
	rows, err := r.Outbox.Cycle(ctx, k.Account, k.Feature, k.Cycle)
	if err != nil {
		return nil, err
	}
	oldest := nowMs - (stripeCancelWindow - cancelSafety).Milliseconds()
	var sent []outbox.Row
	for _, row := range rows {
		if row.Status == outbox.Sent && row.SentAtMs > oldest && row.Delta > 0 && !row.Absolute {
			sent = append(sent, row)
		}
	}
	sort.Slice(sent, func(i, j int) bool { return sent[i].SentAtMs > sent[j].SentAtMs })
	var picked []outbox.Row
	covered := int64(0)
	for _, row := range sent {
		if covered >= excess {
			break
		}
		picked = append(picked, row)
		covered += row.Delta
	}
	if covered < excess {
		return nil, nil
	}
	return picked, nil
}

// stripeCancelWindow is how long after Stripe received an event it can be cancelled.
const stripeCancelWindow = stripe.CancelWindow

// confirmStripe reads Stripe's meter back until it equals want or the bounded tries run out
// (its summaries are eventually consistent), and returns the last read.
func (r *Reconciler) confirmStripe(ctx context.Context, acct accounts.Account, def plans.Definition, c cycle.Cycle, want int64) (*int64, error) {
	tries, wait := r.ConfirmTries, r.ConfirmWait
	if tries <= 0 {
		tries = DefaultConfirmTries
	}
	if wait <= 0 {
		wait = DefaultConfirmWait
	}
	var last *int64
	var lastErr string
	for try := range tries {
		meter, unread := r.readStripe(ctx, acct, def, c)
		if meter != nil {
			last = meter
			if *meter == want {
				return meter, nil
			}
		} else {
			lastErr = unread
		}
		if try < tries-1 {
			if err := retry.Sleep(ctx, wait); err != nil {
				return last, err
			}
		}
	}
	if last == nil {
		return nil, fmt.Errorf("read Stripe back after the repair: %s", lastErr)
	}
	return last, nil
}
