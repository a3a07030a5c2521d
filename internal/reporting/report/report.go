// Package report tells the billing providers what Ferry's ledger says. Every minute the reporter
// takes up to 100 (account, feature, cycle) keys whose usage rows are marked (see
// usage/marks.go), 10 at a time, and for each one, under a lease:
//
//  1. reads the ledger total (the usage partition, every row with its revision);
//  2. reports it: Kinde gets the absolute total (safe to repeat), Stripe gets a delta through
//     the transactional outbox — an outbox row for total − lastSent, keyed by
//     (account, feature, cycle, total), written in one transaction with lastSent;
//  3. takes the mark off each row that no write has touched since step 1.
//
// A failure (a 429, which also pauses Kinde until its RateLimit-Reset; a 5xx; a timeout) leaves
// the marks, so the next run reports the then-current total: the cycle is re-marked by not being
// unmarked, and a crash anywhere leaves the marks too. A write after step 1 keeps its row's mark
// (its revision changed), so no write is ever covered by neither a reported total nor a mark.
// A closed cycle is never written: if its ledger moved after its last report, it goes to the
// review list instead.
package report

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/fanout"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

// Limits of one run, with their units.
const (
	// MaxKeysPerRun bounds the cycles one run reports.
	MaxKeysPerRun = 100
	// reportConcurrency bounds the cycles reported at once.
	reportConcurrency = 10
	// LeaseFor is how long a run holds a cycle: longer than reporting it takes (two provider
	// calls, each bounded by its client's 10 s timeout, and a few DynamoDB writes).
	LeaseFor = 45 * time.Second
	// LeaseMargin is the lease that must be left to start a provider call: a run paused past it
	// lets the lease lapse rather than send a total alongside the run that takes it over.
	LeaseMargin = 15 * time.Second
)

// Providers, as the reporter and the evidence name them.
const (
	ProviderKinde  = "kinde"
	ProviderStripe = "stripe"
)

// Accounts reads accounts (accounts.Service implements it).
type Accounts interface {
	Get(ctx context.Context, id string) (accounts.Account, error)
}

// KindeMeter sets an agreement's running total (the kinde client implements it).
type KindeMeter interface {
	RecordAbsolute(ctx context.Context, agreementID, featureCode string, total int64) error
}

// Reviewer lists what a person must settle (review.Table implements it).
type Reviewer interface {
	Add(ctx context.Context, e review.Entry) (bool, error)
}

// Requester asks the reconciler to look at a cycle soon (a total below what Stripe was sent,
// which only a cancellation can bring down).
type Requester interface {
	Request(ctx context.Context, account, cycle, reason string) error
}

// Point is a place in one key's report, for Hook.
type Point string

// Points a Hook sees.
const (
	// AfterRead: the lease is held and the total read; nothing is sent.
	AfterRead Point = "after read"
	// AfterKinde: Kinde took the total; the marks are still on.
	AfterKinde Point = "after kinde"
	// AfterOutbox: the outbox row and lastSent are committed; the marks are still on.
	AfterOutbox Point = "after outbox"
)

// Reporter reports marked cycles to the providers.
type Reporter struct {
	Usage    usage.Table
	Marks    *MarkIndex
	State    *StateStore
	Outbox   *outbox.Table
	Accounts Accounts
	Catalog  plans.Catalog
	// Kinde is the Kinde client; nil means usage is not reported to Kinde.
	Kinde KindeMeter
	// Stripe says whether usage is reported to Stripe (through the outbox, which the drainer
	// sends).
	Stripe    bool
	Review    Reviewer
	Reconcile Requester
	Metrics   metrics.Recorder
	Log       *slog.Logger
	Now       func() time.Time
	// Owner names this reporter in its leases; empty picks a random name.
	Owner string
	// Concurrency bounds the cycles one run reports at once; 0 means reportConcurrency. The
	// fault harness, which owns every interleaving, runs one at a time.
	Concurrency int
	// Hook runs at each Point; an error stops the key there, as if the process died. Tests use
	// it to kill the reporter in each crash window; production leaves it nil.
	Hook func(ctx context.Context, p Point, k Key) error

	holder outbox.LeaseOwner
}

// Outcome of one key's report.
type Outcome string

// Outcomes.
const (
	Reported   Outcome = "reported"
	Unchanged  Outcome = "unchanged"
	Unreported Outcome = "unreported" // no provider meters this feature for this account
	Reviewed   Outcome = "review"
	Leased     Outcome = "leased"
	Stale      Outcome = "stale" // the index still listed a mark that was already taken off
	Retrying   Outcome = "retrying"
)

