package worker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/worker"
)

// putCounter counts the worker's archive writes.
type putCounter struct {
	worker.Archive
	mu sync.Mutex
	n  int
}

func (p *putCounter) Put(ctx context.Context, key string, body []byte) error {
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
	return p.Archive.Put(ctx, key, body)
}

func countPuts(h *apptest.Harness) *putCounter {
	w := h.Worker().Worker
	p := &putCounter{Archive: w.Archive}
	w.Archive = p
	return p
}

func idsN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s_%02d", prefix, i)
	}
	return out
}

// archived reads the whole archive object an entry's payload is in.
func archived(t testing.TB, h *apptest.Harness, e ledger.Entry) []byte {
	t.Helper()
	obj, err := h.Worker().Archive.Get(context.Background(), e.ArchiveKey)
	if err != nil {
		t.Fatalf("archive object of %s: %v", e.EventID, err)
	}
	return obj
}

// One packed message of ten events: one transaction claims, checkpoints and meters them and
// stores their rows (the unit's rows item), one object archives them and one item records the
// batch done.
// Every payload reads back byte for byte from its range of the object.
func TestBatch_TenEventsInOneTransactionWithTheirRows_OneObject(t *testing.T) {
	calls := instrument.NewCallCounter()
	h := apptest.New(t, apptest.Options{DynamoDB: calls.Options().DynamoDB})
	puts := countPuts(h)
	h.CreateAccount(t, "acct_b", "free", nil)
	if _, err := process(t, h, packed(t, h, "acct_b", nil, "warm")); err != nil {
		t.Fatal(err)
	}
	ids := idsN("evt", 10)
	body := packed(t, h, "acct_b", map[string]any{"route": "/x"}, ids...)
	calls.Reset()
	puts.n = 0
	res, err := process(t, h, body)
	if err != nil {
		t.Fatal(err)
	}
	snap := calls.Snapshot()
	for op, want := range map[string]int{"DynamoDB TransactWriteItems": 1, "DynamoDB BatchWriteItem": 0, "DynamoDB PutItem": 1} {
		if snap[op] != want {
			t.Errorf("%s: %d calls, want %d (all: %v)", op, snap[op], want, snap)
		}
	}
	if puts.n != 1 {
		t.Errorf("%d archive writes, want 1", puts.n)
	}
	if got := used(t, h, "acct_b"); got != 11 {
		t.Errorf("meter %d, want 11", got)
	}
	var key string
	for i, id := range ids {
		assertStoredOnce(t, h, "acct_b", id, body)
		e := entry(t, h, "acct_b", id)
		if i == 0 {
			key = e.ArchiveKey
		}
		if e.ArchiveKey != key || e.Batch == "" || !e.RowInUnit {
			t.Errorf("%s: archived at %q in batch %q, row in the batch's item %v; want the batch's one object %q and its rows item",
				id, e.ArchiveKey, e.Batch, e.RowInUnit, key)
		}
		if res.Events[id].Final != ledger.Inserted {
			t.Errorf("%s: result %+v", id, res.Events[id])
		}
	}
	// The object is the admitted payloads in message order, one to a line.
	want := payloadLines(body)
	if got := archived(t, h, entry(t, h, "acct_b", ids[0])); !bytes.Equal(got, want) {
		t.Errorf("archive object:\n%s\nwant\n%s", got, want)
	}
}

// A batch larger than the room left admits exactly as many as fit, the first in message order,
// and rejects the rest with the reason; the meter lands exactly on the cap.
func TestBatch_CapAdmitsExactlyWhatFitsInMessageOrder(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_cap", "free", map[string]any{"events": 7})
	if _, err := process(t, h, packed(t, h, "acct_cap", nil, idsN("first", 3)...)); err != nil {
		t.Fatal(err)
	}
	ids := idsN("evt", 6)
	if _, err := process(t, h, packed(t, h, "acct_cap", nil, ids...)); err != nil {
		t.Fatal(err)
	}
	rows := h.Worker().Analytics
	for i, id := range ids {
		e := entry(t, h, "acct_cap", id)
		want := ledger.Inserted
		if i >= 4 {
			want = ledger.Rejected
		}
		if e.Status != want || (want == ledger.Rejected && (e.Reason == "" || e.Billed())) {
			t.Errorf("%s: %s billed %v reason %q; want %s", id, e.Status, e.Billed(), e.Reason, want)
		}
		// Only the admitted have a row, in the unit's rows item.
		inUnit := analytics.RowRef{AccountID: "acct_cap", EventID: id, RowInsertedAtMs: e.RowInsertedAtMs, Unit: e.Batch}
		if ok, err := rows.Exists(context.Background(), inUnit); err != nil || ok != (want == ledger.Inserted) || e.RowInUnit != ok {
			t.Errorf("%s (%s): row in its unit's item %v (%v), entry says %v", id, e.Status, ok, err, e.RowInUnit)
		}
	}
	if got := used(t, h, "acct_cap"); got != 7 {
		t.Errorf("meter %d, want the cap 7", got)
	}
	// The rejected members are listed where an operator looks for REJECTED events.
	r := h.Do(t, "GET", "/v1/events?status=REJECTED&account=acct_cap", apptest.AdminKey, nil)
	listed := map[string]bool{}
	for _, it := range r.JSON(t)["items"].([]any) {
		listed[it.(map[string]any)["id"].(string)] = true
	}
	if r.Status != 200 || len(listed) != 2 || !listed[ids[4]] || !listed[ids[5]] {
		t.Errorf("REJECTED list: %d %s; want %s and %s", r.Status, r.Body, ids[4], ids[5])
	}
}

