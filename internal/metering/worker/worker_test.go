package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var errKilled = errors.New("killed by the test")

// message builds the queue body ingest would send for one event.
func message(t testing.TB, h *apptest.Harness, accountID, eventID string, data map[string]any) string {
	t.Helper()
	ce := map[string]any{"specversion": "1.0", "id": eventID, "source": "/tests", "type": "api.call"}
	if data != nil {
		ce["data"] = data
	}
	raw, _ := json.Marshal(ce)
	ev, err := event.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(event.Envelope{AccountID: accountID, EventID: eventID, ReceivedAtMs: h.Clock.Now().UnixMilli(), Event: ev.Canonical})
	return string(body)
}

func entry(t testing.TB, h *apptest.Harness, accountID, eventID string) ledger.Entry {
	t.Helper()
	e, err := h.Worker().Ledger.Get(context.Background(), accountID, eventID)
	if err != nil {
		t.Fatalf("ledger %s: %v", eventID, err)
	}
	return e
}

// used is the account's events usage in the current cycle: the meter.
func used(t testing.TB, h *apptest.Harness, accountID string) int64 {
	t.Helper()
	tot, err := h.Worker().Usage.Read(context.Background(), accountID, plans.FeatureEvents, "2026-11")
	if err != nil {
		t.Fatal(err)
	}
	return tot.Used
}

// assertStoredOnce checks that an event is INSERTED, billed, archived byte for byte and has
// exactly one analytics row.
func assertStoredOnce(t testing.TB, h *apptest.Harness, accountID, eventID, body string) {
	t.Helper()
	e := entry(t, h, accountID, eventID)
	if e.Status != ledger.Inserted || !e.Billed() {
		t.Errorf("%s: status %s billed %v; want INSERTED and billed", eventID, e.Status, e.Billed())
	}
	want := payloadOf(t, body, eventID)
	obj, err := h.Worker().Archive.Read(context.Background(), e.ArchiveLocation())
	if err != nil {
		t.Fatalf("%s: archive: %v", eventID, err)
	}
	if !bytes.Equal(obj, want) {
		t.Errorf("%s: archived bytes differ from the queued event:\n%s\n%s", eventID, obj, want)
	}
	assertOneRow(t, h, e)
}

// assertOneRow checks that an event has exactly one analytics row: where its entry says (its
// unit's rows item, or a row of its own), and no row of its own besides one in its unit's item.
func assertOneRow(t testing.TB, h *apptest.Harness, e ledger.Entry) {
	t.Helper()
	rows := h.Worker().Analytics
	present, err := rows.Exists(context.Background(), e.RowRef())
	if err != nil || !present {
		t.Errorf("%s: analytics row (in its unit's item: %v) present=%v err=%v", e.EventID, e.RowInUnit, present, err)
	}
	if e.RowInUnit {
		if own, err := rows.Exists(context.Background(), e.RowRef().Own()); err != nil || own {
			t.Errorf("%s: its row is in unit %s's rows item and it has one of its own too (%v, %v)", e.EventID, e.Batch, own, err)
		}
	}
}

func process(t testing.TB, h *apptest.Harness, body string) (worker.Result, error) {
	t.Helper()
	return h.Worker().Worker.Process(context.Background(), body)
}

// killAt makes the worker die at one point of the pipeline.
func killAt(p worker.Point) worker.Hook {
	return func(_ context.Context, at worker.Point) error {
		if at == p {
			return fmt.Errorf("%s: %w", at, errKilled)
		}
		return nil
	}
}

