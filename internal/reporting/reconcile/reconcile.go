// Package reconcile proves that the providers' meters are copies of Ferry's ledger, repairs them
// when they are not, and keeps the proof. For each (account, feature, cycle) a run:
//
//  1. sums the ledger from its durable rows, paged (billed events, settled holds, corrections),
//     checks the usage counters against that sum and rebuilds a counter row that differs;
//  2. reads the provider's meter back (Stripe's event summaries for the cycle's window; Kinde's
//     meter-usage read, isolated in one unverified adapter function);
//  3. compares the ledger, the last total sent and the meter with Decide, a pure function;
//  4. repairs an open cycle from the ledger (Kinde: an absolute write; Stripe under-billing: an
//     outbox row keyed by the evidence; Stripe over-billing: cancelling the events Stripe still
//     lets it cancel, else the review list), reads the meter back, and calls the repair
//     confirmed only when the read-back equals the ledger — otherwise the run reports an error;
//  5. stores the evidence: one row per distinct (ledger, sent, meter, verdict), with the cause in
//     words. A run on the same numbers adds no row. A row whose verdict is not match is stored
//     with its notification (reconcile.mismatch), in one transaction.
//
// The nightly run pages through every account, 50 a page, 5 at a time.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/fanout"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/retry"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/report"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

// Limits of a run, with their units.
const (
	// PageAccounts is how many accounts one page covers; PageConcurrency how many run at once.
	PageAccounts    = 50
	PageConcurrency = 5
	// leaseFor is how long the reconciler holds a cycle against the reporter while it compares
	// and repairs (a repair is one provider write and a bounded read-back).
	leaseFor = 2 * time.Minute
	// leaseTries bounds the waits for another run (the reporter, or another reconciliation)
	// that holds the cycle's lease; DefaultLeaseWait is the wait between two tries.
	leaseTries       = 5
	DefaultLeaseWait = 2 * time.Second
	// DefaultConfirmTries and DefaultConfirmWait bound the read-back after a repair: Stripe's
	// summaries are eventually consistent.
	DefaultConfirmTries = 5
	DefaultConfirmWait  = 2 * time.Second
	// DefaultRecheckWait is the pause before a counter that differs from the ledger is compared
	// again (the ledger's indexes trail the counters by moments), and rebuilt only if it still
	// differs.
	DefaultRecheckWait = 2 * time.Second
	// cancelSafety keeps a cancellation clear of the end of Stripe's 24-hour window.
	cancelSafety = time.Hour
	// ClosedLookback is how long after a cycle's end the nightly run still checks it (Stripe):
	// long enough to see drift right after the rollover.
	ClosedLookback = 48 * time.Hour
	// MaxMarksPerRun bounds the marked cycles one RunMarked reconciles.
	MaxMarksPerRun = 10
)

// KindeMeter is the Kinde client's meter usage (write and the unverified read).
type KindeMeter interface {
	RecordAbsolute(ctx context.Context, agreementID, featureCode string, total int64) error
	ReadTotal(ctx context.Context, agreementID, featureCode string) (int64, error)
}

// StripeMeter is the Stripe client's meter read-back and cancellation.
type StripeMeter interface {
	Summary(ctx context.Context, meterID, customer string, start, end time.Time) (int64, error)
	Cancel(ctx context.Context, eventName, identifier string) error
}

// Drainer sends one outbox row (outbox.Drainer implements it).
type Drainer interface {
	Drain(ctx context.Context, ref outbox.Ref) (outbox.Outcome, error)
}

// Reviewer lists what a person must settle.
type Reviewer interface {
	Add(ctx context.Context, e review.Entry) (bool, error)
}

// Reconciler compares and repairs.
type Reconciler struct {
	Usage    usage.Table
	Ledger   *LedgerReader
	State    *report.StateStore
	Outbox   *outbox.Table
	Drainer  Drainer
	Accounts interface {
		Get(ctx context.Context, id string) (accounts.Account, error)
	}
	Pager    *AccountPager
	Catalog  plans.Catalog
	Kinde    KindeMeter  // nil: usage is not reported to Kinde
	Stripe   StripeMeter // nil: usage is not reported to Stripe
	Evidence *EvidenceStore
	Review   Reviewer
	Marks    MarkSource
	Metrics  metrics.Recorder
	Log      *slog.Logger
	Now      func() time.Time
	Owner    string
	// Read-back, recheck and lease bounds; zero values mean the defaults.
	ConfirmTries int
	ConfirmWait  time.Duration
	RecheckWait  time.Duration
	LeaseWait    time.Duration

	holder outbox.LeaseOwner
	// runs numbers this reconciler's leases: two runs of one process are two holders.
	runs atomic.Uint64
}

