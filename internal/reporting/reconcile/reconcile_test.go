package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	standin "github.com/ferrymeter/ferry/internal/devkit/standin/stripe"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/reporting/report"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

// The figures of the reference scenario (DESIGN §3 scenario 5, from the Notch write-up).
const (
	seedFirstMatch = 6_048
	seedMeter      = 8_031
	seedLedger     = 8_457
)

// A plus account reports 6,048 and matches with no corrections. Then the ledger reaches 8,457
// while the meter holds 8,031 (late usage after the last report): the reconciler says
// under_billed, repairs to 8,457, reads it back and stores the evidence with the cause; the next
// run says match at 8,457 and adds no evidence row. Both providers, side by side. The usage is
// tokens spent by jobs (settled holds are ledger rows): 8,457 events through the local emulator,
// whose transactions copy every table they touch, would take minutes; events take the same path
// to the meter in the other tests here.
func TestReconcile_ReferenceScenario_LateUsageRepairedAndProven(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_notch", "plus")
	key := r.apiKey(t, acct.ID)
	const feature = "tokens"

	r.spend(t, key, seedFirstMatch)
	r.report(t)
	res, err := r.reconcileFeature(t, acct.ID, feature)
	if err != nil {
		t.Fatalf("first run: %v", err)
	}
	if val(res.Ledger) != "6048" || val(res.Corrections) != "0" || res.Rebuilt != 0 {
		t.Errorf("first run: %+v", res)
	}
	for _, p := range []string{report.ProviderKinde, report.ProviderStripe} {
		c := check(t, res, p)
		if c.Verdict != reconcile.Match || c.Sent != seedFirstMatch || val(c.Meter) != "6048" || !c.NewEvidence {
			t.Errorf("first run, %s: %+v", p, c)
		}
	}

	r.spend(t, key, seedMeter-seedFirstMatch)
	r.report(t)
	// Late usage: after the last report, before the next.
	r.spend(t, key, seedLedger-seedMeter)
	if got := r.stand.Kinde.MeterTotal("agr_acct_notch", feature); got != seedMeter {
		t.Fatalf("Kinde holds %d before the run; want %d", got, seedMeter)
	}
	res, err = r.reconcileFeature(t, acct.ID, feature)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	for _, p := range []string{report.ProviderKinde, report.ProviderStripe} {
		c := check(t, res, p)
		if c.Verdict != reconcile.UnderBilled || c.Ledger != seedLedger || c.Sent != seedMeter || val(c.Meter) != "8031" ||
			val(c.Repair) != "8457" || val(c.ReadBack) != "8457" || !c.Confirmed || c.Cause != reconcile.CauseLate || !c.NewEvidence {
			t.Errorf("second run, %s: %+v", p, c)
		}
	}
	if got := r.stand.Kinde.MeterTotal("agr_acct_notch", feature); got != seedLedger {
		t.Errorf("Kinde holds %d; want %d", got, seedLedger)
	}
	if got := r.stand.Stripe.Total("ferry_tokens", "cus_acct_notch"); got != seedLedger {
		t.Errorf("Stripe holds %d; want %d", got, seedLedger)
	}
	rows := len(r.evidence(t, acct.ID))

	// The late usage's mark is still on: the reporter finds the meters already right.
	r.report(t)
	res, err = r.reconcileFeature(t, acct.ID, feature)
	if err != nil {
		t.Fatalf("third run: %v", err)
	}
	for _, p := range []string{report.ProviderKinde, report.ProviderStripe} {
		c := check(t, res, p)
		if c.Verdict != reconcile.Match || c.Ledger != seedLedger || val(c.Meter) != "8457" || c.NewEvidence {
			t.Errorf("third run, %s: %+v", p, c)
		}
	}
	if got := len(r.evidence(t, acct.ID)); got != rows {
		t.Errorf("the third run added %d evidence rows", got-rows)
	}
	// The evidence says what happened, in order: the match, the repair with its cause, and the
	// repaired state confirmed.
	var causes []string
	for _, rec := range r.evidence(t, acct.ID) {
		if rec.Provider == report.ProviderKinde && rec.Feature == feature {
			causes = append(causes, string(rec.Verdict)+": "+rec.Cause)
		}
	}
	want := []string{
		"match: The meter equals the ledger.",
		"under_billed: " + reconcile.CauseLate,
		"match: " + reconcile.ConfirmedCause,
	}
	if strings.Join(causes, "\n") != strings.Join(want, "\n") {
		t.Errorf("evidence:\n%s\nwant:\n%s", strings.Join(causes, "\n"), strings.Join(want, "\n"))
	}
	// Stripe saw the reports and the repair under their identifiers, each once.
	ids := map[string]int{}
	for _, e := range r.stand.Stripe.Events() {
		ids[e.Identifier]++
	}
	prefix := "acct_notch:tokens:" + r.cycle(t, acct.ID) + ":"
	for _, id := range []string{prefix + "6048", prefix + "8031", prefix + "repair:8457-8031-8031"} {
		if ids[id] != 1 {
			t.Errorf("Stripe holds %d events %s; want 1 (all: %v)", ids[id], id, ids)
		}
	}
}