// One test per crash window between two durable writes of a unit: kill the worker there,
// redeliver, and count the money. The meter must move exactly once and storage must end
// complete. The claim is the billing and carries the analytics rows (one transaction), and the
// unit's archive object is written before it, so a crash before the claim leaves nothing claimed
// and a crash after it finds the events billed with their rows: the redelivery only marks them.
// A message of one event (a unit of one, read before it archives) and a packed message of two
// run every window.
func TestWorker_CrashWindows_BillOnceAndStoreCompletely(t *testing.T) {
	windows := []struct {
		name  string
		point worker.Point
		// after the crash, before redelivery
		wantClaimed bool
		wantDone    bool
		// the scenario the redelivery picks
		scenario string
	}{
		{"CrashBeforeArchive", worker.Point{Before: true, Stage: ledger.StageArchive}, false, false,
			"claim won, billed: store then mark"},
		{"CrashAfterArchiveBeforeClaim", worker.Point{Stage: ledger.StageArchive}, false, false,
			"claim won, billed: store then mark"},
		// The seed's "recovers inserting events with accepted billing without consuming usage
		// again": the claim billed them and stored their rows; nothing bills them again.
		{"CrashAfterClaim", worker.Point{Stage: worker.StageClaim}, true, false,
			"INSERTING, analytics row present: mark only"},
		{"CrashBeforeMark", worker.Point{Before: true, Stage: ledger.StageMark}, true, false,
			"INSERTING, analytics row present: mark only"},
		{"CrashAfterMarkBeforeTheAck", worker.Point{Stage: ledger.StageMark}, true, true,
			"INSERTED: ack"},
	}
	h := apptest.New(t)
	h.CreateAccount(t, "acct_crash", "free", map[string]any{"events": 100})
	for _, m := range modes {
		for i, w := range windows {
			t.Run(m.name+"/"+w.name, func(t *testing.T) {
				id := fmt.Sprintf("evt_%s_%d", m.name, i)
				ids := m.ids(id)
				n := int64(len(ids))
				body := m.body(t, h, "acct_crash", id, map[string]any{"route": "/x"})
				before := used(t, h, "acct_crash")

				h.Worker().Worker.Hook = killAt(w.point)
				_, err := process(t, h, body)
				h.Worker().Worker.Hook = nil
				if !errors.Is(err, errKilled) {
					t.Fatalf("the worker was not killed at %s: %v", w.point, err)
				}
				for _, id := range ids {
					if !w.wantClaimed {
						if _, err := h.Worker().Ledger.Get(context.Background(), "acct_crash", id); !errors.Is(err, ledger.ErrNotFound) {
							t.Fatalf("after the crash before the claim: %s read %v, want no entry", id, err)
						}
						continue
					}
					e := entry(t, h, "acct_crash", id)
					if want := map[bool]ledger.Status{false: ledger.Inserting, true: ledger.Inserted}[w.wantDone]; e.Status != want || !e.Billed() {
						t.Fatalf("after the crash: %s status %s billed %v; want %s and billed", id, e.Status, e.Billed(), want)
					}
					if row, _ := h.Worker().Analytics.Exists(context.Background(), e.RowRef()); !row || !e.RowInUnit {
						t.Fatalf("after the crash: %s row present %v (in its unit's item %v); the claim wrote it", id, row, e.RowInUnit)
					}
				}
				if got := used(t, h, "acct_crash") - before; got != map[bool]int64{true: n, false: 0}[w.wantClaimed] {
					t.Fatalf("after the crash the meter moved %d", got)
				}

				res, err := process(t, h, body) // the redelivery
				if err != nil {
					t.Fatalf("redelivery: %v", err)
				}
				if res.Scenario != w.scenario {
					t.Errorf("redelivery scenario %q, want %q", res.Scenario, w.scenario)
				}
				if got := used(t, h, "acct_crash") - before; got != n {
					t.Errorf("the meter moved %d for %d events", got, n)
				}
				for _, id := range ids {
					assertStoredOnce(t, h, "acct_crash", id, body)
				}

				// A further redelivery acks and moves nothing.
				if res, err := process(t, h, body); err != nil || res.Scenario != "INSERTED: ack" {
					t.Errorf("third delivery: %q %v", res.Scenario, err)
				}
				if got := used(t, h, "acct_crash") - before; got != n {
					t.Errorf("the meter moved %d after a redelivery of INSERTED events", got)
				}
			})
		}
	}
}

// The worker dies right after each DynamoDB write it makes (the write commits, the answer is
// lost), or right before it (the write never happens), for every write of a unit — inside the
// claim transaction, at the done record — every tier and both shapes of message. A redelivery
// must then finish the events with the meter moved exactly once. If billing were two writes
// instead of one transaction, the crash between them would bill twice here.
func TestWorker_CrashAroundEveryWrite_BillsExactlyOnce(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { crashAroundEveryWrite(t, m) })
	}
}

