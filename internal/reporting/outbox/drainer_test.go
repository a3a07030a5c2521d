package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	standin "github.com/ferrymeter/ferry/internal/devkit/standin/stripe"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// errCrash stands for the process dying at a hook point.
var errCrash = errors.New("killed here")

type rig struct {
	h     *apptest.Harness
	stand *apptest.StandIns
	d     *outbox.Drainer
}

func newRig(t *testing.T, dynamoOpts ...func(*dynamodb.Options)) *rig {
	t.Helper()
	stand := apptest.NewStandIns(t, plans.Default())
	h := apptest.New(t, apptest.Options{Settings: stand.Settings, DynamoDB: dynamoOpts})
	stand.Stripe.SetClock(h.Clock.Now)
	return &rig{h: h, stand: stand, d: h.MeterAPI().Drainer}
}

// other is a second drainer on the same outbox, as a second Lambda instance would be.
func (r *rig) other() *outbox.Drainer {
	d := r.d
	return &outbox.Drainer{Store: d.Store, Sender: d.Sender, Review: d.Review, Metrics: d.Metrics, Log: d.Log, Now: d.Now, Owner: "drainer-two"}
}

// row writes a report row as the reporter does: total 7 for a meter that held 0.
func (r *rig) row(t *testing.T) outbox.Row {
	t.Helper()
	now := r.h.Clock.Now()
	c := now.AddDate(0, 1, 0)
	row := outbox.Row{
		Account: "acct_1", Feature: "events", Cycle: now.Format("2006-01"), Key: outbox.ReportKey(7, 0), Kind: outbox.KindReport,
		Total: 7, Delta: 7, EventName: "ferry_events", MeterID: "mtr_ferry_events", Customer: "cus_1",
		TimestampMs: now.UnixMilli(), CycleEndMs: c.UnixMilli(), CreatedAtMs: now.UnixMilli(), UpdatedAtMs: now.UnixMilli(),
	}
	item, err := r.h.MeterAPI().Outbox.InsertItem(row)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.h.Env.Clients.DynamoDB.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{item},
	}); err != nil {
		t.Fatal(err)
	}
	return row
}