// The same late-event case with events, at a small scale: the ledger's billed events are the
// record, counted from the ledger's meter index.
func TestReconcile_LateEvents_UnderBilledRepaired(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_clicks", "plus")
	r.bill(t, acct, 60)
	r.report(t)
	r.bill(t, acct, 4)
	res, err := r.reconcile(t, acct.ID)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, p := range []string{report.ProviderKinde, report.ProviderStripe} {
		c := check(t, res, p)
		if c.Verdict != reconcile.UnderBilled || c.Ledger != 64 || c.Sent != 60 || !c.Confirmed || c.Cause != reconcile.CauseLate {
			t.Errorf("%s: %+v", p, c)
		}
	}
}

// A provider that cannot be read proves nothing: the verdict is unreadable, nothing is
// repaired, the evidence records it, and the alarm's metric counts it.
func TestReconcile_UnreadableProvider_NoRepairAndAlarmed(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_dark", "plus")
	r.bill(t, acct, 5)
	r.report(t)
	r.stand.Stripe.FailNext(standin.EndpointSummaries, standin.Fail)
	r.stand.Kinde.FailMeterReads("fail")
	before := r.stand.Stripe.Counts().MeterEventRequests
	res, err := r.reconcile(t, acct.ID)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, p := range []string{report.ProviderKinde, report.ProviderStripe} {
		c := check(t, res, p)
		if c.Verdict != reconcile.Unreadable || c.Meter != nil || c.Repair != nil || !strings.Contains(c.Cause, "could not be read back") {
			t.Errorf("%s: %+v", p, c)
		}
	}
	if got := r.stand.Stripe.Counts().MeterEventRequests; got != before {
		t.Errorf("Stripe received %d meter events during an unreadable run", got-before)
	}
	if got := r.Counter.Get(metrics.ReconcileUnreadable); got != 2 {
		t.Errorf("ReconcileUnreadable = %d; want 2", got)
	}
	found := false
	for _, rec := range r.evidence(t, acct.ID) {
		found = found || (rec.Verdict == reconcile.Unreadable && rec.Meter == nil)
	}
	if !found {
		t.Error("no unreadable evidence stored")
	}
}

// A closed cycle that drifted is never written: it goes to the review list, and the drift
// metric (alarmed) counts it.
func TestReconcile_ClosedCycleDrift_ListedNeverWritten(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_closed", "plus")
	r.bill(t, acct, 40)
	r.report(t)
	label := r.cycle(t, acct.ID)
	// Usage lost on Stripe's side, then the cycle ends.
	r.stand.Stripe.Drift("ferry_events", "cus_acct_closed", -3, r.Clock.Now())
	r.Clock.Set(acct.CycleAt(r.Clock.Now()).End.Add(2 * time.Hour))
	before := r.stand.Stripe.Counts()
	page, err := r.MeterAPI().Reconciler.Run(context.Background(), reconcile.Input{Account: acct.ID, Cycle: label})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var c reconcile.Check
	for _, res := range page.Results {
		if res.Feature == plans.FeatureEvents {
			c = check(t, res, report.ProviderStripe)
		}
	}
	if c.Verdict != reconcile.ClosedCycleDrift || c.Repair != nil || val(c.Meter) != "37" {
		t.Errorf("check: %+v", c)
	}
	if after := r.stand.Stripe.Counts(); after.MeterEventRequests != before.MeterEventRequests || after.Cancels != before.Cancels {
		t.Errorf("a closed cycle was written: %+v → %+v", before, after)
	}
	entries, err := r.MeterAPI().Review.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Reason != review.ClosedCycleDrift || entries[0].Ledger != 40 || val(entries[0].Meter) != "37" {
		t.Errorf("review list: %+v", entries)
	}
	if r.Counter.Get(metrics.ReconcileDrift) != 1 || r.Counter.Get(metrics.ReviewListed) != 1 {
		t.Errorf("metrics: drift %d, listed %d", r.Counter.Get(metrics.ReconcileDrift), r.Counter.Get(metrics.ReviewListed))
	}
	// Found again on the same numbers, it is listed once: one entry, one alarm.
	if _, err := r.MeterAPI().Reconciler.Run(context.Background(), reconcile.Input{Account: acct.ID, Cycle: label}); err != nil {
		t.Fatal(err)
	}
	entries, _ = r.MeterAPI().Review.List(context.Background())
	if len(entries) != 1 || r.Counter.Get(metrics.ReviewListed) != 1 {
		t.Errorf("listed again: %d entries, ReviewListed %d", len(entries), r.Counter.Get(metrics.ReviewListed))
	}
}