func crashAroundEveryWrite(t *testing.T, m mode) {
	faults := instrument.NewFaults(nil)
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	for _, tier := range []struct{ plan, account string }{
		{"free", "acct_free"}, {"plus", "acct_plus"}, {"internal", "acct_internal"},
	} {
		h.CreateAccount(t, tier.account, tier.plan, nil)
		// Count the writes of one clean run (after the account's first usage is recorded).
		warm := m.body(t, h, tier.account, "warm", nil)
		if _, err := process(t, h, warm); err != nil {
			t.Fatal(err)
		}
		faults.SetPlan(nil)
		if _, err := process(t, h, m.body(t, h, tier.account, "probe", nil)); err != nil {
			t.Fatal(err)
		}
		writes := faults.Writes()
		// The claim (with the rows) and the done record.
		if writes < 2 {
			t.Fatalf("%s: a clean run made %d writes", tier.plan, writes)
		}
		per := int64(len(m.ids("x")))
		wantUsed := 2 * per
		for n := 1; n <= writes; n++ {
			for _, kind := range []instrument.Fault{instrument.CrashAfter, instrument.CrashBefore} {
				id := fmt.Sprintf("evt_%d_%d", n, kind)
				body := m.body(t, h, tier.account, id, map[string]any{"n": n})
				faults.SetPlan(func(_ string, _, write int) instrument.Fault {
					if write == n {
						return kind
					}
					return instrument.NoFault
				})
				_, err := process(t, h, body)
				fired := faults.Fired()
				faults.SetPlan(nil)
				if len(fired) != 1 || err == nil {
					t.Fatalf("%s write %d: fault %v did not stop the worker (err %v)", tier.plan, n, fired, err)
				}
				if _, err := process(t, h, body); err != nil {
					t.Fatalf("%s: redelivery after %v: %v", tier.plan, fired, err)
				}
				for _, id := range m.ids(id) {
					assertStoredOnce(t, h, tier.account, id, body)
				}
				wantUsed += per
				if tier.plan == "internal" {
					continue // internal traffic consumes nothing
				}
				if got := used(t, h, tier.account); got != wantUsed {
					t.Fatalf("%s after %v: meter %d, want %d", tier.plan, fired, got, wantUsed)
				}
			}
		}
		if tier.plan == "internal" {
			if got := used(t, h, tier.account); got != 0 {
				t.Errorf("internal usage moved the meter: %d", got)
			}
		}
	}
}

// 50 events, each alone in an invocation of its own, race for a cap of 40: exactly 40 are
// billed, 10 REJECTED, and the meter reads 40.
func TestWorker_LimitRace_FiftyEventsAgainstFortyBillsExactlyForty(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_race", "free", map[string]any{"events": 40})
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		body := message(t, h, "acct_race", fmt.Sprintf("evt_%02d", i), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.Worker().Worker.Process(context.Background(), body); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("process: %v", err)
	}
	counts := map[ledger.Status]int{}
	for i := range 50 {
		e := entry(t, h, "acct_race", fmt.Sprintf("evt_%02d", i))
		counts[e.Status]++
		if e.Status == ledger.Rejected && (e.Billed() || e.Reason == "") {
			t.Errorf("%s: rejected with checkpoint %v, reason %q", e.EventID, e.Billed(), e.Reason)
		}
	}
	if counts[ledger.Inserted] != 40 || counts[ledger.Rejected] != 10 {
		t.Errorf("statuses %v; want 40 INSERTED and 10 REJECTED", counts)
	}
	if got := used(t, h, "acct_race"); got != 40 {
		t.Errorf("meter %d, want 40", got)
	}
}

