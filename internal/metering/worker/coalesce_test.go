package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/worker"
)

// keyCounter records the archive keys the worker writes.
type keyCounter struct {
	worker.Archive
	mu   sync.Mutex
	keys map[string]int
}

func (k *keyCounter) Put(ctx context.Context, key string, body []byte) error {
	k.mu.Lock()
	k.keys[key]++
	k.mu.Unlock()
	return k.Archive.Put(ctx, key, body)
}

func countKeys(h *apptest.Harness) *keyCounter {
	w := h.Worker().Worker
	k := &keyCounter{Archive: w.Archive, keys: map[string]int{}}
	w.Archive = k
	return k
}

// invoke hands the bodies to the worker as one Lambda batch (message ids m<index>) and returns
// the ids it reported failed.
func invoke(t testing.TB, w *worker.Worker, bodies map[string]string) []string {
	t.Helper()
	var batch events.SQSEvent
	ids := make([]string, 0, len(bodies))
	for id := range bodies {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		batch.Records = append(batch.Records, events.SQSMessage{MessageId: id, Body: bodies[id]})
	}
	resp, err := w.HandleSQS(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	slices.Sort(failed)
	return failed
}

// singles builds one single-event message per id, keyed by the event id.
func singles(t testing.TB, h *apptest.Harness, accountID string, data map[string]any, ids ...string) map[string]string {
	out := map[string]string{}
	for _, id := range ids {
		out[id] = message(t, h, accountID, id, data)
	}
	return out
}

func pick(all map[string]string, ids ...string) map[string]string {
	out := map[string]string{}
	for _, id := range ids {
		out[id] = all[id]
	}
	return out
}

// One invocation of single-event messages and a packed one, for two accounts: one transaction
// and one archive object per account; every event stored once, every message acked.
func TestCoalesce_OneUnitPerAccount(t *testing.T) {
	calls := instrument.NewCallCounter()
	h := apptest.New(t, apptest.Options{DynamoDB: calls.Options().DynamoDB})
	w := h.Worker().Worker
	keys := countKeys(h)
	h.CreateAccount(t, "acct_a", "free", nil)
	h.CreateAccount(t, "acct_b", "free", nil)
	// Warm both accounts (the first usage is stamped once), then count.
	if got := invoke(t, w, map[string]string{"w1": message(t, h, "acct_a", "warm", nil), "w2": message(t, h, "acct_b", "warm", nil)}); len(got) != 0 {
		t.Fatalf("warm-up failed: %v", got)
	}
	bodies := singles(t, h, "acct_a", map[string]any{"k": "v"}, idsN("a", 12)...)
	for id, b := range singles(t, h, "acct_b", nil, idsN("b", 2)...) {
		bodies[id] = b
	}
	pack := packed(t, h, "acct_a", nil, idsN("p", 3)...)
	bodies["pack"] = pack
	calls.Reset()
	keys.keys = map[string]int{}
	if failed := invoke(t, w, bodies); len(failed) != 0 {
		t.Fatalf("failed messages: %v", failed)
	}
	if got := calls.Snapshot()["DynamoDB TransactWriteItems"]; got != 2 {
		t.Errorf("%d claim transactions, want one per account", got)
	}
	if len(keys.keys) != 2 {
		t.Errorf("archive objects written: %v; want one per account", keys.keys)
	}
	for _, id := range idsN("a", 12) {
		assertStoredOnce(t, h, "acct_a", id, bodies[id])
	}
	for _, id := range idsN("p", 3) {
		assertStoredOnce(t, h, "acct_a", id, pack)
	}
	for _, id := range idsN("b", 2) {
		assertStoredOnce(t, h, "acct_b", id, bodies[id])
	}
	if a, b := used(t, h, "acct_a"), used(t, h, "acct_b"); a != 16 || b != 3 {
		t.Errorf("meters %d and %d, want 16 and 3", a, b)
	}
}

// More events than one transaction holds: the invocation is split into units of at most 97,
// a message never split.
func TestCoalesce_SplitsAt97Events(t *testing.T) {
	calls := instrument.NewCallCounter()
	h := apptest.New(t, apptest.Options{DynamoDB: calls.Options().DynamoDB})
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_many", "free", nil)
	if got := invoke(t, w, map[string]string{"w": message(t, h, "acct_many", "warm", nil)}); len(got) != 0 {
		t.Fatalf("warm-up failed: %v", got)
	}
	calls.Reset()
	bodies := singles(t, h, "acct_many", nil, idsN("s", 60)...)
	bodies["pack"] = packed(t, h, "acct_many", nil, idsN("p", 50)...)
	if failed := invoke(t, w, bodies); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if got := calls.Snapshot()["DynamoDB TransactWriteItems"]; got != 2 {
		t.Errorf("%d claim transactions for 110 events, want 2", got)
	}
	if got := used(t, h, "acct_many"); got != 111 {
		t.Errorf("meter %d, want 111", got)
	}
}

// The same event twice in one invocation (a client's retry): one member, billed once; both
// messages acked.
func TestCoalesce_SameEventTwiceInOneInvocation(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_dup", "free", nil)
	bodies := singles(t, h, "acct_dup", nil, "evt_1", "evt_2")
	bodies["again"] = bodies["evt_1"]
	bodies["pack"] = packed(t, h, "acct_dup", nil, "evt_2", "evt_3")
	if failed := invoke(t, w, bodies); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if got := used(t, h, "acct_dup"); got != 3 {
		t.Errorf("meter %d, want 3", got)
	}
	for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
		if e := entry(t, h, "acct_dup", id); e.Status != ledger.Inserted {
			t.Errorf("%s: %s", id, e.Status)
		}
	}
}