// Input narrows a run: one account, one cycle, or a page after an account id.
type Input struct {
	Account string
	Cycle   string
	// After continues a run over every account after this id.
	After string
}

// Check is one provider's comparison for a (account, feature, cycle).
type Check struct {
	Provider  string  `json:"provider"`
	Ledger    int64   `json:"ledger"`
	Sent      int64   `json:"sent"`
	Meter     *int64  `json:"meter"`
	Verdict   Verdict `json:"verdict"`
	Cause     string  `json:"cause"`
	Repair    *int64  `json:"repair"`
	ReadBack  *int64  `json:"readBack"`
	Confirmed bool    `json:"confirmed"`
	// Evidence is the key of the evidence row; NewEvidence says whether this run added it.
	Evidence    string `json:"evidence"`
	NewEvidence bool   `json:"newEvidence"`
	Error       string `json:"error,omitempty"`
}

// Result is one (account, feature, cycle). Ledger, Corrections and Counters are nil when the run
// did not get as far as measuring them (the cycle's lease was held elsewhere, the rows could not
// be read): Error says why, and no number stands in for one that was not read.
type Result struct {
	Account     string  `json:"account"`
	Feature     string  `json:"feature"`
	Cycle       string  `json:"cycle"`
	Ledger      *int64  `json:"ledger"`
	Corrections *int64  `json:"corrections"`
	Counters    *int64  `json:"counters"`
	Rebuilt     int     `json:"rebuilt"`
	Checks      []Check `json:"checks"`
	Error       string  `json:"error,omitempty"`
}

// Page is what one call of Run did.
type Page struct {
	Results  []Result `json:"results"`
	Accounts int      `json:"accounts"`
	// Next is the account id to continue after ("" when the run is complete).
	Next string `json:"next,omitempty"`
}

// Errors joined into a run's error. A run that returns either did not prove everything it looked
// at: the HTTP route answers it with ok false.
var (
	// ErrUnconfirmed: a repair was called for and not confirmed — its read-back did not equal
	// the ledger, or it could not be made and went to the review list instead.
	ErrUnconfirmed = errors.New("a repair was not confirmed")
	// ErrNotMeasured: a cycle was not measured at all (its lease stayed held elsewhere).
	ErrNotMeasured = errors.New("the cycle was not measured")
)

// leaseOwner names one cycle's run in its lease: the reconciler's name and a serial, so that two
// runs in one process (two operators' requests to ferry dev) are two holders, and a run whose
// lease lapsed can never free the lease the other took since.
func (r *Reconciler) leaseOwner() string {
	return r.holder.Name(r.Owner, "reconciler") + "/" + strconv.FormatUint(r.runs.Add(1), 10)
}

// Run reconciles one account (Input.Account) or one page of accounts after Input.After. Every
// (account, feature, cycle) gets a Result; the error joins every failure and every unconfirmed
// repair, so a run that did not prove and repair everything it looked at fails.
func (r *Reconciler) Run(ctx context.Context, in Input) (Page, error) {
	var ids []string
	var next string
	if in.Account != "" {
		ids = []string{in.Account}
	} else {
		var err error
		if ids, next, err = r.Pager.Page(ctx, in.After, PageAccounts); err != nil {
			return Page{}, err
		}
	}
	page := Page{Accounts: len(ids), Next: next}
	var errs []error
	account := func(id string) ([]Result, error) { return r.account(ctx, id, in.Cycle) }
	fanout.Each(ids, PageConcurrency, account, func(_ string, results []Result, err error) {
		page.Results = append(page.Results, results...)
		if err != nil {
			errs = append(errs, err)
		}
	})
	sort.Slice(page.Results, func(i, j int) bool {
		a, b := page.Results[i], page.Results[j]
		if a.Account != b.Account {
			return a.Account < b.Account
		}
		if a.Cycle != b.Cycle {
			return a.Cycle < b.Cycle
		}
		return a.Feature < b.Feature
	})
	return page, errors.Join(errs...)
}