// A redelivery of a finished event (its unit's read finds it so) acks without a write, and
// changes nothing.
func TestWorker_RedeliveryOfFinishedEvents_AcksWithoutWriting(t *testing.T) {
	faults := instrument.NewFaults(nil)
	schema := analytics.Schema{MaxDimensions: 1, MaxValueBytes: 1024, MaxDimensionBytes: 1024}
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}, Schema: &schema})
	h.CreateAccount(t, "acct_done", "free", map[string]any{"events": 1})
	inserted := message(t, h, "acct_done", "evt_inserted", nil)
	rejected := message(t, h, "acct_done", "evt_rejected", nil)
	h.CreateAccount(t, "acct_poison", "plus", nil)
	poison := message(t, h, "acct_poison", "evt_poison", map[string]any{"a": 1, "b": 2})
	for _, body := range []string{inserted, rejected} {
		if _, err := process(t, h, body); err != nil {
			t.Fatal(err)
		}
	}
	for range worker.DefaultMaxQuarantines {
		_, _ = process(t, h, poison)
	}
	for _, tc := range []struct {
		body, account, id string
		status            ledger.Status
	}{
		{inserted, "acct_done", "evt_inserted", ledger.Inserted},
		{rejected, "acct_done", "evt_rejected", ledger.Rejected},
		{poison, "acct_poison", "evt_poison", ledger.Uninsertable},
	} {
		before := entry(t, h, tc.account, tc.id)
		if before.Status != tc.status {
			t.Fatalf("%s is %s, want %s", tc.id, before.Status, tc.status)
		}
		meter := used(t, h, tc.account)
		faults.SetPlan(nil)
		res, err := process(t, h, tc.body)
		if err != nil || res.Final != tc.status {
			t.Errorf("redelivery of %s: %+v %v", tc.id, res, err)
		}
		if w := faults.Writes(); w != 0 {
			t.Errorf("redelivery of %s made %d write calls; want none", tc.id, w)
		}
		if after := entry(t, h, tc.account, tc.id); !reflect.DeepEqual(after, before) {
			t.Errorf("redelivery changed %s:\n%+v\n%+v", tc.id, before, after)
		}
		if used(t, h, tc.account) != meter {
			t.Errorf("redelivery of %s moved the meter", tc.id)
		}
	}
}

func TestWorker_Tiers(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_free", "free", nil)
	h.CreateAccount(t, "acct_plus", "plus", nil)
	h.CreateAccount(t, "acct_internal", "internal", nil)
	key := h.CreateAccount(t, "acct_lapsed", "plus", nil)
	_ = key
	if r := h.Do(t, "PATCH", "/v1/accounts/acct_lapsed", apptest.AdminKey, map[string]any{"status": "inactive"}); r.Status != 200 {
		t.Fatalf("deactivate: %d %s", r.Status, r.Body)
	}
	for i := range 3 {
		for _, acct := range []string{"acct_free", "acct_plus", "acct_internal", "acct_lapsed", "acct_unknown"} {
			if _, err := process(t, h, message(t, h, acct, fmt.Sprintf("evt_%d", i), nil)); err != nil {
				t.Fatalf("%s: %v", acct, err)
			}
		}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		account string
		status  ledger.Status
		tier    plans.Tier
		used    int64
		shards  bool
	}{
		{"acct_free", ledger.Inserted, plans.Capped, 3, false},
		{"acct_plus", ledger.Inserted, plans.Counted, 3, true},
		{"acct_internal", ledger.Inserted, plans.Internal, 0, false},
		{"acct_lapsed", ledger.Rejected, "", 0, false},
		// An account Ferry has no record of is billed on the default (free) plan.
		{"acct_unknown", ledger.Inserted, plans.Capped, 3, false},
	} {
		e := entry(t, h, tc.account, "evt_0")
		if e.Status != tc.status || e.Tier != tc.tier {
			t.Errorf("%s: status %s tier %q; want %s %q", tc.account, e.Status, e.Tier, tc.status, tc.tier)
		}
		tot, err := h.Worker().Usage.Read(ctx, tc.account, plans.FeatureEvents, "2026-11")
		if err != nil {
			t.Fatal(err)
		}
		if tot.Used != tc.used || (tot.Shards > 0) != tc.shards {
			t.Errorf("%s: usage %+v; want used %d, sharded %v", tc.account, tot, tc.used, tc.shards)
		}
	}
	if e := entry(t, h, "acct_lapsed", "evt_1"); e.Reason == "" {
		t.Error("an inactive account's event was rejected without a reason")
	}
	if got := h.Counter.Get(metrics.EventsRejected); got != 3 {
		t.Errorf("EventsRejected = %d, want 3", got)
	}
}