// A unit dies right after its claim (billed, nothing stored). SQS redelivers its messages
// grouped differently — some with a new event, the rest later: each event is finished from its
// own entry, its payload read from the object archived before the claim, billed exactly once.
func TestCoalesce_CrashAfterClaim_RedeliveryRegroupedDifferently(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_re", "free", nil)
	ids := idsN("evt", 6)
	bodies := singles(t, h, "acct_re", map[string]any{"k": "v"}, ids...)
	w.Hook = killAt(worker.Point{Stage: worker.StageClaim})
	if failed := invoke(t, w, bodies); len(failed) != 6 {
		t.Fatalf("failed %v; want all six left to a redelivery", failed)
	}
	w.Hook = nil
	if got := used(t, h, "acct_re"); got != 6 {
		t.Fatalf("meter %d after the claim, want 6", got)
	}
	bodies["new"] = message(t, h, "acct_re", "evt_new", nil)
	if failed := invoke(t, w, pick(bodies, ids[1], ids[3], ids[5], "new")); len(failed) != 0 {
		t.Fatalf("first regrouped delivery failed: %v", failed)
	}
	if failed := invoke(t, w, pick(bodies, ids[0], ids[2], ids[4])); len(failed) != 0 {
		t.Fatalf("second regrouped delivery failed: %v", failed)
	}
	for _, id := range ids {
		assertStoredOnce(t, h, "acct_re", id, bodies[id])
	}
	assertStoredOnce(t, h, "acct_re", "evt_new", bodies["new"])
	if got := used(t, h, "acct_re"); got != 7 {
		t.Errorf("meter %d, want 7", got)
	}
	// And a redelivery of everything acks without moving the meter.
	if failed := invoke(t, w, bodies); len(failed) != 0 {
		t.Fatalf("redelivery: %v", failed)
	}
	if got := used(t, h, "acct_re"); got != 7 {
		t.Errorf("meter %d after a full redelivery, want 7", got)
	}
}

// A unit dies after writing its archive object and before its claim: nothing is claimed. The same
// messages redelivered in another order make the same unit, which writes the same object (same
// key, same bytes) and claims; then a regrouped delivery of a superset claims only what is new.
func TestCoalesce_CrashAfterArchiveBeforeClaim_SameUnitSameObject(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	keys := countKeys(h)
	h.CreateAccount(t, "acct_ar", "free", nil)
	ids := idsN("evt", 5)
	bodies := singles(t, h, "acct_ar", nil, ids...)
	w.Hook = killAt(worker.Point{Stage: ledger.StageArchive})
	if failed := invoke(t, w, bodies); len(failed) != 5 {
		t.Fatalf("failed %v; want all five", failed)
	}
	w.Hook = nil
	if got := used(t, h, "acct_ar"); got != 0 {
		t.Fatalf("meter %d before any claim, want 0", got)
	}
	// The same messages under other message ids (another receive): the same unit.
	again := map[string]string{}
	for i, id := range ids {
		again[fmt.Sprintf("z%d", 9-i)] = bodies[id]
	}
	if failed := invoke(t, w, again); len(failed) != 0 {
		t.Fatalf("redelivery failed: %v", failed)
	}
	if len(keys.keys) != 1 {
		t.Errorf("archive keys %v; want the one object written twice", keys.keys)
	}
	for _, id := range ids {
		assertStoredOnce(t, h, "acct_ar", id, bodies[id])
	}
	if got := used(t, h, "acct_ar"); got != 5 {
		t.Errorf("meter %d, want 5", got)
	}
}