// RunAll pages through every account until the run is complete or the deadline is near,
// reporting each page to progress.
func (r *Reconciler) RunAll(ctx context.Context, deadline time.Time, progress func(Page)) (done bool, err error) {
	after := ""
	var errs []error
	for {
		if time.Until(deadline) < leaseFor {
			return false, errors.Join(errs...)
		}
		page, err := r.Run(ctx, Input{After: after})
		if err != nil {
			errs = append(errs, err)
		}
		if progress != nil {
			progress(page)
		}
		if page.Next == "" {
			return true, errors.Join(errs...)
		}
		after = page.Next
	}
}

// RunMarked reconciles the cycles the mark source lists (up to MaxMarksPerRun) and marks each
// done once its reconciliation ran without error.
func (r *Reconciler) RunMarked(ctx context.Context) ([]Result, error) {
	if r.Marks == nil {
		return nil, nil
	}
	marks, err := r.Marks.Pending(ctx, MaxMarksPerRun)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	var out []Result
	for _, m := range marks {
		results, err := r.account(ctx, m.Account, m.Cycle)
		out = append(out, results...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := r.Marks.Done(ctx, m); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// account reconciles every reported feature of one account, for the given cycle or the default
// ones (the current cycle, and for Stripe the previous one within ClosedLookback of its end).
func (r *Reconciler) account(ctx context.Context, id, label string) ([]Result, error) {
	acct, err := r.Accounts.Get(ctx, id)
	if errors.Is(err, accounts.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	now := r.Now()
	var results []Result
	var errs []error
	for _, feature := range r.Catalog.Features() {
		providers := r.providers(acct, feature)
		if len(providers) == 0 {
			continue
		}
		for _, c := range r.cycles(acct, label, now, providers) {
			res, err := r.key(ctx, acct, report.Key{Account: acct.ID, Feature: feature, Cycle: c.cycle.Label()}, c.cycle, c.providers)
			results = append(results, res)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return results, errors.Join(errs...)
}

// providers are the providers that meter a feature for an account.
func (r *Reconciler) providers(acct accounts.Account, feature string) []string {
	def := r.Catalog.Definition(feature)
	var out []string
	if r.Kinde != nil && def.Kinde != nil && acct.KindeAgreementID != "" {
		out = append(out, report.ProviderKinde)
	}
	if r.Stripe != nil && def.Stripe != nil && acct.StripeCustomerID != "" {
		out = append(out, report.ProviderStripe)
	}
	return out
}

type cycleCheck struct {
	cycle     cycle.Cycle
	providers []string
}

func (r *Reconciler) cycles(acct accounts.Account, label string, now time.Time, providers []string) []cycleCheck {
	if label != "" {
		c, err := cycle.Parse(label, acct.AgreementDay)
		if err != nil || c.Start.After(now) {
			return nil
		}
		return []cycleCheck{{c, providers}}
	}
	current := acct.CycleAt(now)
	out := []cycleCheck{{current, providers}}
	// Kinde reads back only the current cycle; Stripe reads any window.
	if previous := acct.CycleAt(current.Start.Add(-time.Millisecond)); now.Sub(previous.End) < ClosedLookback && contains(providers, report.ProviderStripe) {
		out = append(out, cycleCheck{previous, []string{report.ProviderStripe}})
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// key reconciles one (account, feature, cycle) for its providers.
func (r *Reconciler) key(ctx context.Context, acct accounts.Account, k report.Key, c cycle.Cycle, providers []string) (Result, error) {
	res := Result{Account: k.Account, Feature: k.Feature, Cycle: k.Cycle}
	log := r.Log.With("account", k.Account, "feature", k.Feature, "cycle", k.Cycle)
	fail := func(err error) (Result, error) {
		res.Error = err.Error()
		log.Error("reconciliation failed", "err", err)
		return res, fmt.Errorf("reconcile %s: %w", k, err)
	}
	owner := r.leaseOwner()
	st, err := r.claim(ctx, k, owner)
	if err != nil {
		return fail(err)
	}
	defer func() {
		if err := r.State.Release(context.WithoutCancel(ctx), k, owner); err != nil {
			log.Warn("reconcile lease not released; it lapses", "err", err)
		}
	}()

	totals, rows, rebuilt, err := r.counters(ctx, k, log)
	if err != nil {
		return fail(err)
	}
	res.Rebuilt = rebuilt
	billed := totals.Billed()
	res.Ledger, res.Corrections, res.Counters = &billed, &totals.Corrections, &totals.Used
	pending := usage.AnyMarked(rows)

	var errs []error
	for _, p := range providers {
		check, err := r.check(ctx, acct, k, c, p, st, res, pending, log)
		res.Checks = append(res.Checks, check)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		res.Error = err.Error()
		return res, fmt.Errorf("reconcile %s: %w", k, err)
	}
	return res, nil
}

// claim takes the cycle's report lease, waiting (bounded) for the run that holds it: the
// reporter, or another reconciliation. A run that never got the lease names the holder it last
// found.
func (r *Reconciler) claim(ctx context.Context, k report.Key, owner string) (report.State, error) {
	wait := r.LeaseWait
	if wait <= 0 {
		wait = DefaultLeaseWait
	}
	var held *report.LeasedError
	for try := range leaseTries {
		now := r.Now()
		st, err := r.State.Claim(ctx, k, report.RoleReconciler, owner, now.UnixMilli(), now.Add(leaseFor).UnixMilli())
		if !errors.As(err, &held) {
			return st, err
		}
		if try < leaseTries-1 {
			if err := retry.Sleep(ctx, wait); err != nil {
				return report.State{}, err
			}
		}
	}
	return report.State{}, fmt.Errorf("%w: the cycle stayed leased by %s through %d tries, so nothing was measured; run it again", ErrNotMeasured, held.Holder(), leaseTries)
}

// counters sums the ledger, compares it with every counter row and rebuilds a row that still
// differs after a recheck. It returns the partition as read after any rebuild.
func (r *Reconciler) counters(ctx context.Context, k report.Key, log *slog.Logger) (usage.Totals, []map[string]types.AttributeValue, int, error) {
	wait := r.RecheckWait
	if wait == 0 {
		wait = DefaultRecheckWait
	}
	rebuilt := 0
	for pass := 0; ; pass++ {
		totals, rows, err := r.Usage.ReadRows(ctx, k.Account, k.Feature, k.Cycle)
		if err != nil {
			return usage.Totals{}, nil, 0, err
		}
		sum, err := r.Ledger.Sum(ctx, k)
		if err != nil {
			return usage.Totals{}, nil, 0, err
		}
		diffs := differing(k, rows, sum)
		if len(diffs) == 0 {
			return totals, rows, rebuilt, nil
		}
		switch pass {
		case 0:
			// The ledger's indexes trail the counters by moments: look again before acting.
			log.Warn("counters differ from the ledger; checking again", "rows", len(diffs))
			if err := retry.Sleep(ctx, wait); err != nil {
				return usage.Totals{}, nil, 0, err
			}
		case 1:
			for _, d := range diffs {
				if err := r.Usage.RebuildRow(ctx, d.row, d.want, r.Now().UnixMilli()); err != nil {
					return usage.Totals{}, nil, 0, fmt.Errorf("rebuild %s from the ledger: %w", usage.RowSK(d.row), err)
				}
				rebuilt++
				r.Metrics.Count(metrics.CountersRebuilt, 1)
				log.Error("counter rebuilt from the ledger", "sk", usage.RowSK(d.row), "counter", dynamo.Int(d.row, usage.AttrUsed), "ledger", d.want)
			}
		default:
			return usage.Totals{}, nil, 0, fmt.Errorf("counters still differ from the ledger after a rebuild (%d rows)", len(diffs))
		}
	}
}

type diff struct {
	row  map[string]types.AttributeValue
	want int64
}

// differing lists the counter rows whose used differs from the ledger's sum for them, including
// rows the ledger has usage for that do not exist.
func differing(k report.Key, rows []map[string]types.AttributeValue, sum Sum) []diff {
	var out []diff
	seen := map[string]bool{}
	for _, row := range rows {
		sk := usage.RowSK(row)
		if !usage.IsCounter(sk) {
			continue
		}
		seen[sk] = true
		if got, want := dynamo.Int(row, usage.AttrUsed), sum.Rows[sk]; got != want {
			out = append(out, diff{row: row, want: want})
		}
	}
	for sk, want := range sum.Rows {
		if !seen[sk] && want != 0 {
			out = append(out, diff{row: map[string]types.AttributeValue{"pk": dynamo.S(k.PK()), "sk": dynamo.S(sk)}, want: want})
		}
	}
	return out
}