// An analytics row that cannot be written is quarantined, retried a bounded number of times, then
// ends UNINSERTABLE with a metric for the alarm. The event stays billed once and archived.
func TestWorker_PoisonRow_GoesUninsertableAfterBoundedQuarantines(t *testing.T) {
	schema := analytics.Schema{MaxDimensions: 2, MaxValueBytes: 1024, MaxDimensionBytes: 1024}
	h := apptest.New(t, apptest.Options{Schema: &schema})
	h.CreateAccount(t, "acct_p", "free", nil)
	body := message(t, h, "acct_p", "evt_drift", map[string]any{"a": 1, "b": 2, "c": 3})
	for attempt := 1; attempt <= worker.DefaultMaxQuarantines; attempt++ {
		res, err := process(t, h, body)
		e := entry(t, h, "acct_p", "evt_drift")
		if attempt < worker.DefaultMaxQuarantines {
			if err == nil || e.Status != ledger.Inserting || e.QuarantineCount != attempt {
				t.Fatalf("attempt %d: err %v, entry %+v", attempt, err, e)
			}
			continue
		}
		if err != nil || res.Final != ledger.Uninsertable || e.Status != ledger.Uninsertable {
			t.Fatalf("final attempt: %+v %v, entry %+v", res, err, e)
		}
		if e.Reason == "" || !e.Billed() {
			t.Errorf("UNINSERTABLE entry: reason %q billed %v", e.Reason, e.Billed())
		}
	}
	if got := used(t, h, "acct_p"); got != 1 {
		t.Errorf("meter %d after %d attempts, want 1", got, worker.DefaultMaxQuarantines)
	}
	if got := h.Counter.Get(metrics.EventsUninsertable); got != 1 {
		t.Errorf("EventsUninsertable = %d, want 1", got)
	}
	e := entry(t, h, "acct_p", "evt_drift")
	if _, err := h.Worker().Archive.Read(context.Background(), e.ArchiveLocation()); err != nil {
		t.Errorf("the payload of an UNINSERTABLE event is not archived: %v", err)
	}
}