// One member's row is refused in a unit of several messages: only that member's message is
// reported failed; the others are acked, and their members are INSERTED (marked one by one: the
// batch's record would also cover the unfinished member). The refused member's redeliveries,
// grouped alone, end it UNINSERTABLE after the bounded quarantines, billed once.
func TestCoalesce_OneMemberLeft_OnlyItsMessageRetried(t *testing.T) {
	schema := analytics.Schema{MaxDimensions: 2, MaxValueBytes: 1024, MaxDimensionBytes: 1024}
	h := apptest.New(t, apptest.Options{Schema: &schema})
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_poison", "free", nil)
	ids := idsN("evt", 4)
	bodies := singles(t, h, "acct_poison", map[string]any{"a": 1}, ids...)
	bodies["poison"] = message(t, h, "acct_poison", "evt_poison", map[string]any{"a": 1, "b": 2, "c": 3})
	if failed := invoke(t, w, bodies); !slices.Equal(failed, []string{"poison"}) {
		t.Fatalf("failed %v; want only the poison message", failed)
	}
	for _, id := range ids {
		assertStoredOnce(t, h, "acct_poison", id, bodies[id])
	}
	if e := entry(t, h, "acct_poison", "evt_poison"); e.Status != ledger.Inserting || e.QuarantineCount != 1 {
		t.Fatalf("poison after one try: %s, quarantined %d", e.Status, e.QuarantineCount)
	}
	for try := 2; try <= worker.DefaultMaxQuarantines; try++ {
		failed := invoke(t, w, pick(bodies, "poison", ids[try%len(ids)]))
		if want := try < worker.DefaultMaxQuarantines; (len(failed) == 1) != want {
			t.Fatalf("try %d: failed %v", try, failed)
		}
	}
	if e := entry(t, h, "acct_poison", "evt_poison"); e.Status != ledger.Uninsertable || !e.Billed() {
		t.Errorf("poison: %s billed %v; want UNINSERTABLE and billed", e.Status, e.Billed())
	}
	if got := used(t, h, "acct_poison"); got != 5 {
		t.Errorf("meter %d, want 5", got)
	}
}

// A packed message is acked only when every event in it is finished, not only its first: here
// its last member's row is refused (it stays INSERTING, quarantined once), so the whole message
// is reported failed and comes back, while its finished members and the other messages are
// acked. Acking it would lose that member: it would never reach UNINSERTABLE or the DLQ, and its
// analytics row would never be written.
func TestCoalesce_PackedMessageWithALaterMemberUnfinished_NotAcked(t *testing.T) {
	schema := analytics.Schema{MaxDimensions: 2, MaxValueBytes: 1024, MaxDimensionBytes: 1024}
	h := apptest.New(t, apptest.Options{Schema: &schema})
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_pack", "free", nil)
	p := event.Packed{AccountID: "acct_pack", ReceivedAtMs: h.Clock.Now().UnixMilli()}
	for _, m := range []struct {
		id   string
		data map[string]any
	}{{"evt_first", map[string]any{"a": 1}}, {"evt_second", map[string]any{"a": 2}}, {"evt_poison", map[string]any{"a": 1, "b": 2, "c": 3}}} {
		raw, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": m.id, "source": "/tests", "type": "api.call", "data": m.data})
		p.Events = append(p.Events, raw)
	}
	pack, err := event.EncodePacked(p)
	if err != nil {
		t.Fatal(err)
	}
	bodies := singles(t, h, "acct_pack", map[string]any{"a": 1}, idsN("evt", 2)...)
	bodies["pack"] = pack
	if failed := invoke(t, w, bodies); !slices.Equal(failed, []string{"pack"}) {
		t.Fatalf("failed %v; want the packed message, whose last member is unfinished", failed)
	}
	for _, id := range []string{"evt_first", "evt_second"} {
		assertStoredOnce(t, h, "acct_pack", id, pack)
	}
	if e := entry(t, h, "acct_pack", "evt_poison"); e.Status != ledger.Inserting || e.QuarantineCount != 1 {
		t.Errorf("the last member: %s, quarantined %d; want INSERTING after one refused row", e.Status, e.QuarantineCount)
	}
}