// A batch half claimed: some of its events were sent before on their own — one finished, one
// claimed by a unit that died right after its claim, one claimed by an earlier release's
// per-event worker that died before billing it — so the batch's read finds them claimed. It
// claims the rest and takes the old entry over; the two claimed by other units are finished
// from their own entries; every event is billed exactly once.
func TestBatch_HalfClaimedBatch_BillsEachOnce(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_half", "free", nil)
	ids := idsN("evt", 5)
	// ids[0] finished on its own; ids[2] claimed on its own, the worker died after the claim;
	// ids[3] claimed alone by an earlier release, never billed.
	if _, err := process(t, h, message(t, h, "acct_half", ids[0], nil)); err != nil {
		t.Fatal(err)
	}
	h.Worker().Worker.Hook = killAt(worker.Point{Stage: worker.StageClaim})
	if _, err := process(t, h, message(t, h, "acct_half", ids[2], nil)); !errors.Is(err, errKilled) {
		t.Fatalf("not killed: %v", err)
	}
	h.Worker().Worker.Hook = nil
	claimedAlone(t, h, "acct_half", ids[3], h.Clock.Now().UnixMilli())
	body := packed(t, h, "acct_half", nil, ids...)
	res, err := process(t, h, body)
	if err != nil {
		t.Fatal(err)
	}
	if got := used(t, h, "acct_half"); got != 5 {
		t.Errorf("meter %d, want 5", got)
	}
	for _, id := range ids {
		assertStoredOnce(t, h, "acct_half", id, body)
	}
	if e, b := entry(t, h, "acct_half", ids[0]), entry(t, h, "acct_half", ids[1]); e.Batch == b.Batch {
		t.Errorf("the event finished on its own was claimed again by the batch: %+v", e)
	}
	if got := res.Events[ids[2]].Scenario; got != "INSERTING, analytics row present: mark only" {
		t.Errorf("the member another unit claimed re-entered at %q", got)
	}
	for _, i := range []int{1, 3} {
		if got := res.Events[ids[i]].Scenario; got != "claim won, billed: store then mark" {
			t.Errorf("a member the batch claimed (%s): %q", ids[i], got)
		}
	}
	// The redelivery of the whole message acks everything and moves nothing.
	if _, err := process(t, h, body); err != nil {
		t.Fatal(err)
	}
	if got := used(t, h, "acct_half"); got != 5 {
		t.Errorf("meter %d after a redelivery, want 5", got)
	}
}

// A batch whose one member is claimed by another batch that died right after its claim: the
// owner archived the member's payload before claiming it, so the other batch finishes the member
// from its own entry at once; then the owner's redelivery finishes the rest. Each event is billed
// once and reads back from the owner's object.
func TestBatch_MemberOwnedByABatchThatDiedAfterItsClaim(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_own", "free", nil)
	owner := packed(t, h, "acct_own", nil, "evt_a", "evt_shared")
	h.Worker().Worker.Hook = killAt(worker.Point{Stage: worker.StageClaim})
	if _, err := process(t, h, owner); !errors.Is(err, errKilled) {
		t.Fatalf("not killed: %v", err)
	}
	h.Worker().Worker.Hook = nil
	other := packed(t, h, "acct_own", nil, "evt_shared", "evt_b")
	res, err := process(t, h, other)
	if err != nil {
		t.Fatalf("the member its owner archived was not finished: %v", err)
	}
	// Its row went with its owner's claim, in the owner's rows item: the unit that meets it
	// marks it and writes no row of its own.
	if got := res.Events["evt_shared"].Scenario; got != "INSERTING, analytics row present: mark only" {
		t.Errorf("the shared member re-entered at %q", got)
	}
	if _, err := process(t, h, owner); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"evt_a", "evt_shared"} {
		assertStoredOnce(t, h, "acct_own", id, owner)
	}
	assertStoredOnce(t, h, "acct_own", "evt_b", other)
	if got := used(t, h, "acct_own"); got != 3 {
		t.Errorf("meter %d, want 3", got)
	}
}