// A message the worker cannot decode fails every time; the queue's redrive policy moves it to
// the DLQ after maxReceiveCount receives, where its alarm fires. Healthy messages of the same
// batches are deleted (partial batch response).
func TestEventSource_PoisonMessageReachesTheDLQ_HealthyOnesAreDeleted(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_q", "free", nil)
	ctx := context.Background()
	queue := h.Env.Names.QueueURL(resources.QueueEvents)
	send := func(body string) {
		if _, err := h.Env.Clients.SQS.SendMessage(ctx, sqsSend(queue, body)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"not":"an envelope"}`)
	send(message(t, h, "acct_q", "evt_ok", nil))
	def, _ := resources.QueueByLogical(resources.QueueEvents)
	// The poison message comes back once per visibility timeout; a slow emulator stretches the
	// laps, so the drain runs until the redrive has happened (bounded), not for a fixed time.
	dlqURL := h.Env.Names.QueueURL(def.DLQLogical())
	var dlq []string
	for deadline := time.Now().Add(2 * time.Minute); len(dlq) == 0 && time.Now().Before(deadline); {
		h.Drain(t, testVisibility)
		dlq = receiveAll(t, h, dlqURL)
	}
	if e := entry(t, h, "acct_q", "evt_ok"); e.Status != ledger.Inserted {
		t.Errorf("healthy message: %s", e.Status)
	}
	if len(dlq) != 1 || dlq[0] != `{"not":"an envelope"}` {
		t.Errorf("DLQ holds %q, want the poison message", dlq)
	}
	if got := h.Counter.Get(metrics.WorkerFailures); got != def.MaxReceiveCount {
		t.Errorf("WorkerFailures = %d, want %d (one per receive)", got, def.MaxReceiveCount)
	}
}

// A unit whose read or claim fails is retried whole: nothing of it is written, and the
// redelivery finishes it, billed once.
func TestWorker_ReadOrClaimFails_TheMessageIsRetried(t *testing.T) {
	faults := instrument.NewFaults(nil)
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	h.CreateAccount(t, "acct_s", "free", nil)
	if _, err := process(t, h, message(t, h, "acct_s", "warm", nil)); err != nil {
		t.Fatal(err)
	}
	for i, op := range []string{"BatchGetItem", "TransactWriteItems"} {
		t.Run(op+" fails", func(t *testing.T) {
			id := fmt.Sprintf("evt_%d", i)
			body := message(t, h, "acct_s", id, nil)
			faults.SetPlan(func(got string, _, _ int) instrument.Fault {
				if got == op {
					return instrument.CrashBefore
				}
				return instrument.NoFault
			})
			_, err := process(t, h, body)
			faults.SetPlan(nil)
			if err == nil {
				t.Fatal("the message was acked")
			}
			if _, err := h.Worker().Ledger.Get(context.Background(), "acct_s", id); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("after the failed %s: %v, want no entry", op, err)
			}
			if _, err := process(t, h, body); err != nil {
				t.Fatal(err)
			}
			assertStoredOnce(t, h, "acct_s", id, body)
			if got := used(t, h, "acct_s"); got != int64(2+i) {
				t.Errorf("meter %d, want %d", got, 2+i)
			}
		})
	}
}

// claimedAlone leaves id's entry as the per-event worker of an earlier release left it when it
// claimed the event and died before its billing transaction, at the instant now.
func claimedAlone(t testing.TB, h *apptest.Harness, accountID, id string, now int64) {
	t.Helper()
	err := testenv.PutClaimedAlone(context.Background(), h.Env.Clients.DynamoDB, h.Env.Names.Table(resources.TableLedger), testenv.ClaimedAlone{
		AccountID: accountID, EventID: id, Cycle: "2026-11", RowInsertedAtMs: now, ReceivedAtMs: now,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Upgrading from a release whose per-event worker claimed an event and died before billing it:
// the message comes back to this release's worker, whose unit takes the entry over — claims it
// in its transaction, checkpointed, over the old entry — and bills it exactly once. Its row is
// its own, at the instant the old claim fixed (where that release's worker, still running during
// the upgrade, would write it too), and its payload is in the unit's object. The worker dies in
// every window of the take-over; at a limit of one, an old entry past the limit is REJECTED.
func TestWorker_EntryClaimedAloneByAnEarlierRelease_TakenOverAndBilledOnce(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_old", "free", map[string]any{"events": 100})
	old := h.Clock.Now().Add(-time.Minute).UnixMilli()
	for i, point := range []*worker.Point{
		nil,
		{Stage: ledger.StageArchive},
		{Stage: worker.StageClaim},
		{Before: true, Stage: ledger.StageInsert},
		{Stage: ledger.StageInsert},
		{Before: true, Stage: ledger.StageMark},
	} {
		for _, m := range modes {
			name := m.name + "/clean"
			if point != nil {
				name = m.name + "/" + strings.ReplaceAll(point.String(), " ", "-")
			}
			t.Run(name, func(t *testing.T) {
				id := fmt.Sprintf("evt_old_%s_%d", m.name, i)
				claimedAlone(t, h, "acct_old", id, old)
				body := m.body(t, h, "acct_old", id, map[string]any{"k": "v"})
				before := used(t, h, "acct_old")
				if point != nil {
					h.Worker().Worker.Hook = killAt(*point)
					if _, err := process(t, h, body); !errors.Is(err, errKilled) {
						t.Fatalf("not killed at %s: %v", point, err)
					}
					h.Worker().Worker.Hook = nil
				}
				res, err := process(t, h, body)
				if err != nil {
					t.Fatal(err)
				}
				if point == nil && res.Events[id].Scenario != "claim won, billed: store then mark" {
					t.Errorf("the entry claimed alone re-entered at %q", res.Events[id].Scenario)
				}
				for _, each := range m.ids(id) {
					assertStoredOnce(t, h, "acct_old", each, body)
				}
				e := entry(t, h, "acct_old", id)
				if e.RowInsertedAtMs != old || e.CreatedAtMs != old || e.RowInUnit || e.Batch == "" || e.ArchiveKey == "" {
					t.Errorf("the entry taken over: %+v; want its row its own at %d, its payload in its unit's object", e, old)
				}
				if got := used(t, h, "acct_old") - before; got != int64(len(m.ids(id))) {
					t.Errorf("the meter moved %d for %d events", got, len(m.ids(id)))
				}
			})
		}
	}
	t.Run("past the limit", func(t *testing.T) {
		h.CreateAccount(t, "acct_full", "free", map[string]any{"events": 1})
		claimedAlone(t, h, "acct_full", "evt_a", old)
		claimedAlone(t, h, "acct_full", "evt_b", old)
		body := packed(t, h, "acct_full", nil, "evt_a", "evt_b")
		if _, err := process(t, h, body); err != nil {
			t.Fatal(err)
		}
		if a, b := entry(t, h, "acct_full", "evt_a"), entry(t, h, "acct_full", "evt_b"); a.Status != ledger.Inserted || b.Status != ledger.Rejected || b.Billed() || b.Reason == "" {
			t.Errorf("evt_a %s, evt_b %s billed %v reason %q; want the first INSERTED, the second REJECTED with its reason", a.Status, b.Status, b.Billed(), b.Reason)
		}
		if got := used(t, h, "acct_full"); got != 1 {
			t.Errorf("meter %d, want 1", got)
		}
	})
}

// A hand-written row (or a sink that reordered) in front of an entry claimed alone and never
// billed does not let the event skip billing: the unit takes the entry over and bills it, and its
// row, written at the same instant, is still the one row.
func TestWorker_RowPresentWithoutACheckpoint_BilledOnceOneRow(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_row", "free", nil)
	now := h.Clock.Now().UnixMilli()
	claimedAlone(t, h, "acct_row", "evt_row_first", now)
	body := message(t, h, "acct_row", "evt_row_first", map[string]any{"k": "v"})
	_, ev, _ := event.DecodeEnvelope(body)
	row, err := analytics.RowFor(analytics.DefaultSchema, ev, "acct_row", now, now, "2026-11", archive.Key("acct_row", "evt_row_first", now))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Worker().Analytics.Write(context.Background(), row); err != nil {
		t.Fatal(err)
	}
	res, err := process(t, h, body)
	if err != nil || !res.Billed {
		t.Fatalf("%+v %v", res, err)
	}
	assertStoredOnce(t, h, "acct_row", "evt_row_first", body)
	rows, err := h.Worker().Analytics.Rows(context.Background(), "acct_row", 0, analytics.MaxInstantMs)
	if err != nil || len(rows) != 1 {
		t.Errorf("%d analytics rows (%v); want the one", len(rows), err)
	}
	if got := used(t, h, "acct_row"); got != 1 {
		t.Errorf("meter %d, want 1", got)
	}
}

// An UNINSERTABLE event is re-driven from the archive once its cause is fixed: it is stored and
// marked INSERTED, and billed only the once it already was.
func TestRedrive_UninsertableEventIsStoredWithoutBillingAgain(t *testing.T) {
	strict := analytics.Schema{MaxDimensions: 1, MaxValueBytes: 1024, MaxDimensionBytes: 1024}
	h := apptest.New(t, apptest.Options{Schema: &strict})
	h.CreateAccount(t, "acct_rd", "free", nil)
	body := message(t, h, "acct_rd", "evt_wide", map[string]any{"a": 1, "b": 2})
	for range worker.DefaultMaxQuarantines {
		_, _ = process(t, h, body)
	}
	if e := entry(t, h, "acct_rd", "evt_wide"); e.Status != ledger.Uninsertable {
		t.Fatalf("status %s", e.Status)
	}
	h.Worker().Worker.Schema = analytics.DefaultSchema // the drift is fixed
	r := &worker.Redrive{Ledger: h.Worker().Ledger, Archive: h.Worker().Archive, Queue: h.Ingest().Ingest.Queue, NowMs: func() int64 { return h.Clock.Now().UnixMilli() }}
	if before, err := r.Run(context.Background(), "acct_rd", "evt_wide"); err != nil || before != ledger.Uninsertable {
		t.Fatalf("redrive: %s %v", before, err)
	}
	h.Drain(t, 0)
	assertStoredOnce(t, h, "acct_rd", "evt_wide", body)
	if got := used(t, h, "acct_rd"); got != 1 {
		t.Errorf("meter %d, want 1", got)
	}
	if _, err := r.Run(context.Background(), "acct_rd", "evt_wide"); !errors.Is(err, worker.ErrNotRedrivable) {
		t.Errorf("redriving an INSERTED event: %v", err)
	}
}