// A unit's transaction cancelled by one member: between the unit's read and its transaction, one
// of its events is claimed and billed by its own message elsewhere. The next lap claims the rest;
// the member is billed once; every message is acked.
func TestCoalesce_TransactionCancelledByOneMember(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_cx", "free", nil)
	ids := idsN("evt", 4)
	bodies := singles(t, h, "acct_cx", nil, ids...)
	race := &raceLedger{Ledger: w.Ledger}
	race.before = func() {
		w.Ledger = race.Ledger
		defer func() { w.Ledger = race }()
		if _, err := process(t, h, bodies[ids[2]]); err != nil {
			t.Errorf("alone: %v", err)
		}
	}
	w.Ledger = race
	defer func() { w.Ledger = race.Ledger }()
	if failed := invoke(t, w, bodies); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if race.claims != 2 {
		t.Errorf("%d claim transactions; want the cancelled one and the next", race.claims)
	}
	unit := entry(t, h, "acct_cx", ids[0]).Batch
	for i, id := range ids {
		assertStoredOnce(t, h, "acct_cx", id, bodies[id])
		if e := entry(t, h, "acct_cx", id); (i == 2) != (e.Batch != unit) {
			t.Errorf("%s: batch %q", id, e.Batch)
		}
	}
	if got := used(t, h, "acct_cx"); got != 4 {
		t.Errorf("meter %d, want 4", got)
	}
}

// A cap in a coalesced unit: exactly the room is admitted, in unit order, the rest rejected; a
// concurrent invocation of the same messages moves nothing more.
func TestCoalesce_CapExactUnderConcurrentInvocations(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_capc", "free", map[string]any{"events": 7})
	bodies := singles(t, h, "acct_capc", nil, idsN("evt", 12)...)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = invokeQuiet(w, bodies) }()
	}
	wg.Wait()
	if failed := invoke(t, w, bodies); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	counts := map[ledger.Status]int{}
	for _, id := range idsN("evt", 12) {
		counts[entry(t, h, "acct_capc", id).Status]++
	}
	if counts[ledger.Inserted] != 7 || counts[ledger.Rejected] != 5 {
		t.Errorf("statuses %v; want 7 INSERTED, 5 REJECTED", counts)
	}
	if got := used(t, h, "acct_capc"); got != 7 {
		t.Errorf("meter %d, want 7", got)
	}
}

func invokeQuiet(w *worker.Worker, bodies map[string]string) error {
	var batch events.SQSEvent
	for id, b := range bodies {
		batch.Records = append(batch.Records, events.SQSMessage{MessageId: id, Body: b})
	}
	_, err := w.HandleSQS(context.Background(), batch)
	return errors.Join(err)
}

// One invocation holding events of two billing cycles (a batch gathered across the cycle's
// end): each cycle's events are their own unit, billed on their own cycle's meter.
func TestCoalesce_UnitsNeverSpanTwoCycles(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_cyc", "free", nil)
	start := h.Clock.Now()
	if got := invoke(t, w, map[string]string{"w": message(t, h, "acct_cyc", "warm", nil)}); len(got) != 0 {
		t.Fatalf("warm-up failed: %v", got)
	}
	acct, err := h.Worker().Accounts.Get(context.Background(), "acct_cyc")
	if err != nil {
		t.Fatal(err)
	}
	this, next := acct.CycleAt(start), acct.CycleAt(start.AddDate(0, 1, 0))
	if this.Label() == next.Label() {
		t.Fatalf("one cycle: %s", this.Label())
	}
	bodies := singles(t, h, "acct_cyc", nil, idsN("old", 3)...)
	h.Clock.Set(start.AddDate(0, 1, 0))
	for id, b := range singles(t, h, "acct_cyc", nil, idsN("new", 2)...) {
		bodies[id] = b
	}
	if failed := invoke(t, w, bodies); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	for label, want := range map[string]int64{this.Label(): 4, next.Label(): 2} {
		tot, err := h.Worker().Usage.Read(context.Background(), "acct_cyc", "events", label)
		if err != nil {
			t.Fatal(err)
		}
		if tot.Used != want {
			t.Errorf("cycle %s: used %d, want %d", label, tot.Used, want)
		}
	}
	for _, id := range append(idsN("old", 3), idsN("new", 2)...) {
		assertStoredOnce(t, h, "acct_cyc", id, bodies[id])
	}
}