// A batch archive written but not all rows. A unit's rows go with its claim, in its rows item,
// as far as the item's size allows (analytics.MaxUnitRowsBytes); rows past it are written after
// the claim, in bulk. The worker dies after the first bulk row write; the redelivery marks the
// members whose row is there, stores the others, and rewrites the archive object with the very
// same bytes under the same key.
func TestBatch_ArchiveWrittenButNotAllRows(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_rows", "free", nil)
	w := h.Worker().Worker
	w.RowChunk = 25
	defer func() { w.RowChunk = 0 }()
	ids := idsN("evt", packFitsClaim)
	body := bigRowsPack(t, h, "acct_rows", ids)
	w.Hook = killAt(worker.Point{Stage: ledger.StageInsert})
	if _, err := process(t, h, body); !errors.Is(err, errKilled) {
		t.Fatalf("not killed: %v", err)
	}
	w.Hook = nil
	first := entry(t, h, "acct_rows", ids[0])
	before := archived(t, h, first)
	held := 0
	for i, id := range ids {
		e := entry(t, h, "acct_rows", id)
		if e.RowInUnit {
			held++
		}
		row, _ := h.Worker().Analytics.Exists(context.Background(), e.RowRef())
		if e.RowInUnit != (i < held) || row != (i < held+25) || e.Status != ledger.Inserting {
			t.Fatalf("after the crash %s: row %v status %s in its unit's item %v (%d in the item)", id, row, e.Status, e.RowInUnit, held)
		}
	}
	if held == 0 || held+25 >= len(ids) {
		t.Fatalf("%d rows in the unit's item of %d; the test needs some in it and more than a chunk out", held, len(ids))
	}
	res, err := process(t, h, body)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Events[ids[held]].Scenario; got != "INSERTING, analytics row present: mark only" {
		t.Errorf("member with its row: %q", got)
	}
	if got := res.Events[ids[held+25]].Scenario; got != "INSERTING, billed, no row: store then mark, never bill" {
		t.Errorf("member without its row: %q", got)
	}
	if after := archived(t, h, first); !bytes.Equal(after, before) {
		t.Errorf("the archive object changed on retry:\n%s\n%s", before, after)
	}
	for _, id := range ids {
		assertStoredOnce(t, h, "acct_rows", id, body)
	}
	if got := used(t, h, "acct_rows"); got != int64(len(ids)) {
		t.Errorf("meter %d, want %d", got, len(ids))
	}
}

// A pack of event.MaxPackedEvents events, queued before a unit's claim was bounded by what its
// meters need, needs more than a transaction's 100 items (97 entries, the rows item, the events
// meter's counter row and mark, its rollup minute and hour): it runs in two parts, every event
// billed once and its message acked once both are finished. A redelivery makes the same parts
// and writes nothing.
func TestBatch_PackPastTheClaimsItems_RunsInParts(t *testing.T) {
	calls := instrument.NewCallCounter()
	h := apptest.New(t, apptest.Options{DynamoDB: calls.Options().DynamoDB})
	h.CreateAccount(t, "acct_parts", "free", nil)
	ids := idsN("evt", event.MaxPackedEvents)
	body := packed(t, h, "acct_parts", map[string]any{"k": "v"}, ids...)
	calls.Reset()
	res, err := process(t, h, body)
	if err != nil {
		t.Fatal(err)
	}
	if got := calls.Snapshot()["DynamoDB TransactWriteItems"]; got != 2 {
		t.Errorf("%d claim transactions for the oversize pack; want its 2 parts", got)
	}
	for _, id := range ids {
		if e := entry(t, h, "acct_parts", id); e.Status != ledger.Inserted {
			t.Fatalf("%s: %s", id, e.Status)
		}
		if _, ok := res.Events[id]; !ok {
			t.Fatalf("%s has no result", id)
		}
	}
	if got := used(t, h, "acct_parts"); got != int64(len(ids)) {
		t.Errorf("meter %d, want %d", got, len(ids))
	}
	calls.Reset()
	if _, err := process(t, h, body); err != nil {
		t.Fatal(err)
	}
	if got := calls.Snapshot()["DynamoDB TransactWriteItems"]; got != 0 {
		t.Errorf("the redelivery made %d claim transactions", got)
	}
	if got := used(t, h, "acct_parts"); got != int64(len(ids)) {
		t.Errorf("after the redelivery the meter is %d, want %d", got, len(ids))
	}
}