// Result counts what one run did.
type Result struct {
	Found      int  `json:"found"`
	Reported   int  `json:"reported"`
	Unchanged  int  `json:"unchanged"`
	Unreported int  `json:"unreported"`
	Review     int  `json:"review"`
	Leased     int  `json:"leased"`
	Retrying   int  `json:"retrying"`
	Failed     int  `json:"failed"`
	Truncated  bool `json:"truncated"`
}

// pause is the run's view of the providers' rate-limit pauses.
type pause struct {
	mu         sync.Mutex
	kindeUntil int64
}

func (p *pause) until() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kindeUntil
}

func (p *pause) extend(untilMs int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kindeUntil = max(p.kindeUntil, untilMs)
}

// Run reports up to MaxKeysPerRun marked cycles. A provider that fails leaves its cycles marked
// for the next run and is counted, not returned; an error means Ferry's own state could not be
// read or written.
func (r *Reporter) Run(ctx context.Context) (Result, error) {
	now := r.Now()
	first := int(now.Unix()/60) % resources.UsageReportBuckets
	keys, truncated, err := r.Marks.Dirty(ctx, MaxKeysPerRun, first)
	res := Result{Found: len(keys), Truncated: truncated}
	if err != nil {
		return res, err
	}
	p := &pause{}
	if r.Kinde != nil && len(keys) > 0 {
		until, err := r.State.NotBefore(ctx, ProviderKinde)
		if err != nil {
			return res, err
		}
		p.extend(until)
	}
	var errs []error
	report := func(k Key) (Outcome, error) { return r.Report(ctx, k, p) }
	concurrency := reportConcurrency
	if r.Concurrency > 0 {
		concurrency = r.Concurrency
	}
	fanout.Each(keys, concurrency, report, func(k Key, out Outcome, err error) {
		switch {
		case err != nil:
			res.Failed++
			errs = append(errs, err)
			r.Log.Error("report failed; the cycle stays marked", "account", k.Account, "feature", k.Feature, "cycle", k.Cycle, "err", err)
		case out == Reported:
			res.Reported++
		case out == Unchanged, out == Stale:
			res.Unchanged++
		case out == Unreported:
			res.Unreported++
		case out == Reviewed:
			res.Review++
		case out == Leased:
			res.Leased++
		case out == Retrying:
			res.Retrying++
		}
	})
	return res, errors.Join(errs...)
}

// Report reports one key (see the package comment). p carries the run's provider pauses; nil
// reads Kinde's from the state store.
func (r *Reporter) Report(ctx context.Context, k Key, p *pause) (Outcome, error) {
	if p == nil {
		p = &pause{}
		if r.Kinde != nil {
			until, err := r.State.NotBefore(ctx, ProviderKinde)
			if err != nil {
				return "", err
			}
			p.extend(until)
		}
	}
	log := r.Log.With("account", k.Account, "feature", k.Feature, "cycle", k.Cycle)
	acct, err := r.Accounts.Get(ctx, k.Account)
	if err != nil && !errors.Is(err, accounts.ErrNotFound) {
		return "", err
	}
	def := r.Catalog.Definition(k.Feature)
	toKinde := r.Kinde != nil && def.Kinde != nil && acct.KindeAgreementID != ""
	toStripe := r.Stripe && def.Stripe != nil && acct.StripeCustomerID != ""

	now := r.Now()
	nowMs := now.UnixMilli()
	owner := r.holder.Name(r.Owner, "reporter")
	leaseUntil := now.Add(LeaseFor).UnixMilli()
	var st State
	if toKinde || toStripe {
		if st, err = r.State.Claim(ctx, k, RoleReporter, owner, nowMs, leaseUntil); errors.Is(err, ErrLeased) {
			return Leased, nil
		} else if err != nil {
			return "", err
		}
		defer func() {
			if err := r.State.Release(context.WithoutCancel(ctx), k, owner); err != nil {
				log.Warn("report lease not released; it lapses", "err", err)
			}
		}()
	}
	totals, rows, err := r.Usage.ReadRows(ctx, k.Account, k.Feature, k.Cycle)
	if err != nil {
		return "", err
	}
	if !usage.AnyMarked(rows) {
		return Stale, nil
	}
	if !toKinde && !toStripe {
		// Nothing meters this feature for this account: the mark has nothing to say.
		r.clear(ctx, rows, log)
		return Unreported, nil
	}
	total := totals.Billed()
	c, err := cycle.Parse(k.Cycle, acct.AgreementDay)
	if err != nil {
		return "", fmt.Errorf("report %s: %w", k, err)
	}
	if err := r.hook(ctx, AfterRead, k); err != nil {
		return "", err
	}

	if c.Closed(now) {
		out, err := r.closed(ctx, k, total, st, toKinde, toStripe, nowMs)
		if err != nil {
			return "", err
		}
		r.clear(ctx, rows, log)
		return out, nil
	}

	retry, sent, reviewed := false, false, false
	if toKinde && total != st.KindeSent && total < 0 {
		// No meter takes a negative total (rows written before corrections were bounded by the
		// usage can leave one): Kinde is not written, and a person settles the cycle.
		if _, err := r.Review.Add(ctx, review.Entry{
			Account: k.Account, Feature: k.Feature, Cycle: k.Cycle, Provider: ProviderKinde, Reason: review.NegativeLedger,
			Ledger: total, Sent: st.KindeSent, AtMs: nowMs,
			Detail: fmt.Sprintf("The ledger is at %d, below zero; Kinde was last sent %d. Ferry never sends a negative total.", total, st.KindeSent),
		}); err != nil {
			return "", err
		}
		log.Error("ledger below zero; listed for review, nothing sent to Kinde", "total", total)
		toKinde, reviewed = false, true
	}
	if toKinde && total != st.KindeSent {
		ok, err := r.toKinde(ctx, k, acct, def, total, leaseUntil, p, log)
		if err != nil {
			return "", err
		}
		if !ok {
			retry = true
		} else {
			sent = true
			if err := r.hook(ctx, AfterKinde, k); err != nil {
				return "", err
			}
		}
	}
	if toStripe {
		ok, moved, err := r.toStripe(ctx, k, acct, def, c, total, st, nowMs, log)
		if err != nil {
			return "", err
		}
		retry = retry || !ok
		sent = sent || moved
		if moved {
			if err := r.hook(ctx, AfterOutbox, k); err != nil {
				return "", err
			}
		}
	}
	if retry {
		r.Metrics.Count(metrics.ReportFailures, 1)
		return Retrying, nil
	}
	r.clear(ctx, rows, log)
	switch {
	case sent:
		return Reported, nil
	case reviewed:
		return Reviewed, nil
	}
	return Unchanged, nil
}