// A request made again after the reconciler read it is a new request: marking the first done
// leaves it.
func TestRequests_ARequestMadeAgainSurvivesTheFirstOnesDone(t *testing.T) {
	r := newRig(t)
	q := r.MeterAPI().Requests
	ctx := context.Background()
	if err := q.Request(ctx, "acct_q", "2026-11", "first"); err != nil {
		t.Fatal(err)
	}
	marks, err := q.Pending(ctx, 10)
	if err != nil || len(marks) != 1 {
		t.Fatalf("%+v %v", marks, err)
	}
	r.Clock.Advance(time.Second)
	if err := q.Request(ctx, "acct_q", "2026-11", "again"); err != nil {
		t.Fatal(err)
	}
	if err := q.Done(ctx, marks[0]); err != nil {
		t.Fatal(err)
	}
	if left, _ := q.Pending(ctx, 10); len(left) != 1 || left[0].Reason != "again" {
		t.Errorf("pending %+v", left)
	}
}

// Stripe above the ledger (a negative correction after the report): Ferry cancels its own most
// recent events that Stripe still lets it cancel, sends the shortfall under an identifier keyed
// by the evidence, and confirms.
func TestReconcile_OverBilledStripe_CancelsWithinTheWindowAndConfirms(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_over", "plus")
	r.bill(t, acct, 10)
	r.report(t)
	r.bill(t, acct, 5)
	r.report(t) // Stripe now holds 15 in two events: 10 and 5
	correct(t, r, acct.ID, -2)
	r.report(t) // the reporter asks for reconciliation: a delta cannot go down
	res, err := r.reconcile(t, acct.ID)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	c := check(t, res, report.ProviderStripe)
	if c.Verdict != reconcile.OverBilled || c.Ledger != 13 || val(c.Meter) != "15" || !c.Confirmed || val(c.ReadBack) != "13" {
		t.Errorf("check: %+v", c)
	}
	if got := r.stand.Stripe.Total("ferry_events", "cus_acct_over"); got != 13 {
		t.Errorf("Stripe holds %d; want 13", got)
	}
	if got := r.stand.Stripe.Counts().Cancels; got != 1 {
		t.Errorf("%d cancellations; want 1 (the newest event, of 5)", got)
	}
	// The next report starts a new epoch of keys: a later total never reuses one.
	r.bill(t, acct, 2)
	r.report(t)
	if got := r.stand.Stripe.Total("ferry_events", "cus_acct_over"); got != 15 {
		t.Errorf("Stripe holds %d after the next report; want 15", got)
	}
}

// Past Stripe's 24-hour window the over-billing cannot be cancelled: it is listed for review, and
// the run does not pass for one that proved the meter (the repair it called for was not made).
func TestReconcile_OverBilledPastTheWindow_ListedForReview(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_late_over", "plus")
	r.bill(t, acct, 10)
	r.report(t)
	correct(t, r, acct.ID, -1)
	r.Clock.Advance(25 * time.Hour)
	res, err := r.reconcile(t, acct.ID)
	if !errors.Is(err, reconcile.ErrUnconfirmed) {
		t.Fatalf("run: %v; want ErrUnconfirmed", err)
	}
	c := check(t, res, report.ProviderStripe)
	if c.Verdict != reconcile.OverBilled || c.Confirmed || !strings.Contains(c.Error, "listed for review") {
		t.Errorf("check: %+v", c)
	}
	if got := r.stand.Stripe.Counts().Cancels; got != 0 {
		t.Errorf("%d cancellations past the window", got)
	}
	entries, _ := r.MeterAPI().Review.List(context.Background())
	if len(entries) != 1 || entries[0].Reason != review.OverBilledUncancellable {
		t.Errorf("review list: %+v", entries)
	}
}