// packFitsClaim is a pack whose claim fits one transaction whole: its entries, the events
// meter's counter row and mark, its rollup minute and hour, and the rows item.
const packFitsClaim = 90

// bigRowsPack is a packed message of ids whose rows are about 14 KB each and barely compress, so
// that the unit's rows item holds only the first third or so.
func bigRowsPack(t *testing.T, h *apptest.Harness, account string, ids []string) string {
	t.Helper()
	p := event.Packed{AccountID: account, ReceivedAtMs: h.Clock.Now().UnixMilli()}
	for _, id := range ids {
		data := map[string]any{}
		for k := range 60 {
			b := make([]byte, 120)
			_, _ = rand.Read(b)
			data[fmt.Sprintf("f%02d", k)] = hex.EncodeToString(b)
		}
		raw, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": id, "source": "/tests", "type": "api.call", "data": data})
		p.Events = append(p.Events, raw)
	}
	body, err := event.EncodePacked(p)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// Rows that do not fit the unit's rows item: the item holds the first ones in unit order, the
// others are written after the claim as rows of their own, and every event has exactly one.
func TestBatch_RowsPastTheItemsBound_WrittenAlone(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_big", "free", nil)
	ids := idsN("evt", packFitsClaim)
	body := bigRowsPack(t, h, "acct_big", ids)
	if _, err := process(t, h, body); err != nil {
		t.Fatal(err)
	}
	held := 0
	for i, id := range ids {
		e := entry(t, h, "acct_big", id)
		if e.RowInUnit {
			held++
			if held != i+1 {
				t.Errorf("%s is in the rows item after a member that is not", id)
			}
		}
		assertStoredOnce(t, h, "acct_big", id, body)
	}
	if held == 0 || held == len(ids) {
		t.Errorf("%d of %d rows in the unit's item; want some and not all", held, len(ids))
	}
}

// The same packed message delivered three times at once, and several messages racing for one
// cap: every event billed at most once, the cap exact.
func TestBatch_ConcurrentDeliveriesAndRacingBatches_CapExact(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_race", "free", map[string]any{"events": 42})
	var bodies []string
	for b := range 5 {
		bodies = append(bodies, packed(t, h, "acct_race", nil, idsN(fmt.Sprintf("b%d", b), 10)...))
	}
	var wg sync.WaitGroup
	for _, body := range bodies {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = h.Worker().Worker.Process(context.Background(), body)
			}()
		}
	}
	wg.Wait()
	for _, body := range bodies { // what a failed lap left, the queue would redeliver
		if _, err := process(t, h, body); err != nil {
			t.Fatal(err)
		}
	}
	counts := map[ledger.Status]int{}
	for b := range 5 {
		for _, id := range idsN(fmt.Sprintf("b%d", b), 10) {
			counts[entry(t, h, "acct_race", id).Status]++
		}
	}
	if counts[ledger.Inserted] != 42 || counts[ledger.Rejected] != 8 {
		t.Errorf("statuses %v; want 42 INSERTED and 8 REJECTED", counts)
	}
	if got := used(t, h, "acct_race"); got != 42 {
		t.Errorf("meter %d, want 42", got)
	}
}