// toKinde sends the absolute total; ok is false when it was not sent (the cycle stays marked).
func (r *Reporter) toKinde(ctx context.Context, k Key, acct accounts.Account, def plans.Definition, total, leaseUntil int64, p *pause, log *slog.Logger) (bool, error) {
	nowMs := r.Now().UnixMilli()
	if nowMs < p.until() {
		log.Info("Kinde is paused by its rate limit; the cycle waits", "until", time.UnixMilli(p.until()).UTC())
		return false, nil
	}
	if nowMs+LeaseMargin.Milliseconds() >= leaseUntil {
		log.Warn("report lease too close to its deadline to call Kinde; leaving the cycle to the next run")
		return false, nil
	}
	err := r.Kinde.RecordAbsolute(ctx, acct.KindeAgreementID, def.Kinde.FeatureCode, total)
	var limited *kinde.RateLimitedError
	switch {
	case errors.As(err, &limited):
		until := r.Now().Add(limited.Wait).UnixMilli()
		p.extend(until)
		if serr := r.State.SetNotBefore(ctx, ProviderKinde, until); serr != nil {
			log.Warn("Kinde's pause not recorded; this run still honours it", "err", serr)
		}
		log.Warn("Kinde rate limited the report; the cycle stays marked", "retryInMs", limited.Wait.Milliseconds())
		return false, nil
	case err != nil:
		log.Warn("Kinde report failed; the cycle stays marked", "err", err)
		return false, nil
	}
	if err := r.State.SetKindeSent(ctx, k, total, r.Now().UnixMilli()); err != nil {
		// Kinde holds the total; the record of it is behind, and the next report sends the same
		// absolute total again, which changes nothing.
		return false, err
	}
	r.Metrics.Count(metrics.ReportsSent, 1, metrics.Dimension{Name: "Provider", Value: ProviderKinde})
	log.Info("total reported to Kinde", "total", total)
	return true, nil
}