// A counter row that differs from the ledger rows behind it is rebuilt from them, and marked, so
// the reporter sends the rebuilt total.
func TestReconcile_CounterDifferingFromTheLedger_RebuiltFromTheRows(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_drift", "plus")
	r.bill(t, acct, 30)
	r.report(t)
	// Damage one counter shard behind Ferry's back.
	label := r.cycle(t, acct.ID)
	_, rows, err := r.MeterAPI().Usage.ReadRows(context.Background(), acct.ID, plans.FeatureEvents, label)
	if err != nil {
		t.Fatal(err)
	}
	var shardSK string
	for _, row := range rows {
		if sk := usage.RowSK(row); strings.HasPrefix(sk, "shard#") && dynamo.Int(row, "used") > 0 {
			shardSK = sk
			break
		}
	}
	_, err = r.Env.Clients.DynamoDB.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(r.Env.Names.Table(resources.TableUsage)),
		Key:                       map[string]types.AttributeValue{"pk": dynamo.S(usage.PartitionKey(acct.ID, plans.FeatureEvents, label)), "sk": dynamo.S(shardSK)},
		UpdateExpression:          aws.String("ADD #used :n"),
		ExpressionAttributeNames:  map[string]string{"#used": "used"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": dynamo.N(7)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if tot, _ := r.MeterAPI().Usage.Read(context.Background(), acct.ID, plans.FeatureEvents, label); tot.Used != 37 {
		t.Fatalf("damaged counters read %d", tot.Used)
	}
	res, err := r.reconcile(t, acct.ID)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Rebuilt != 1 || val(res.Ledger) != "30" || val(res.Counters) != "30" {
		t.Errorf("result: %+v", res)
	}
	for _, p := range []string{report.ProviderKinde, report.ProviderStripe} {
		if c := check(t, res, p); c.Verdict != reconcile.Match {
			t.Errorf("%s: %+v", p, c)
		}
	}
	if got := r.Counter.Get(metrics.CountersRebuilt); got != 1 {
		t.Errorf("CountersRebuilt = %d", got)
	}
	if tot, _ := r.MeterAPI().Usage.Read(context.Background(), acct.ID, plans.FeatureEvents, label); tot.Used != 30 {
		t.Errorf("counters read %d after the rebuild", tot.Used)
	}
}