// A redelivery of a finished batch acks in one round trip, whatever its size: one read of the
// batch's state. It writes nothing. A delivery SQS did not count as a redelivery writes the
// unit's object first (refused as already there) and then reads: no DynamoDB write either.
func TestBatch_RedeliveryOfAFinishedBatch_OneRoundTrip(t *testing.T) {
	calls := instrument.NewCallCounter()
	h := apptest.New(t, apptest.Options{DynamoDB: calls.Options().DynamoDB})
	puts := countPuts(h)
	h.CreateAccount(t, "acct_re", "free", nil)
	body := packed(t, h, "acct_re", nil, idsN("evt", 20)...)
	if _, err := process(t, h, body); err != nil {
		t.Fatal(err)
	}
	calls.Reset()
	puts.n = 0
	resp, err := h.Worker().Worker.HandleSQS(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: body, Attributes: map[string]string{"ApproximateReceiveCount": "2"}},
	}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%+v %v", resp, err)
	}
	snap := calls.Snapshot()
	if snap["DynamoDB BatchGetItem"] != 1 || snap["DynamoDB TransactWriteItems"]+snap["DynamoDB PutItem"]+snap["DynamoDB UpdateItem"]+snap["DynamoDB BatchWriteItem"] != 0 || puts.n != 0 {
		t.Errorf("redelivery calls %v, %d archive writes; want one read of the ledger", snap, puts.n)
	}
	calls.Reset()
	res, err := process(t, h, body)
	if err != nil || res.Final != ledger.Inserted {
		t.Fatalf("%+v %v", res, err)
	}
	snap = calls.Snapshot()
	if snap["DynamoDB BatchGetItem"] != 1 || snap["DynamoDB TransactWriteItems"]+snap["DynamoDB PutItem"]+snap["DynamoDB UpdateItem"]+snap["DynamoDB BatchWriteItem"] != 0 || puts.n != 1 {
		t.Errorf("first-count delivery of a finished batch: calls %v, %d archive writes; want one read and one archive write", snap, puts.n)
	}
	// The same events sent again in another batch (a client retrying): one read of the batch,
	// one of the batch that owns them, nothing written.
	again := packed(t, h, "acct_re", nil, append(idsN("evt", 20), "evt_new")...)
	calls.Reset()
	if _, err := process(t, h, again); err != nil {
		t.Fatal(err)
	}
	if snap := calls.Snapshot(); snap["DynamoDB PutItem"] != 1 || snap["DynamoDB TransactWriteItems"] != 1 || snap["DynamoDB UpdateItem"] != 0 {
		t.Errorf("a batch of 20 finished events and 1 new: calls %v; want one claim, one row write, one record", snap)
	}
	if got := used(t, h, "acct_re"); got != 21 {
		t.Errorf("meter %d, want 21", got)
	}

}

// Every tier in a batch: plus counts on one shard with its mark, internal consumes nothing, an
// inactive account's events are rejected with the status rule's reason.
func TestBatch_Tiers(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_plus", "plus", nil)
	h.CreateAccount(t, "acct_internal", "internal", nil)
	h.CreateAccount(t, "acct_lapsed", "plus", nil)
	if r := h.Do(t, "PATCH", "/v1/accounts/acct_lapsed", apptest.AdminKey, map[string]any{"status": "inactive"}); r.Status != 200 {
		t.Fatalf("deactivate: %d %s", r.Status, r.Body)
	}
	puts := countPuts(h)
	for _, acct := range []string{"acct_plus", "acct_internal", "acct_lapsed"} {
		before := puts.n
		if _, err := process(t, h, packed(t, h, acct, nil, idsN("evt", 4)...)); err != nil {
			t.Fatalf("%s: %v", acct, err)
		}
		if wrote := puts.n - before; wrote != map[bool]int{true: 0, false: 1}[acct == "acct_lapsed"] {
			t.Errorf("%s: %d archive writes; want one, and none for an inactive account's rejected events", acct, wrote)
		}
	}
	for _, tc := range []struct {
		account string
		status  ledger.Status
		used    int64
	}{{"acct_plus", ledger.Inserted, 4}, {"acct_internal", ledger.Inserted, 0}, {"acct_lapsed", ledger.Rejected, 0}} {
		for _, id := range idsN("evt", 4) {
			e := entry(t, h, tc.account, id)
			if e.Status != tc.status || (tc.status == ledger.Rejected && e.Reason == "") {
				t.Errorf("%s %s: %s %q", tc.account, id, e.Status, e.Reason)
			}
		}
		if got := used(t, h, tc.account); got != tc.used {
			t.Errorf("%s: used %d, want %d", tc.account, got, tc.used)
		}
	}
}

// End to end: the batch route packs its events, the worker stores each pack as a unit, and GET
// /v1/events/{id} reads each INSERTED (resolved through the unit's record).
func TestBatch_BatchRouteEndToEnd(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_e2e", "free", nil)
	var evs []map[string]any
	for _, id := range idsN("evt", 100) {
		evs = append(evs, map[string]any{"specversion": "1.0", "id": id, "source": "/tests", "type": "api.call"})
	}
	if r := h.Do(t, "POST", "/v1/events/batch", key, evs); r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	h.Drain(t, 0)
	batches := map[string]bool{}
	for _, id := range idsN("evt", 100) {
		r := h.Do(t, "GET", "/v1/events/"+id, key, nil)
		if r.Status != 200 || r.JSON(t)["status"] != "INSERTED" {
			t.Fatalf("GET %s: %d %s", id, r.Status, r.Body)
		}
		e := entry(t, h, "acct_e2e", id)
		batches[e.Batch] = true
		payload, err := h.Worker().Archive.Read(context.Background(), e.ArchiveLocation())
		if err != nil || !bytes.Contains(payload, []byte(`"id":"`+id+`"`)) {
			t.Fatalf("%s: archived payload %s %v", id, payload, err)
		}
	}
	if len(batches) != 2 {
		t.Errorf("100 events in %d batches, want 2 packs of 50", len(batches))
	}
	if got := used(t, h, "acct_e2e"); got != 100 {
		t.Errorf("meter %d", got)
	}
}

