package report_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	kindestandin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/reporting/report"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var errCrash = errors.New("killed here")

type rig struct {
	*apptest.Harness
	stand *apptest.StandIns
	rep   *report.Reporter
}

func newRig(t *testing.T, ddb ...func(*dynamodb.Options)) *rig {
	t.Helper()
	stand := apptest.NewStandIns(t, plans.Default())
	h := apptest.New(t, apptest.Options{Settings: stand.Settings, DynamoDB: ddb, Configure: func(h *apptest.Harness) {
		// A short client timeout, so that a timeout after the write landed is quick to see.
		h.MeterAPI().Reporter.Kinde = stand.KindeClient(t, &http.Client{Timeout: 300 * time.Millisecond})
	}})
	stand.Stripe.SetClock(h.Clock.Now)
	return &rig{Harness: h, stand: stand, rep: h.MeterAPI().Reporter}
}

func (r *rig) linked(t *testing.T, id, plan string) accounts.Account {
	t.Helper()
	a, _ := r.LinkedAccount(t, id, plan)
	return a
}

// bill bills n events through the worker.
func (r *rig) bill(t *testing.T, acct accounts.Account, n int) { t.Helper(); r.Bill(t, acct, n) }

func (r *rig) run(t *testing.T) report.Result {
	t.Helper()
	res, err := r.rep.Run(context.Background())
	if err != nil && !errors.Is(err, errCrash) {
		t.Fatalf("report: %v", err)
	}
	return res
}

func (r *rig) drain(t *testing.T) {
	t.Helper()
	if _, err := r.MeterAPI().Drainer.Run(context.Background()); err != nil {
		t.Fatalf("drain: %v", err)
	}
}