func (r *rig) get(t *testing.T, row outbox.Row) outbox.Row {
	t.Helper()
	got, err := r.h.MeterAPI().Outbox.Get(context.Background(), outbox.RefOf(row))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (r *rig) run(t *testing.T, d *outbox.Drainer) outbox.Result {
	t.Helper()
	res, err := d.Run(context.Background())
	if err != nil && !errors.Is(err, errCrash) {
		t.Fatalf("drain: %v", err)
	}
	return res
}

// wantStripe checks what Stripe received: requests, and the meter's total for the row's customer.
func (r *rig) wantStripe(t *testing.T, requests int, total int64) {
	t.Helper()
	c := r.stand.Stripe.Counts()
	if c.MeterEventRequests != requests || c.EventsRecorded != 1 && total > 0 {
		t.Errorf("Stripe counts %+v; want %d requests", c, requests)
	}
	if got := r.stand.Stripe.Total("ferry_events", "cus_1"); got != total {
		t.Errorf("Stripe's meter holds %d; want %d", got, total)
	}
}

func TestDrainer_SendsTheRowUnderItsIdentifierOnce(t *testing.T) {
	r := newRig(t)
	row := r.row(t)
	if res := r.run(t, r.d); res.Sent != 1 {
		t.Fatalf("result %+v", res)
	}
	if got := r.get(t, row); got.Status != outbox.Sent || got.SentAtMs == 0 {
		t.Errorf("row %+v", got)
	}
	// A SENT row is never due again.
	r.h.Clock.Advance(time.Hour)
	if res := r.run(t, r.d); res.Due != 0 {
		t.Errorf("second run %+v", res)
	}
	r.wantStripe(t, 1, 7)
	if ev := r.stand.Stripe.Events(); len(ev) != 1 || ev[0].Identifier != row.Identifier() || ev[0].Identifier != "acct_1:events:"+row.Cycle+":7" {
		t.Errorf("Stripe events %+v", ev)
	}
}

// The drainer dies between its claim and the send: nothing reached Stripe, and no other drainer
// takes the row before the claim's deadline; after it, the row is sent once.
func TestDrainer_CrashAfterClaimBeforeSend_SentOnceAfterTheDeadline(t *testing.T) {
	r := newRig(t)
	row := r.row(t)
	r.d.Hook = func(_ context.Context, p outbox.Point, _ outbox.Row) error {
		if p == outbox.AfterClaim {
			return errCrash
		}
		return nil
	}
	r.run(t, r.d)
	r.wantStripe(t, 0, 0)
	if got := r.get(t, row); got.Status != outbox.Sending || got.Attempts != 1 {
		t.Fatalf("row %+v", got)
	}
	other := r.other()
	r.h.Clock.Advance(outbox.ClaimFor - time.Second)
	if res := r.run(t, other); res.Sent != 0 {
		t.Errorf("a live claim was taken over: %+v", res)
	}
	// Asked for the row by name (as the reconciler does, not through the due index), a drainer
	// still leaves a live claim alone.
	if out, err := other.Drain(context.Background(), outbox.RefOf(row)); err != nil || out != outbox.OutcomeSkipped {
		t.Errorf("a live claim was taken over by name: %s, %v", out, err)
	}
	r.h.Clock.Advance(time.Second)
	if res := r.run(t, other); res.Sent != 1 {
		t.Errorf("the lapsed claim was not taken over: %+v", res)
	}
	r.wantStripe(t, 1, 7)
}

// The drainer dies after Stripe accepted the event but before the row says SENT: the row is sent
// again after the claim's deadline, under the same identifier, and Stripe counts it once.
func TestDrainer_CrashAfterSendBeforeMark_StripeSeesOneIdentifierTheMeterMovesOnce(t *testing.T) {
	r := newRig(t)
	row := r.row(t)
	r.d.Hook = func(_ context.Context, p outbox.Point, _ outbox.Row) error {
		if p == outbox.AfterSend {
			return errCrash
		}
		return nil
	}
	r.run(t, r.d)
	r.d.Hook = nil
	r.h.Clock.Advance(outbox.ClaimFor)
	if res := r.run(t, r.d); res.Sent != 1 {
		t.Fatalf("result %+v", res)
	}
	c := r.stand.Stripe.Counts()
	if c.MeterEventRequests != 2 || c.EventsRecorded != 1 || c.Duplicates != 1 {
		t.Errorf("Stripe counts %+v; want 2 requests, 1 event, 1 duplicate", c)
	}
	if got := r.stand.Stripe.Total("ferry_events", "cus_1"); got != 7 {
		t.Errorf("Stripe's meter holds %d; want 7", got)
	}
	if got := r.get(t, row); got.Status != outbox.Sent {
		t.Errorf("row %+v", got)
	}
}

// Two drainers read the same due row at once: only one claim is written, and the row is sent
// once. (Without the claim's revision condition, both claims land and both send.)
func TestDrainer_TwoDrainers_OnlyOneSends(t *testing.T) {
	r := newRig(t)
	row := r.row(t)
	other := r.other()
	var otherOut outbox.Outcome
	r.d.Hook = func(ctx context.Context, p outbox.Point, _ outbox.Row) error {
		if p == outbox.BeforeClaim && otherOut == "" {
			// The other drainer read the same row, and now claims and sends it first.
			out, err := other.Drain(ctx, outbox.RefOf(row))
			if err != nil {
				return err
			}
			otherOut = out
		}
		return nil
	}
	out, err := r.d.Drain(context.Background(), outbox.RefOf(row))
	if err != nil {
		t.Fatal(err)
	}
	if otherOut != outbox.OutcomeSent || out != outbox.OutcomeSkipped {
		t.Errorf("outcomes: other %s, this %s", otherOut, out)
	}
	r.wantStripe(t, 1, 7)
}

// A drainer that was paused past its claim's margin does not send: the row is left to the
// drainer that takes the claim over.
func TestDrainer_ClaimTooCloseToItsDeadline_DoesNotSend(t *testing.T) {
	r := newRig(t)
	row := r.row(t)
	r.d.Hook = func(_ context.Context, p outbox.Point, _ outbox.Row) error {
		if p == outbox.AfterClaim {
			r.h.Clock.Advance(outbox.ClaimFor - outbox.SendMargin)
		}
		return nil
	}
	out, err := r.d.Drain(context.Background(), outbox.RefOf(row))
	if err != nil || out != outbox.OutcomeLapsed {
		t.Fatalf("outcome %s, %v", out, err)
	}
	r.wantStripe(t, 0, 0)
}

// Failures back off exponentially, and after the last try the row is DEAD, counted by the
// alarmed metric, and never sent again.
func TestDrainer_BacksOffThenDeadLetters(t *testing.T) {
	r := newRig(t)
	row := r.row(t)
	faults := make([]standin.Fault, outbox.MaxAttempts+1)
	for i := range faults {
		faults[i] = standin.Fail
	}
	r.stand.Stripe.FailNext(standin.EndpointMeterEvents, faults...)
	for attempt := 1; attempt <= outbox.MaxAttempts; attempt++ {
		res := r.run(t, r.d)
		got := r.get(t, row)
		if attempt < outbox.MaxAttempts {
			if res.Retrying != 1 || got.Status != outbox.Pending || got.Attempts != attempt {
				t.Fatalf("attempt %d: %+v %+v", attempt, res, got)
			}
			// Not before its backoff, whether found through the due index or asked for by name.
			r.h.Clock.Advance(outbox.Backoff(attempt) - time.Second)
			if res := r.run(t, r.d); res.Due != 0 {
				t.Fatalf("attempt %d: due before its backoff: %+v", attempt, res)
			}
			if out, err := r.d.Drain(context.Background(), outbox.RefOf(row)); err != nil || out != outbox.OutcomeSkipped {
				t.Fatalf("attempt %d: sent by name before its backoff: %s, %v", attempt, out, err)
			}
			r.h.Clock.Advance(time.Second)
			continue
		}
		if res.Dead != 1 || got.Status != outbox.Dead || got.LastError == "" {
			t.Fatalf("last attempt: %+v %+v", res, got)
		}
	}
	if got := r.h.Counter.Get(metrics.OutboxDead); got != 1 {
		t.Errorf("OutboxDead = %d", got)
	}
	r.h.Clock.Advance(24 * time.Hour)
	if res := r.run(t, r.d); res.Due != 0 {
		t.Errorf("a DEAD row came due: %+v", res)
	}
	if got := r.stand.Stripe.Counts().MeterEventRequests; got != outbox.MaxAttempts {
		t.Errorf("%d sends; want %d", got, outbox.MaxAttempts)
	}
}

// The write that makes a row DEAD commits but its answer is lost (the drainer dies with it): the
// row is DEAD, which no drainer looks at again, so the alarm must have been raised before that
// write, not after it.
func TestDrainer_DeadWriteWhoseAnswerIsLost_StillAlarms(t *testing.T) {
	faults := instrument.NewFaults(nil)
	r := newRig(t, faults.Option)
	row := r.row(t)
	fails := make([]standin.Fault, outbox.MaxAttempts)
	for i := range fails {
		fails[i] = standin.Fail
	}
	r.stand.Stripe.FailNext(standin.EndpointMeterEvents, fails...)
	for attempt := 1; attempt < outbox.MaxAttempts; attempt++ {
		r.run(t, r.d)
		r.h.Clock.Advance(outbox.Backoff(attempt))
	}
	// The last attempt writes twice: the claim, then the DEAD row.
	faults.SetPlan(instrument.CrashAfterWrite(2))
	if _, err := r.d.Run(context.Background()); !errors.Is(err, instrument.ErrInjectedCrash) {
		t.Fatalf("the last attempt: %v; want the injected crash (fired %v)", err, faults.Fired())
	}
	if got := r.get(t, row); got.Status != outbox.Dead {
		t.Fatalf("row %+v; want it DEAD (the write committed)", got)
	}
	if got := r.h.Counter.Get(metrics.OutboxDead); got != 1 {
		t.Errorf("OutboxDead = %d; a DEAD row must raise its alarm even when the write's answer is lost", got)
	}
}

// A timeout after the event landed is a failure the drainer retries under the same identifier:
// Stripe counts the event once.
func TestDrainer_TimeoutAfterTheEventLanded_RetriedAndCountedOnce(t *testing.T) {
	r := newRig(t)
	r.stand.Stripe.SetHang(time.Second)
	row := r.row(t)
	r.stand.Stripe.FailNext(standin.EndpointMeterEvents, standin.TimeoutAfterWrite)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if out, err := r.d.Drain(ctx, outbox.RefOf(row)); err != nil || out != outbox.OutcomeRetrying {
		t.Fatalf("outcome %s, %v", out, err)
	}
	r.h.Clock.Advance(outbox.Backoff(1))
	if res := r.run(t, r.d); res.Sent != 1 {
		t.Fatalf("retry %+v", res)
	}
	c := r.stand.Stripe.Counts()
	if c.MeterEventRequests != 2 || c.EventsRecorded != 1 {
		t.Errorf("Stripe counts %+v", c)
	}
	if got := r.stand.Stripe.Total("ferry_events", "cus_1"); got != 7 {
		t.Errorf("Stripe's meter holds %d", got)
	}
}

// A row still unsent an hour after its cycle closed is not sent into a period whose invoice is
// final: it goes to the review list.
func TestDrainer_RowAfterItsCycleClosed_ListedNotSent(t *testing.T) {
	r := newRig(t)
	row := r.row(t)
	r.h.Clock.Set(time.UnixMilli(row.CycleEndMs).Add(outbox.LateSendGrace))
	if res := r.run(t, r.d); res.Review != 1 {
		t.Fatalf("result %+v", res)
	}
	r.wantStripe(t, 0, 0)
	entries, err := r.h.MeterAPI().Review.List(context.Background())
	if err != nil || len(entries) != 1 {
		t.Errorf("review %+v, %v", entries, err)
	}
}

// A row's key is written once: a second row with the same key (the same identifier) is refused,
// and the first stays as it is.
func TestOutbox_InsertRefusesAnExistingKey(t *testing.T) {
	r := newRig(t)
	row := r.row(t)
	r.run(t, r.d)
	item, err := r.h.MeterAPI().Outbox.InsertItem(row)
	if err != nil {
		t.Fatal(err)
	}
	err = r.h.MeterAPI().State.Commit(context.Background(), item)
	if err == nil {
		t.Fatal("a second row with the same key was written")
	}
	if got := r.get(t, row); got.Status != outbox.Sent {
		t.Errorf("the sent row became %s", got.Status)
	}
	if res := r.run(t, r.d); res.Due != 0 {
		t.Errorf("the row came due again: %+v", res)
	}
}