// raceLedger runs before() once, between the batch's read and its claim: another unit claiming
// a member in that gap.
type raceLedger struct {
	worker.Ledger
	once   sync.Once
	before func()
	claims int
}

func (l *raceLedger) WriteBatchClaim(ctx context.Context, c ledger.BatchClaim) error {
	l.once.Do(l.before)
	l.claims++
	return l.Ledger.WriteBatchClaim(ctx, c)
}

// A batch transaction cancelled by one member: between the batch's read and its transaction,
// one of its events is claimed and billed on its own. The transaction is cancelled as a whole
// (nothing of it applies), the next lap reads the state again and claims the others, and the
// member is billed once, by its own message.
func TestBatch_TransactionCancelledByOneMember(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_cx", "free", nil)
	w := h.Worker().Worker
	ids := idsN("evt", 4)
	single := message(t, h, "acct_cx", ids[1], nil)
	race := &raceLedger{Ledger: w.Ledger}
	race.before = func() {
		w.Ledger = race.Ledger // the single message runs on the plain ledger
		defer func() { w.Ledger = race }()
		if _, err := process(t, h, single); err != nil {
			t.Errorf("single: %v", err)
		}
	}
	w.Ledger = race
	defer func() { w.Ledger = race.Ledger }()
	body := packed(t, h, "acct_cx", nil, ids...)
	res, err := process(t, h, body)
	if err != nil {
		t.Fatal(err)
	}
	if race.claims != 2 {
		t.Errorf("%d claim transactions; want the cancelled one and the one after it", race.claims)
	}
	if got := used(t, h, "acct_cx"); got != 4 {
		t.Errorf("meter %d, want 4", got)
	}
	if got := res.Events[ids[1]].Scenario; got != "claimed elsewhere, finished: ack" {
		t.Errorf("the member claimed in the gap: %q", got)
	}
	unit := entry(t, h, "acct_cx", ids[0]).Batch
	for i, id := range ids {
		e := entry(t, h, "acct_cx", id)
		if e.Status != ledger.Inserted || (i == 1) != (e.Batch != unit) {
			t.Errorf("%s: %s batch %q", id, e.Status, e.Batch)
		}
		assertStoredOnce(t, h, "acct_cx", id, map[bool]string{true: single, false: body}[i == 1])
	}
}

// orderLedger and orderArchive record the order of a unit's archive write, reads and claims.
type orderLedger struct {
	worker.Ledger
	mu  *sync.Mutex
	log *[]string
}

func (l orderLedger) ReadBatch(ctx context.Context, r ledger.BatchRead) (ledger.BatchState, error) {
	l.mu.Lock()
	*l.log = append(*l.log, "read")
	l.mu.Unlock()
	return l.Ledger.ReadBatch(ctx, r)
}

func (l orderLedger) WriteBatchClaim(ctx context.Context, c ledger.BatchClaim) error {
	l.mu.Lock()
	*l.log = append(*l.log, "claim")
	l.mu.Unlock()
	return l.Ledger.WriteBatchClaim(ctx, c)
}

type orderArchive struct {
	worker.Archive
	mu  *sync.Mutex
	log *[]string
}

func (a orderArchive) Put(ctx context.Context, key string, body []byte) error {
	a.mu.Lock()
	*a.log = append(*a.log, "archive")
	a.mu.Unlock()
	return a.Archive.Put(ctx, key, body)
}