// A report still in the outbox is sent before the meter is read, so a delta on its way is not
// taken for under-billing (which a repair on top of the delta would turn into double billing).
func TestReconcile_PendingReport_SentBeforeTheMeterIsRead(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_pending", "plus")
	r.bill(t, acct, 11)
	if _, err := r.MeterAPI().Reporter.Run(context.Background()); err != nil { // no drain
		t.Fatal(err)
	}
	res, err := r.reconcile(t, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := check(t, res, report.ProviderStripe); c.Verdict != reconcile.Match || val(c.Meter) != "11" {
		t.Errorf("check: %+v", c)
	}
	if _, err := r.MeterAPI().Drainer.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.stand.Stripe.Total("ferry_events", "cus_acct_pending"); got != 11 {
		t.Errorf("Stripe holds %d; want 11", got)
	}
}

// A report that was dead-lettered never reached the meter: the reconciler repairs the meter
// with a row keyed by its evidence (the DEAD row itself is never sent again).
func TestReconcile_DeadReport_RepairedUnderAnEvidenceKey(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_dead", "plus")
	r.bill(t, acct, 9)
	faults := make([]standin.Fault, outbox.MaxAttempts)
	for i := range faults {
		faults[i] = standin.Fail
	}
	r.stand.Stripe.FailNext(standin.EndpointMeterEvents, faults...)
	r.report(t)
	for range outbox.MaxAttempts - 1 {
		r.Clock.Advance(outbox.BackoffCap)
		if _, err := r.MeterAPI().Drainer.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Counter.Get(metrics.OutboxDead); got != 1 {
		t.Fatalf("OutboxDead = %d; want 1", got)
	}
	res, err := r.reconcile(t, acct.ID)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	c := check(t, res, report.ProviderStripe)
	if c.Verdict != reconcile.UnderBilled || c.Sent != 9 || val(c.Meter) != "0" || !c.Confirmed || !strings.Contains(c.Cause, "The last report failed") {
		t.Errorf("check: %+v", c)
	}
	if got := r.stand.Stripe.Total("ferry_events", "cus_acct_dead"); got != 9 {
		t.Errorf("Stripe holds %d; want 9", got)
	}
}

// A repair whose read-back does not equal the ledger is not confirmed: the run reports an error.
func TestReconcile_RepairNotReadBack_RunFails(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_lag", "plus")
	r.bill(t, acct, 4)
	r.report(t)
	r.bill(t, acct, 3)
	r.stand.Stripe.SetLag(time.Hour) // summaries leave out what arrived in the last hour
	res, err := r.reconcile(t, acct.ID)
	if !errors.Is(err, reconcile.ErrUnconfirmed) {
		t.Fatalf("run error %v; want ErrUnconfirmed", err)
	}
	c := check(t, res, report.ProviderStripe)
	if c.Confirmed || c.Error == "" {
		t.Errorf("check: %+v", c)
	}
	if got := r.Counter.Get(metrics.ReconcileUnconfirmed); got != 1 {
		t.Errorf("ReconcileUnconfirmed = %d", got)
	}
}

// The nightly run visits every account in pages; accounts linked to no provider have nothing
// to prove.
func TestReconcile_RunAllVisitsEveryAccount(t *testing.T) {
	r := newRig(t)
	for _, id := range []string{"acct_a", "acct_b", "acct_c"} {
		r.bill(t, r.linked(t, id, "plus"), 2)
	}
	r.CreateAccount(t, "acct_unlinked", "plus", nil)
	r.report(t)
	var seen []string
	done, err := r.MeterAPI().Reconciler.RunAll(context.Background(), time.Now().Add(time.Hour), func(p reconcile.Page) {
		for _, res := range p.Results {
			if res.Feature == plans.FeatureEvents && res.Cycle == r.cycle(t, res.Account) {
				seen = append(seen, res.Account)
			}
		}
	})
	if err != nil || !done {
		t.Fatalf("done %v, %v", done, err)
	}
	if strings.Join(seen, ",") != "acct_a,acct_b,acct_c" {
		t.Errorf("reconciled %v", seen)
	}
}

// The seam for "the provider's meter changed": a mark source's marks are reconciled soon and
// marked done; the reporter's own requests (the ledger below what Stripe was sent) use it.
func TestReconcile_RunMarked_ReconcilesAndMarksDone(t *testing.T) {
	r := newRig(t)
	acct := r.linked(t, "acct_marked", "plus")
	r.bill(t, acct, 6)
	r.report(t)
	if err := r.MeterAPI().Requests.Request(context.Background(), acct.ID, r.cycle(t, acct.ID), "a test"); err != nil {
		t.Fatal(err)
	}
	results, err := r.MeterAPI().Reconciler.RunMarked(context.Background())
	if err != nil || len(results) == 0 {
		t.Fatalf("%d results, %v", len(results), err)
	}
	pending, err := r.MeterAPI().Requests.Pending(context.Background(), 10)
	if err != nil || len(pending) != 0 {
		t.Errorf("still pending: %+v, %v", pending, err)
	}
	// Another source, as the webhook inbox will be, is read through the same seam.
	src := &fakeSource{marks: []reconcile.Mark{{Account: acct.ID, Cycle: r.cycle(t, acct.ID), ID: "evt_1", Reason: "customer.meter_usage_updated"}}}
	r.MeterAPI().Reconciler.Marks = reconcile.Sources{r.MeterAPI().Requests, src}
	if _, err := r.MeterAPI().Reconciler.RunMarked(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(src.done) != 1 || src.done[0] != "evt_1" {
		t.Errorf("done %v", src.done)
	}
}

type fakeSource struct {
	marks []reconcile.Mark
	done  []string
}

func (f *fakeSource) Pending(context.Context, int) ([]reconcile.Mark, error) {
	out := f.marks
	f.marks = nil
	return out, nil
}

func (f *fakeSource) Done(_ context.Context, m reconcile.Mark) error {
	f.done = append(f.done, m.ID)
	return nil
}

// correct appends a correction through the operator route.
func correct(t *testing.T, r *rig, account string, units int64) {
	t.Helper()
	resp := r.Do(t, "POST", "/v1/usage/corrections", apptest.AdminKey,
		map[string]any{"account": account, "feature": "events", "units": units, "reason": "a test correction"},
		"Idempotency-Key", "corr-"+account+"-"+time.Now().Format("150405.000000000"))
	if resp.Status != 201 {
		t.Fatalf("correction: %d %s", resp.Status, resp.Body)
	}
}