// dirty lists the keys the reporter would take now.
func (r *rig) dirty(t *testing.T) []report.Key {
	t.Helper()
	keys, _, err := r.rep.Marks.Dirty(context.Background(), 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func (r *rig) kinde(id string) int64 { return r.stand.Kinde.MeterTotal("agr_"+id, "events") }

func (r *rig) stripeTotal(id string) int64 { return r.stand.Stripe.Total("ferry_events", "cus_"+id) }

func (r *rig) key(acct accounts.Account) report.Key {
	return report.Key{Account: acct.ID, Feature: plans.FeatureEvents, Cycle: acct.CycleAt(r.Clock.Now()).Label()}
}

func TestReport_SendsKindeTheAbsoluteTotalAndStripeTheDelta(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_r", "plus")
	r.bill(t, acct, 5)
	if res := r.run(t); res.Found != 1 || res.Reported != 1 {
		t.Fatalf("result %+v", res)
	}
	r.drain(t)
	r.bill(t, acct, 3)
	r.run(t)
	r.drain(t)
	if r.kinde(acct.ID) != 8 || r.stripeTotal(acct.ID) != 8 {
		t.Errorf("Kinde %d, Stripe %d; want 8 and 8", r.kinde(acct.ID), r.stripeTotal(acct.ID))
	}
	// Stripe got two deltas, 5 and 3, keyed by the totals they bring the meter to.
	var got []string
	for _, e := range r.stand.Stripe.Events() {
		got = append(got, fmt.Sprintf("%s=%d", e.Identifier, e.Value))
	}
	label := r.key(acct).Cycle
	if want := fmt.Sprintf("[acct_r:events:%s:5=5 acct_r:events:%s:8=3]", label, label); fmt.Sprint(got) != want {
		t.Errorf("Stripe events %v; want %s", got, want)
	}
	if len(r.dirty(t)) != 0 {
		t.Errorf("marks left after the reports: %v", r.dirty(t))
	}
	// Nothing changed: nothing is marked, nothing is sent.
	before := r.stand.Kinde.Counts().MeterWrites
	if res := r.run(t); res.Found != 0 || r.stand.Kinde.Counts().MeterWrites != before {
		t.Errorf("an unchanged ledger was reported again: %+v", res)
	}
}

// A 429 from Kinde leaves the cycle marked, and Kinde is not called again before its
// RateLimit-Reset, by this run or the next; after it, the total goes out.
func TestReport_429_RemarkedAndPausedUntilRateLimitReset(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_429", "plus")
	r.bill(t, acct, 4)
	r.stand.Kinde.SetRateLimitReset(120)
	r.stand.Kinde.FailMeterWrites(kindestandin.MeterRateLimit)
	if res := r.run(t); res.Retrying != 1 {
		t.Fatalf("result %+v", res)
	}
	if len(r.dirty(t)) != 1 || r.kinde(acct.ID) != 0 {
		t.Fatalf("after the 429: marks %v, Kinde %d", r.dirty(t), r.kinde(acct.ID))
	}
	if got := r.Counter.Get(metrics.ReportFailures); got != 1 {
		t.Errorf("ReportFailures = %d", got)
	}
	writes := r.stand.Kinde.Counts().MeterWrites
	r.Clock.Advance(time.Minute)
	r.run(t)
	if got := r.stand.Kinde.Counts().MeterWrites; got != writes {
		t.Errorf("Kinde was called %d times before its RateLimit-Reset", got-writes)
	}
	r.Clock.Advance(61 * time.Second)
	r.run(t)
	if r.kinde(acct.ID) != 4 || len(r.dirty(t)) != 0 {
		t.Errorf("after the reset: Kinde %d, marks %v", r.kinde(acct.ID), r.dirty(t))
	}
}

// Any other failure (a 5xx, a timeout after the write landed) leaves the cycle marked; the next
// run sends the then-current total, and an absolute total sent twice changes nothing.
func TestReport_FailureOrTimeout_RemarkedAndTheNextRunSendsTheTotal(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_5xx", "plus")
	r.bill(t, acct, 2)
	r.stand.Kinde.FailMeterWrites(kindestandin.MeterFail)
	r.run(t)
	r.bill(t, acct, 1)
	r.stand.Kinde.SetHang(time.Second)
	r.stand.Kinde.FailMeterWrites(kindestandin.MeterTimeoutAfterWrite)
	if res := r.run(t); res.Retrying != 1 {
		t.Fatalf("timeout run %+v", res)
	}
	if r.kinde(acct.ID) != 3 || len(r.dirty(t)) != 1 {
		t.Fatalf("the timed-out write landed (Kinde %d) but the mark must stay (%v)", r.kinde(acct.ID), r.dirty(t))
	}
	r.run(t)
	c := r.stand.Kinde.Counts()
	if r.kinde(acct.ID) != 3 || len(r.dirty(t)) != 0 || c.MeterWritesApplied != 2 {
		t.Errorf("Kinde %d, marks %v, applied writes %d", r.kinde(acct.ID), r.dirty(t), c.MeterWritesApplied)
	}
}

// The reporter dies at each point between its durable steps; the next run finishes the report,
// and each provider's meter moves once.
func TestReport_CrashWindows_EachProviderMovesOnce(t *testing.T) {
	for _, p := range []report.Point{report.AfterRead, report.AfterKinde, report.AfterOutbox} {
		t.Run(string(p), func(t *testing.T) {
			r := newRig(t)
			acct := r.linked(t, "acct_crash", "plus")
			r.bill(t, acct, 6)
			r.rep.Hook = func(_ context.Context, at report.Point, _ report.Key) error {
				if at == p {
					return errCrash
				}
				return nil
			}
			r.run(t)
			r.rep.Hook = nil
			if len(r.dirty(t)) != 1 {
				t.Fatalf("the crashed cycle lost its mark")
			}
			r.Clock.Advance(report.LeaseFor)
			r.run(t)
			r.drain(t)
			r.run(t)
			r.drain(t)
			if r.kinde(acct.ID) != 6 || r.stripeTotal(acct.ID) != 6 || len(r.dirty(t)) != 0 {
				t.Errorf("Kinde %d, Stripe %d, marks %v", r.kinde(acct.ID), r.stripeTotal(acct.ID), r.dirty(t))
			}
			if c := r.stand.Stripe.Counts(); c.EventsRecorded != 1 || c.MeterEventRequests != 1 {
				t.Errorf("Stripe counts %+v; want one event, sent once", c)
			}
			wantKindeWrites := 1
			if p == report.AfterRead {
				wantKindeWrites = 1
			}
			if got := r.stand.Kinde.Counts().MeterWritesApplied; got != wantKindeWrites {
				t.Errorf("Kinde took %d writes; want %d", got, wantKindeWrites)
			}
		})
	}
}

// A write that lands while a cycle is being reported keeps its row's mark (its revision moved),
// so the next run reports it: no write is ever covered by neither a reported total nor a mark.
func TestReport_WriteDuringTheReport_KeepsItsMark(t *testing.T) {
	r := newRig(t)
	// A capped plan bills every event onto the budget row: the write below lands on the very row
	// the report read, whose mark is already on.
	acct := r.linked(t, "acct_race", "free")
	r.bill(t, acct, 3)
	r.rep.Hook = func(_ context.Context, at report.Point, _ report.Key) error {
		if at == report.AfterRead {
			r.bill(t, acct, 1)
		}
		return nil
	}
	r.run(t)
	r.rep.Hook = nil
	r.drain(t)
	if r.kinde(acct.ID) != 3 || len(r.dirty(t)) != 1 {
		t.Fatalf("Kinde %d, marks %v: a write during the report lost its mark", r.kinde(acct.ID), r.dirty(t))
	}
	r.run(t)
	r.drain(t)
	if r.kinde(acct.ID) != 4 || r.stripeTotal(acct.ID) != 4 {
		t.Errorf("Kinde %d, Stripe %d; want 4", r.kinde(acct.ID), r.stripeTotal(acct.ID))
	}
}

// After a report takes the marks off, the next write puts its row's mark back.
func TestReport_WriteAfterTheMarksCameOff_MarksAgain(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_again", "free")
	r.bill(t, acct, 1)
	r.run(t)
	if len(r.dirty(t)) != 0 {
		t.Fatal("marks left")
	}
	r.bill(t, acct, 1)
	if len(r.dirty(t)) != 1 {
		t.Fatal("the next write did not mark its cycle")
	}
	r.run(t)
	if r.kinde(acct.ID) != 2 {
		t.Errorf("Kinde %d; want 2", r.kinde(acct.ID))
	}
}

// Two reporters on one cycle: the second finds it leased and sends nothing.
func TestReport_TwoReporters_TheLeaseKeepsOneOut(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_two", "plus")
	r.bill(t, acct, 2)
	second := &report.Reporter{
		Usage: r.rep.Usage, Marks: r.rep.Marks, State: r.rep.State, Outbox: r.rep.Outbox, Accounts: r.rep.Accounts,
		Catalog: r.rep.Catalog, Kinde: r.rep.Kinde, Stripe: r.rep.Stripe, Review: r.rep.Review, Reconcile: r.rep.Reconcile,
		Metrics: r.rep.Metrics, Log: r.rep.Log, Now: r.rep.Now, Owner: "reporter-two",
	}
	var out report.Outcome
	r.rep.Hook = func(ctx context.Context, at report.Point, k report.Key) error {
		if at == report.AfterRead && out == "" {
			var err error
			out, err = second.Report(ctx, k, nil)
			return err
		}
		return nil
	}
	r.run(t)
	if out != report.Leased {
		t.Errorf("the second reporter: %s", out)
	}
	if got := r.stand.Kinde.Counts().MeterWrites; got != 1 {
		t.Errorf("Kinde took %d writes; want 1", got)
	}
}

// A reporter paused past its lease's margin does not call the provider.
func TestReport_LeaseTooCloseToItsDeadline_DoesNotSend(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_slow", "plus")
	r.bill(t, acct, 2)
	r.rep.Hook = func(_ context.Context, at report.Point, _ report.Key) error {
		if at == report.AfterRead {
			r.Clock.Advance(report.LeaseFor - report.LeaseMargin)
		}
		return nil
	}
	r.run(t)
	if got := r.stand.Kinde.Counts().MeterWrites; got != 0 {
		t.Errorf("Kinde took %d writes from a lapsing lease", got)
	}
	if len(r.dirty(t)) != 1 {
		t.Error("the cycle lost its mark")
	}
}

// Two runs computing a delta from the same lastSent (the first stalled past its lease): only one
// outbox row commits, and Stripe's meter holds the ledger, not the sum of both deltas.
func TestReport_DeltasFromOneLastSent_OnlyOneCommits(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_delta", "plus")
	r.bill(t, acct, 5)
	second := &report.Reporter{
		Usage: r.rep.Usage, Marks: r.rep.Marks, State: r.rep.State, Outbox: r.rep.Outbox, Accounts: r.rep.Accounts,
		Catalog: r.rep.Catalog, Stripe: true, Review: r.rep.Review, Reconcile: r.rep.Reconcile,
		Metrics: r.rep.Metrics, Log: r.rep.Log, Now: r.rep.Now, Owner: "reporter-two",
	}
	r.rep.Kinde = nil
	done := false
	r.rep.Hook = func(ctx context.Context, at report.Point, k report.Key) error {
		if at == report.AfterRead && !done {
			done = true
			r.bill(t, acct, 1)
			r.Clock.Advance(report.LeaseFor) // the first run's lease lapses under it
			if _, err := second.Report(ctx, k, nil); err != nil {
				return err
			}
		}
		return nil
	}
	r.run(t)
	r.rep.Hook = nil
	r.drain(t)
	r.run(t)
	r.drain(t)
	if got := r.stripeTotal(acct.ID); got != 6 {
		t.Errorf("Stripe holds %d; want 6", got)
	}
}

// A closed cycle is never written: a late change goes to the review list instead.
func TestReport_ClosedCycle_ListedNeverWritten(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_end", "plus")
	r.bill(t, acct, 3)
	r.run(t)
	r.drain(t)
	r.bill(t, acct, 2) // in this cycle, billed just before it ends
	r.Clock.Set(acct.CycleAt(r.Clock.Now()).End.Add(time.Minute))
	kinde, stripe := r.stand.Kinde.Counts().MeterWrites, r.stand.Stripe.Counts().MeterEventRequests
	if res := r.run(t); res.Review != 1 {
		t.Fatalf("result %+v", res)
	}
	r.drain(t)
	if r.stand.Kinde.Counts().MeterWrites != kinde || r.stand.Stripe.Counts().MeterEventRequests != stripe {
		t.Error("a closed cycle was written")
	}
	entries, err := r.MeterAPI().Review.List(context.Background())
	if err != nil || len(entries) != 2 {
		t.Fatalf("review %+v, %v", entries, err)
	}
	for _, e := range entries {
		if e.Reason != review.ClosedCycleChanged || e.Ledger != 5 || e.Sent != 3 {
			t.Errorf("entry %+v", e)
		}
	}
	if len(r.dirty(t)) != 0 {
		t.Error("the closed cycle stays marked")
	}
}

// A feature no provider meters, or an account linked to no provider, is not reported: its marks
// come off and no provider is called.
func TestReport_UnreportedFeatureOrAccount_MarksComeOff(t *testing.T) {
	r := newRig(t)
	key := r.CreateAccount(t, "acct_plain", "free", nil)
	resp := r.Do(t, http.MethodPost, "/v1/events", key, `{"specversion":"1.0","id":"e1","source":"/t","type":"t"}`)
	if resp.Status != http.StatusAccepted {
		t.Fatalf("event: %d %s", resp.Status, resp.Body)
	}
	r.Drain(t, 0)
	if len(r.dirty(t)) != 1 {
		t.Fatalf("marks %v", r.dirty(t))
	}
	if res := r.run(t); res.Unreported != 1 {
		t.Errorf("result %+v", res)
	}
	if len(r.dirty(t)) != 0 || r.stand.Kinde.Counts().MeterWrites != 0 {
		t.Errorf("marks %v, Kinde writes %d", r.dirty(t), r.stand.Kinde.Counts().MeterWrites)
	}
}

// The lease's own guards: a lapsed lease is taken over, and its first holder cannot free the
// lease another run took since.
func TestState_LeaseTakenOverOnlyOnceLapsed_ReleasedOnlyByItsHolder(t *testing.T) {
	r := newRig(t)
	st, k := r.rep.State, report.Key{Account: "acct_l", Feature: "events", Cycle: "2026-11"}
	ctx := context.Background()
	if _, err := st.Claim(ctx, k, report.RoleReporter, "a", 0, 100); err != nil {
		t.Fatal(err)
	}
	_, err := st.Claim(ctx, k, report.RoleReconciler, "b", 99, 200)
	var held *report.LeasedError
	if !errors.Is(err, report.ErrLeased) || !errors.As(err, &held) || held.Role != report.RoleReporter || held.Owner != "a" || held.UntilMs != 100 {
		t.Fatalf("a live lease was taken, or its holder not named: %v", err)
	}
	if _, err := st.Claim(ctx, k, report.RoleReporter, "b", 100, 200); err != nil {
		t.Fatalf("a lapsed lease was not taken over: %v", err)
	}
	if err := st.Release(ctx, k, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, k, report.RoleReporter, "c", 150, 300); !errors.As(err, &held) || held.Owner != "b" || !strings.Contains(err.Error(), "the reporter (b)") {
		t.Errorf("the lapsed holder freed the lease its successor holds: %v", err)
	}
}

// A mark already present costs no write: once a row is marked, billing another event on it is
// one transaction of the same writes as without marks (the entry with its checkpoint, the meter,
// the unit's rows item, the events meter's rollup minute and hour), plus a check of the mark,
// read with the unit's state. Only the first
// write after a report pays for the mark. (A counted plan's units land on 64 shards, each with
// its own mark: see make bench for the amortized figure.)
func TestMarks_APresentMarkCostsNoWrite(t *testing.T) {
	meter := instrument.NewRequestMeter()
	r := newRig(t, meter.Option)
	acct := r.linked(t, "acct_cost", "free")
	r.bill(t, acct, 1) // the first event marks the budget row
	meter.Reset()
	r.bill(t, acct, 1)
	ops := meter.Snapshot()
	if tx := ops["TransactWriteItems"]; tx.Calls != 1 || tx.WriteUnits != 10 || tx.ReadUnits != 2 || tx.Errors != 0 {
		t.Errorf("TransactWriteItems %+v; want 1 call, 10 write units (the entry, the meter, the rows item, two rollup items), 2 read units (the mark's check)", tx)
	}
	if put := ops["PutItem"]; put.Calls != 1 || put.WriteUnits != 1 {
		t.Errorf("PutItem %+v; want the unit's done record alone", put)
	}
	if upd := ops["UpdateItem"]; upd.Calls != 0 {
		t.Errorf("UpdateItem %+v; want none", upd)
	}
	if get, read := ops["GetItem"], ops["BatchGetItem"]; get.Calls != 1 || read.Calls != 1 {
		t.Errorf("GetItem %+v, BatchGetItem %+v; want the account's read and the unit's (which reads the mark)", get, read)
	}
}