// A first delivery writes the unit's object before its read, so nothing stands between the read
// and the claim: the window in which a concurrent unit holding one of the same events (a
// client's retry) can claim it and cancel this unit's transaction is the read's and the
// transaction's own latency. A redelivery reads first and archives only what it will claim;
// either way the object is written before the claim, and it holds every member (a member claimed
// elsewhere too), at the ranges the entries record.
func TestBatch_ArchiveBeforeTheRead_NothingBetweenReadAndClaim(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_ord", "free", nil)
	w := h.Worker().Worker
	if _, err := process(t, h, message(t, h, "acct_ord", "evt_00", nil)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log []string
	plainL, plainA := w.Ledger, w.Archive
	w.Ledger, w.Archive = orderLedger{plainL, &mu, &log}, orderArchive{plainA, &mu, &log}
	defer func() { w.Ledger, w.Archive = plainL, plainA }()
	ids := idsN("evt", 4)
	body := packed(t, h, "acct_ord", nil, ids...)
	if _, err := process(t, h, body); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(log); got != "[archive read claim]" {
		t.Errorf("first delivery: %s; want [archive read claim]", got)
	}
	want := payloadLines(body)
	if got := archived(t, h, entry(t, h, "acct_ord", ids[1])); !bytes.Equal(got, want) {
		t.Errorf("the unit's object:\n%s\nwant every member's payload\n%s", got, want)
	}
	for _, id := range ids {
		assertStoredOnce(t, h, "acct_ord", id, map[bool]string{true: message(t, h, "acct_ord", id, nil), false: body}[id == ids[0]])
	}
	log = nil
	again := packed(t, h, "acct_ord", nil, append(idsN("evt", 4), "evt_new")...)
	resp, err := w.HandleSQS(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: again, Attributes: map[string]string{"ApproximateReceiveCount": "3"}},
	}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%+v %v", resp, err)
	}
	if got := fmt.Sprint(log); got != "[read archive claim]" {
		t.Errorf("redelivery with one event to claim: %s; want [read archive claim]", got)
	}
	assertStoredOnce(t, h, "acct_ord", "evt_new", again)
	if got := used(t, h, "acct_ord"); got != 5 {
		t.Errorf("meter %d, want 5", got)
	}
}

// relayoutLedger claims the admitted members into an object of their payloads only, as units
// were archived before every member's payload was in the unit's object: the entries of such a
// unit record another layout than the one the unit now writes (and, as then, no rows go with
// the claim).
type relayoutLedger struct {
	worker.Ledger
	archive worker.Archive
	body    func(id string) []byte
	key     string
	skipPut bool
	// only, when set, names the members claimed under the older layout; the others keep the
	// unit's.
	only map[string]bool
}

func (l *relayoutLedger) WriteBatchClaim(ctx context.Context, c ledger.BatchClaim) error {
	var obj []byte
	for i, e := range c.Admit {
		if l.only != nil && !l.only[e.EventID] {
			continue
		}
		p := l.body(e.EventID)
		c.Admit[i].ArchiveKey, c.Admit[i].ArchiveOffset, c.Admit[i].ArchiveLength = l.key, int64(len(obj)), int64(len(p))
		obj = append(append(obj, p...), '\n')
	}
	if !l.skipPut {
		if err := l.archive.Put(ctx, l.key, obj); err != nil {
			return err
		}
	}
	c.Rows = ledger.RowsItem{}
	return l.Ledger.WriteBatchClaim(ctx, c)
}