// toStripe writes the outbox row for the cycle's figure with lastSent, in one transaction: for a
// Stripe meter that sums its events, a row for total − lastSent; for one that takes its last
// event's value (MAX, UNIQUE_COUNT, LATEST), a row carrying total itself. ok is false when the
// cycle must stay marked; moved when a row was written.
func (r *Reporter) toStripe(ctx context.Context, k Key, acct accounts.Account, def plans.Definition, c cycle.Cycle, total int64, st State, nowMs int64, log *slog.Logger) (ok, moved bool, err error) {
	absolute := r.Catalog.StripeAggregation(k.Feature) == plans.StripeLast
	delta := total - st.StripeSent
	switch {
	case delta == 0:
		return true, false, nil
	case delta < 0 && !absolute:
		// The ledger went below what Stripe was sent (a negative correction): a delta cannot
		// take it back, only a cancellation can, which the reconciler decides.
		if r.Reconcile == nil {
			return false, false, nil
		}
		if err := r.Reconcile.Request(ctx, k.Account, k.Cycle, fmt.Sprintf("%s: the ledger (%d) is below what Stripe was sent (%d)", k.Feature, total, st.StripeSent)); err != nil {
			return false, false, err
		}
		log.Warn("ledger below what Stripe was sent; reconciliation requested", "total", total, "sent", st.StripeSent)
		return true, false, nil
	}
	row := outbox.Row{
		Account: k.Account, Feature: k.Feature, Cycle: k.Cycle, Key: outbox.ReportKey(total, st.StripeEpoch), Kind: outbox.KindReport,
		Total: total, Delta: delta, EventName: def.Stripe.MeterEventName, MeterID: def.Stripe.MeterID,
		Customer: acct.StripeCustomerID, TimestampMs: nowMs, CycleEndMs: c.End.UnixMilli(), CreatedAtMs: nowMs, UpdatedAtMs: nowMs,
	}
	if absolute {
		row.Absolute, row.Key = true, outbox.AbsoluteKey(total, st.StripeSeq+1)
		row.TimestampMs = LastTimestampMs(nowMs, st.StripeSentAtMs, c)
	}
	item, err := r.Outbox.InsertItem(row)
	if err != nil {
		return false, false, err
	}
	err = r.State.Commit(ctx, item, r.State.StripeSentItem(k, st.StripeSent, total, row.TimestampMs))
	if errors.Is(err, ErrSentChanged) {
		// Resolved from durable state: another run may have written this very total.
		now, rerr := r.State.Get(ctx, k)
		if rerr != nil {
			return false, false, rerr
		}
		if now.StripeSent == total {
			return true, false, nil
		}
		log.Warn("outbox row not written: lastSent moved or the row exists; the cycle stays marked", "total", total, "sent", now.StripeSent)
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	r.Metrics.Count(metrics.ReportsSent, 1, metrics.Dimension{Name: "Provider", Value: ProviderStripe})
	if absolute {
		log.Info("figure queued for Stripe", "total", total, "identifier", row.Identifier())
	} else {
		log.Info("delta queued for Stripe", "total", total, "delta", delta, "identifier", row.Identifier())
	}
	return true, true, nil
}

// LastTimestampMs dates a meter event for a Stripe meter that takes its last event's value in
// the period: Stripe orders those events by their timestamp, in whole seconds, so each must be
// at least a second after the one before (prevMs, the last one's, as the report state recorded
// it), or two reports within one second could be read in either order. It stays inside the
// cycle: an event dated past its end would count in the next period.
func LastTimestampMs(nowMs, prevMs int64, c cycle.Cycle) int64 {
	ts := nowMs
	if prevMs > 0 {
		ts = max(ts, (prevMs/1000+1)*1000)
	}
	return min(ts, c.End.UnixMilli()-1000)
}

// closed handles a marked cycle that has ended: nothing is written to the provider; a total the
// provider was not last sent goes to the review list.
func (r *Reporter) closed(ctx context.Context, k Key, total int64, st State, toKinde, toStripe bool, nowMs int64) (Outcome, error) {
	out := Unchanged
	for _, p := range []struct {
		on       bool
		provider string
		sent     int64
	}{{toKinde, ProviderKinde, st.KindeSent}, {toStripe, ProviderStripe, st.StripeSent}} {
		if !p.on || total == p.sent {
			continue
		}
		if _, err := r.Review.Add(ctx, review.Entry{
			Account: k.Account, Feature: k.Feature, Cycle: k.Cycle, Provider: p.provider, Reason: review.ClosedCycleChanged,
			Ledger: total, Sent: p.sent, AtMs: nowMs,
			Detail: fmt.Sprintf("The cycle closed with the ledger at %d; %s was last sent %d. Ferry never writes a closed cycle.", total, p.provider, p.sent),
		}); err != nil {
			return "", err
		}
		out = Reviewed
	}
	return out, nil
}

// clear takes the marks off the partition as read; a mark whose row was written since stays.
func (r *Reporter) clear(ctx context.Context, rows []map[string]typesAttr, log *slog.Logger) {
	if _, err := r.Usage.ClearMarks(ctx, rows); err != nil {
		// A mark that stays makes the next run report the same total again, which changes nothing.
		log.Warn("report marks not cleared", "err", err)
	}
}

// typesAttr is a DynamoDB attribute value, as usage rows are read.
type typesAttr = types.AttributeValue

func (r *Reporter) hook(ctx context.Context, p Point, k Key) error {
	if r.Hook == nil {
		return nil
	}
	return r.Hook(ctx, p, k)
}