// A unit whose entries were claimed under an older layout (an object of the admitted payloads
// only) and which died after its claim: its redelivery finishes every member from the object the
// entries name, which was written before the claim. If that object is missing, the unit fails
// (it cannot be repaired by a retry, and reaches the DLQ) instead of pointing rows at nothing.
func TestBatch_EntriesClaimedUnderAnOlderLayout_FinishedFromTheirObject(t *testing.T) {
	for _, missing := range []bool{false, true} {
		t.Run(map[bool]string{false: "object stored", true: "object missing"}[missing], func(t *testing.T) {
			h := apptest.New(t)
			h.CreateAccount(t, "acct_old", "free", nil)
			w := h.Worker().Worker
			ids := idsN("evt", 3)
			if _, err := process(t, h, message(t, h, "acct_old", ids[0], nil)); err != nil {
				t.Fatal(err)
			}
			body := packed(t, h, "acct_old", nil, ids...)
			plain := w.Ledger
			w.Ledger = &relayoutLedger{Ledger: plain, archive: w.Archive, key: "events/dt=2026-11-01/account=acct_old/batch-old.jsonl",
				body: func(id string) []byte { return payloadOf(t, body, id) }, skipPut: missing}
			w.Hook = killAt(worker.Point{Stage: worker.StageClaim})
			if _, err := process(t, h, body); !errors.Is(err, errKilled) {
				t.Fatalf("not killed: %v", err)
			}
			w.Ledger, w.Hook = plain, nil
			_, err := process(t, h, body)
			if missing {
				if err == nil {
					t.Fatal("a unit whose entries name a missing object was acked")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids[1:] {
				if e := entry(t, h, "acct_old", id); e.ArchiveKey != "events/dt=2026-11-01/account=acct_old/batch-old.jsonl" {
					t.Errorf("%s archived at %s", id, e.ArchiveKey)
				}
				assertStoredOnce(t, h, "acct_old", id, body)
			}
			if got := used(t, h, "acct_old"); got != 3 {
				t.Errorf("meter %d, want 3", got)
			}
		})
	}
}

// A member whose entry names an archive object that is not stored, and that its unit does not
// lay out, cannot be finished by any retry; in a unit of several messages it fails only the
// message holding it: the unit's other messages are acked, their events INSERTED, and the
// failed message alone is left to its redeliveries and the DLQ.
func TestBatch_AMemberThatCannotBeFinished_FailsOnlyItsMessage(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_iso", "free", nil)
	w := h.Worker().Worker
	pack := packed(t, h, "acct_iso", nil, "evt_a", "evt_b")
	bodies := map[string]string{"pack": pack, "single": message(t, h, "acct_iso", "evt_c", nil)}
	plain := w.Ledger
	w.Ledger = &relayoutLedger{Ledger: plain, archive: w.Archive, key: "events/dt=2026-11-01/account=acct_iso/batch-lost.jsonl",
		body: func(id string) []byte { return payloadOf(t, pack, id) }, skipPut: true, only: map[string]bool{"evt_a": true}}
	w.Hook = killAt(worker.Point{Stage: worker.StageClaim})
	if failed := invoke(t, w, bodies); len(failed) != 2 {
		t.Fatalf("failed %v; want both messages left to a redelivery", failed)
	}
	w.Ledger, w.Hook = plain, nil
	if failed := invoke(t, w, bodies); !slices.Equal(failed, []string{"pack"}) {
		t.Fatalf("failed %v; want only the message holding the member that cannot be finished", failed)
	}
	for _, id := range []string{"evt_b", "evt_c"} {
		assertStoredOnce(t, h, "acct_iso", id, map[bool]string{true: pack, false: bodies["single"]}[id == "evt_b"])
	}
	if e := entry(t, h, "acct_iso", "evt_a"); e.Status != ledger.Inserting {
		t.Errorf("evt_a: %s; want it left INSERTING for the operator", e.Status)
	}
}

// payloadLines is a packed message's events as a unit's archive object holds them: each
// event's exact bytes, in message order, one to a line.
func payloadLines(body string) []byte {
	m, _ := event.DecodeMessage(body)
	var out []byte
	for _, env := range m.Envelopes {
		out = append(append(out, env.Event...), '\n')
	}
	return out
}

// A unit of one event (sparse traffic: one message an invocation) reads before it archives: a
// client's resend of an event claimed before, alone in its invocation, costs the one read and
// writes no archive object; a new event is archived, then claimed. A unit of several events
// archives first (TestBatch_ArchiveBeforeTheRead_NothingBetweenReadAndClaim).
func TestBatch_AUnitOfOneEventReadsBeforeItArchives(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_one", "free", nil)
	w := h.Worker().Worker
	first := message(t, h, "acct_one", "evt_1", nil)
	if _, err := process(t, h, first); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log []string
	plainL, plainA := w.Ledger, w.Archive
	w.Ledger, w.Archive = orderLedger{plainL, &mu, &log}, orderArchive{plainA, &mu, &log}
	defer func() { w.Ledger, w.Archive = plainL, plainA }()
	h.Clock.Advance(time.Second) // the resend is a new message: another instant, another unit
	resend := message(t, h, "acct_one", "evt_1", nil)
	if res, err := process(t, h, resend); err != nil || res.Scenario != "claimed elsewhere, finished: ack" {
		t.Fatalf("the resend: %q %v", res.Scenario, err)
	}
	if got := fmt.Sprint(log); got != "[read]" {
		t.Errorf("a resend alone in its invocation: %s; want [read]", got)
	}
	log = nil
	fresh := message(t, h, "acct_one", "evt_2", nil)
	if _, err := process(t, h, fresh); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(log); got != "[read archive claim]" {
		t.Errorf("a new event alone in its invocation: %s; want [read archive claim]", got)
	}
	assertStoredOnce(t, h, "acct_one", "evt_1", first)
	assertStoredOnce(t, h, "acct_one", "evt_2", fresh)
	if got := used(t, h, "acct_one"); got != 2 {
		t.Errorf("meter %d, want 2", got)
	}
}
