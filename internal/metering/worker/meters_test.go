package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/metering/worker"
)

// metersCatalog is testdata/plans/meters.json: a SUM, a second SUM, a MAX, a UNIQUE_COUNT and a
// LATEST meter beside the events count.
func metersCatalog(t testing.TB) *plans.Catalog {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "plans", "meters.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := plans.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// metered is a harness on the meters catalog, and its worker.
func metered(t testing.TB) (*apptest.Harness, *worker.Worker) {
	t.Helper()
	h := apptest.New(t, apptest.Options{Catalog: metersCatalog(t)})
	return h, h.Worker().Worker
}

// ev is one CloudEvent as a test sends it.
type ev struct {
	id, typ, source, time string
	data                  map[string]any
}

func (e ev) raw(t testing.TB) []byte {
	t.Helper()
	ce := map[string]any{"specversion": "1.0", "id": e.id, "source": e.source, "type": e.typ}
	if ce["source"] == "" {
		ce["source"] = "/api/chat"
	}
	if e.time != "" {
		ce["time"] = e.time
	}
	if e.data != nil {
		ce["data"] = e.data
	}
	raw, err := json.Marshal(ce)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := event.Parse(raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

// llmCall is an llm.call event moving tokens_in and tokens_out (and events).
func llmCall(id string, in, out int64) ev {
	return ev{id: id, typ: "llm.call", data: map[string]any{
		"usage": map[string]any{"input_tokens": in, "output_tokens": out}, "model": "gpt-4", "region": "eu"}}
}

func storage(id string, gb int64) ev {
	return ev{id: id, typ: "storage.sampled", data: map[string]any{"gb": gb}}
}

func login(id string, user any) ev {
	return ev{id: id, typ: "app.login", data: map[string]any{"user_id": user}}
}

func seats(id, at string, n int64) ev {
	return ev{id: id, typ: "seats.set", time: at, data: map[string]any{"seats": n}}
}

// single is the queue message of one event.
func single(t testing.TB, h *apptest.Harness, accountID string, e ev) string {
	t.Helper()
	body, err := event.EncodeEnvelope(event.Envelope{AccountID: accountID, EventID: e.id, ReceivedAtMs: h.Clock.Now().UnixMilli(), Event: e.raw(t)})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// pack is the packed message of events, as the batch route queues them.
func pack(t testing.TB, h *apptest.Harness, accountID string, es ...ev) string {
	t.Helper()
	p := event.Packed{AccountID: accountID, ReceivedAtMs: h.Clock.Now().UnixMilli()}
	for _, e := range es {
		p.Events = append(p.Events, e.raw(t))
	}
	body, err := event.EncodePacked(p)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// messages keys the single messages of events by event id.
func messages(t testing.TB, h *apptest.Harness, accountID string, es ...ev) map[string]string {
	out := map[string]string{}
	for _, e := range es {
		out[e.id] = single(t, h, accountID, e)
	}
	return out
}

// figure is an account's figure of a feature this cycle: what the usage rows hold.
func figure(t testing.TB, h *apptest.Harness, accountID, feature string) int64 {
	t.Helper()
	tot, err := h.Worker().Usage.Read(context.Background(), accountID, feature, "2026-11")
	if err != nil {
		t.Fatal(err)
	}
	return tot.Used
}

// figures are the account's figures of every feature the meters move.
func figures(t testing.TB, h *apptest.Harness, accountID string) map[string]int64 {
	out := map[string]int64{}
	for _, f := range []string{"events", "tokens_in", "tokens_out", "storage_gb", "active_users", "seats"} {
		out[f] = figure(t, h, accountID, f)
	}
	return out
}

// ledgerFigures derive each feature's figure from the admitted entries' values alone: what the
// meters must hold, whatever happened on the way.
func ledgerFigures(t testing.TB, h *apptest.Harness, accountID string, ids ...string) map[string]int64 {
	t.Helper()
	c := metersCatalog(t)
	out := map[string]int64{"events": 0, "tokens_in": 0, "tokens_out": 0, "storage_gb": 0, "active_users": 0, "seats": 0}
	latest := ""
	distinct := map[string]bool{}
	for _, id := range ids {
		e := entry(t, h, accountID, id)
		if !e.Billed() {
			continue
		}
		for _, mv := range e.MeterValues() {
			m, _ := c.Meters.Named(mv.Meter)
			switch m.Aggregation {
			case meter.Max:
				out[m.Feature] = max(out[m.Feature], mv.Value)
			case meter.UniqueCount:
				if !distinct[mv.Distinct] {
					distinct[mv.Distinct] = true
					out[m.Feature]++
					if n := countNew(t, h, accountID, ids, mv.Distinct); n != 1 {
						t.Errorf("the value %q is marked new on %d entries; want exactly one", mv.Distinct, n)
					}
				}
			case meter.Latest:
				// The test events of a LATEST meter carry their time in their id's order.
				if id > latest {
					latest, out[m.Feature] = id, mv.Value
				}
			default:
				out[m.Feature] += mv.Value
			}
		}
	}
	return out
}

// countNew counts the admitted entries that say they counted a distinct value.
func countNew(t testing.TB, h *apptest.Harness, accountID string, ids []string, v string) int {
	n := 0
	for _, id := range ids {
		for _, mv := range entry(t, h, accountID, id).Meters {
			if mv.Distinct == v && mv.New {
				n++
			}
		}
	}
	return n
}

// One llm.call moves events by 1 and each token meter by its value, in the unit's one claim
// transaction; the entry keeps the values it moved, with their dimensions in definition order,
// and each meter's record says what the unit moved.
func TestMeters_OneEventMovesEveryMeterItMatches(t *testing.T) {
	h, w := metered(t)
	h.CreateAccount(t, "acct_m", "free", nil)
	if failed := invoke(t, w, messages(t, h, "acct_m", llmCall("evt_1", 1532, 210), llmCall("evt_2", 8, 2))); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	got := figures(t, h, "acct_m")
	want := map[string]int64{"events": 2, "tokens_in": 1540, "tokens_out": 212, "storage_gb": 0, "active_users": 0, "seats": 0}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("figures %v, want %v", got, want)
	}
	e := entry(t, h, "acct_m", "evt_1")
	wantValues := []ledger.MeterValue{{Meter: "events", Value: 1, Group: []string{""}},
		{Meter: "tokens_in", Value: 1532, Group: []string{"gpt-4", "eu"}}, {Meter: "tokens_out", Value: 210, Group: []string{"gpt-4", "eu"}}}
	if e.Status != ledger.Inserted || !reflect.DeepEqual(e.MeterValues(), wantValues) {
		t.Fatalf("evt_1: %s %+v, want %+v", e.Status, e.MeterValues(), wantValues)
	}
	recs, _, err := h.Worker().Usage.Records(context.Background(), "acct_m", "tokens_in", "2026-11")
	if err != nil || len(recs) != 1 || recs[0].Amount != 1540 || recs[0].Events != 2 || recs[0].Row != usage.BudgetSK {
		t.Fatalf("the unit's record of tokens_in: %+v %v", recs, err)
	}
	out, _, err := h.Worker().Usage.Records(context.Background(), "acct_m", "tokens_out", "2026-11")
	if err != nil || len(out) != 1 || out[0].Amount != 212 || out[0].Events != 2 || out[0].Unit != recs[0].Unit {
		t.Fatalf("the unit's record of tokens_out: %+v %v; the same record as tokens_in's (%s)", out, err, recs[0].Unit)
	}
	res, err := h.Worker().Usage.DB.Query(context.Background(), &dynamodb.QueryInput{
		TableName: aws.String(h.Worker().Usage.Name), KeyConditionExpression: aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: usage.RecordPartition("acct_m", "2026-11")}},
	})
	if err != nil || len(res.Items) != 1 {
		t.Fatalf("the unit's records: %d items %v; one item for both token meters", len(res.Items), err)
	}
}

// A value that is missing, fractional, negative, not a number or past the bound REJECTS its
// event with the reason naming the meter and the pointer, and moves nothing in any meter; the
// unit's other events are billed as usual.
func TestMeters_BadValues_RejectedWithReasons_NothingMoves(t *testing.T) {
	h, w := metered(t)
	h.CreateAccount(t, "acct_bad", "free", nil)
	bad := map[string]struct {
		e    ev
		want string
	}{
		"evt_missing":    {ev{id: "evt_missing", typ: "llm.call", data: map[string]any{"usage": map[string]any{"output_tokens": 3}}}, "meter tokens_in: /usage/input_tokens is missing from the event's data"},
		"evt_fraction":   {ev{id: "evt_fraction", typ: "llm.call", data: map[string]any{"usage": map[string]any{"input_tokens": 1.5, "output_tokens": 3}}}, "meter tokens_in: /usage/input_tokens is 1.5, not an integer"},
		"evt_negative":   {ev{id: "evt_negative", typ: "storage.sampled", data: map[string]any{"gb": -4}}, "meter storage_gb: /gb is -4, below 0"},
		"evt_string":     {ev{id: "evt_string", typ: "seats.set", data: map[string]any{"seats": "12"}}, `meter seats: /seats is "12", not a number`},
		"evt_past":       {ev{id: "evt_past", typ: "storage.sampled", data: map[string]any{"gb": json.Number("9007199254740992")}}, "past the bound 9007199254740991"},
		"evt_user":       {ev{id: "evt_user", typ: "app.login", data: map[string]any{"user_id": map[string]any{"id": 1}}}, "meter users: /user_id is an object"},
		"evt_both_wrong": {ev{id: "evt_both_wrong", typ: "llm.call", data: map[string]any{"usage": map[string]any{"input_tokens": -1}}}, "meter tokens_in: /usage/input_tokens is -1, below 0; meter tokens_out: /usage/output_tokens is missing"},
	}
	var es []ev
	for _, b := range bad {
		es = append(es, b.e)
	}
	es = append(es, llmCall("evt_good", 100, 10))
	if failed := invoke(t, w, map[string]string{"pack": pack(t, h, "acct_bad", es...)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	for id, b := range bad {
		e := entry(t, h, "acct_bad", id)
		if e.Status != ledger.Rejected || e.Billed() || !strings.Contains(e.Reason, b.want) || len(e.Meters) != 0 {
			t.Errorf("%s: %s billed=%v reason %q meters %+v; want REJECTED saying %q", id, e.Status, e.Billed(), e.Reason, e.Meters, b.want)
		}
	}
	want := map[string]int64{"events": 1, "tokens_in": 100, "tokens_out": 10, "storage_gb": 0, "active_users": 0, "seats": 0}
	if got := figures(t, h, "acct_bad"); !reflect.DeepEqual(got, want) {
		t.Fatalf("figures %v, want %v", got, want)
	}
}

// The event that would take a capped meter past its limit is refused whole: it moves none of
// its meters, its reason says the meter, what is committed, the limit and what it needed, and a
// later event of the unit that fits is admitted.
func TestMeters_CapRefusesTheCrossingEventWhole(t *testing.T) {
	h, w := metered(t)
	h.CreateAccount(t, "acct_cap", "free", nil) // tokens_in limit 100000
	p := pack(t, h, "acct_cap", llmCall("evt_a", 60_000, 1), llmCall("evt_b", 50_000, 1), llmCall("evt_c", 30_000, 1))
	if failed := invoke(t, w, map[string]string{"pack": p}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	b := entry(t, h, "acct_cap", "evt_b")
	if b.Status != ledger.Rejected || b.Reason != "monthly limit reached: tokens_in limit is 100000 (meter tokens_in has 60000 committed; this event needs 50000)" {
		t.Fatalf("evt_b: %s %q", b.Status, b.Reason)
	}
	want := map[string]int64{"events": 2, "tokens_in": 90_000, "tokens_out": 2, "storage_gb": 0, "active_users": 0, "seats": 0}
	if got := figures(t, h, "acct_cap"); !reflect.DeepEqual(got, want) {
		t.Fatalf("figures %v, want %v", got, want)
	}
	// At the limit exactly, an event fits; one unit more does not.
	if failed := invoke(t, w, messages(t, h, "acct_cap", llmCall("evt_d", 10_000, 1))); len(failed) != 0 {
		t.Fatal(failed)
	}
	if failed := invoke(t, w, messages(t, h, "acct_cap", llmCall("evt_e", 1, 1))); len(failed) != 0 {
		t.Fatal(failed)
	}
	if d, e := entry(t, h, "acct_cap", "evt_d"), entry(t, h, "acct_cap", "evt_e"); !d.Billed() || e.Status != ledger.Rejected {
		t.Fatalf("evt_d %s, evt_e %s", d.Status, e.Status)
	}
	if got := figure(t, h, "acct_cap", "tokens_in"); got != 100_000 {
		t.Fatalf("tokens_in %d at the limit", got)
	}
}

// MAX keeps the largest value of the cycle, across units; a value above the limit is REJECTED.
func TestMeters_Max_KeepsTheLargest_AboveTheLimitRejected(t *testing.T) {
	h, w := metered(t)
	h.CreateAccount(t, "acct_max", "free", nil) // storage_gb limit 100
	steps := []struct {
		es   []ev
		want int64
	}{
		{[]ev{storage("evt_1", 10), storage("evt_2", 50), storage("evt_3", 30)}, 50},
		{[]ev{storage("evt_4", 40)}, 50},
		{[]ev{storage("evt_5", 70), storage("evt_6", 120)}, 70},
		{[]ev{storage("evt_7", 100)}, 100},
	}
	for i, s := range steps {
		if failed := invoke(t, w, map[string]string{"pack": pack(t, h, "acct_max", s.es...)}); len(failed) != 0 {
			t.Fatalf("step %d failed: %v", i, failed)
		}
		if got := figure(t, h, "acct_max", "storage_gb"); got != s.want {
			t.Fatalf("step %d: storage_gb %d, want %d", i, got, s.want)
		}
	}
	if e := entry(t, h, "acct_max", "evt_6"); e.Status != ledger.Rejected ||
		e.Reason != "monthly limit reached: storage_gb limit is 100 (meter storage_gb: this event's value 120 is above it)" {
		t.Fatalf("evt_6: %s %q", e.Status, e.Reason)
	}
	recs, _, err := h.Worker().Usage.Records(context.Background(), "acct_max", "storage_gb", "2026-11")
	if err != nil || len(recs) != 4 {
		t.Fatalf("records %+v %v; one per unit, a unit below the figure included", recs, err)
	}
}

// UNIQUE_COUNT counts a distinct value once a cycle however often it recurs, in one unit or
// across units (42 and "42" are one value); on a capped plan an event bringing a new value past
// the limit is REJECTED, and an event recurring a counted value is still admitted.
func TestMeters_UniqueCount_OncePerCycle_CapOnNewValues(t *testing.T) {
	h, w := metered(t)
	h.CreateAccount(t, "acct_u", "free", map[string]any{"active_users": 3})
	if failed := invoke(t, w, map[string]string{"pack": pack(t, h, "acct_u", login("evt_1", "ann"), login("evt_2", "bob"), login("evt_3", "ann"))}); len(failed) != 0 {
		t.Fatal(failed)
	}
	if got := figure(t, h, "acct_u", "active_users"); got != 2 {
		t.Fatalf("active_users %d after ann, bob, ann", got)
	}
	if failed := invoke(t, w, messages(t, h, "acct_u", login("evt_4", 42), login("evt_5", "42"), login("evt_6", "bob"))); len(failed) != 0 {
		t.Fatal(failed)
	}
	if got := figure(t, h, "acct_u", "active_users"); got != 3 {
		t.Fatalf("active_users %d after 42, \"42\", bob", got)
	}
	if failed := invoke(t, w, messages(t, h, "acct_u", login("evt_7", "cat"), login("evt_8", "ann"))); len(failed) != 0 {
		t.Fatal(failed)
	}
	if e := entry(t, h, "acct_u", "evt_7"); e.Status != ledger.Rejected ||
		e.Reason != "monthly limit reached: active_users limit is 3 (meter users has 3 distinct values; this event brings a new one)" {
		t.Fatalf("evt_7: %s %q", e.Status, e.Reason)
	}
	if e := entry(t, h, "acct_u", "evt_8"); !e.Billed() {
		t.Fatalf("evt_8 (ann again, at the limit): %s %q", e.Status, e.Reason)
	}
	ids := []string{"evt_1", "evt_2", "evt_3", "evt_4", "evt_5", "evt_6", "evt_7", "evt_8"}
	if got, want := figures(t, h, "acct_u"), ledgerFigures(t, h, "acct_u", ids...); !reflect.DeepEqual(got, want) {
		t.Fatalf("figures %v, the entries say %v", got, want)
	}
}

// LATEST keeps the value of the event with the latest CloudEvents time, whatever the order they
// arrive in; equal times are ordered by event id, the greater later.
func TestMeters_Latest_ByEventTimeThenID(t *testing.T) {
	h, w := metered(t)
	h.CreateAccount(t, "acct_l", "free", nil)
	steps := []struct {
		es   []ev
		want int64
	}{
		{[]ev{seats("evt_b", "2026-11-15T10:00:00Z", 5), seats("evt_a", "2026-11-15T09:00:00Z", 9)}, 5},
		{[]ev{seats("evt_c", "2026-11-15T08:00:00Z", 7)}, 5},
		{[]ev{seats("evt_d", "2026-11-15T10:00:00Z", 3)}, 3},  // the same time as evt_b, a greater id
		{[]ev{seats("evt_0", "2026-11-15T10:00:00Z", 11)}, 3}, // the same time, a smaller id
		{[]ev{seats("evt_e", "2026-11-15T11:00:00.000000001Z", 1)}, 1},
	}
	for i, s := range steps {
		if failed := invoke(t, w, map[string]string{"pack": pack(t, h, "acct_l", s.es...)}); len(failed) != 0 {
			t.Fatalf("step %d failed: %v", i, failed)
		}
		if got := figure(t, h, "acct_l", "seats"); got != s.want {
			t.Fatalf("step %d: seats %d, want %d", i, got, s.want)
		}
	}
}

// aggregationCase is one aggregation's crash-window scenario: the events of a first unit (so the
// meter's row and rev exist, and a distinct value is already counted), then a pack and two
// single events delivered in one invocation.
type aggregationCase struct {
	name    string
	prime   []ev
	pack    []ev
	singles []ev
}

var aggregationCases = []aggregationCase{
	{"Sum", []ev{llmCall("evt_0", 100, 10)},
		[]ev{llmCall("evt_1", 1532, 210), llmCall("evt_2", 7, 1), llmCall("evt_3", 0, 5)},
		[]ev{llmCall("evt_4", 40, 4), llmCall("evt_5", 900, 90)}},
	{"Max", []ev{storage("evt_0", 20)},
		[]ev{storage("evt_1", 35), storage("evt_2", 60), storage("evt_3", 10)},
		[]ev{storage("evt_4", 55), storage("evt_5", 61)}},
	{"UniqueCount", []ev{login("evt_0", "ann")},
		[]ev{login("evt_1", "ann"), login("evt_2", "bob"), login("evt_3", "cat")},
		[]ev{login("evt_4", "bob"), login("evt_5", "dan")}},
	{"Latest", []ev{seats("evt_0", "2026-11-15T09:00:00Z", 3)},
		[]ev{seats("evt_1", "2026-11-15T09:30:00Z", 8), seats("evt_2", "2026-11-15T10:00:00Z", 6), seats("evt_3", "2026-11-15T08:00:00Z", 99)},
		[]ev{seats("evt_4", "2026-11-15T10:30:00Z", 4), seats("evt_5", "2026-11-15T10:45:00Z", 5)}},
}

func (c aggregationCase) ids() []string {
	var ids []string
	for _, es := range [][]ev{c.prime, c.pack, c.singles} {
		for _, e := range es {
			ids = append(ids, e.id)
		}
	}
	return ids
}

// A worker killed in each window of a unit's processing — before and after its archive, after
// its claim, before and after its mark, and right before and right after every DynamoDB write it
// makes — and its messages redelivered, first regrouped (one single alone, then the rest), then
// once more as they came: every meter, of every aggregation, moves exactly as its admitted
// entries say, each event is billed once, and the last delivery moves nothing. Capped (free) and
// counted (plus) accounts alike.
func TestMeters_CrashWindows_EachAggregationMovesOnce(t *testing.T) {
	faults := instrument.NewFaults(nil)
	h := apptest.New(t, apptest.Options{Catalog: metersCatalog(t), DynamoDB: []func(*dynamodb.Options){faults.Option}})
	w := h.Worker().Worker
	type crash struct {
		name string
		hook worker.Hook
		plan instrument.FaultPlan
	}
	var crashes []crash
	for _, p := range []worker.Point{
		{Before: true, Stage: ledger.StageArchive}, {Stage: ledger.StageArchive}, {Stage: worker.StageClaim},
		{Before: true, Stage: ledger.StageMark}, {Stage: ledger.StageMark},
	} {
		crashes = append(crashes, crash{name: p.String(), hook: killAt(p)})
	}
	// The DynamoDB writes of one clean invocation (after the account's first usage is recorded):
	// the claim and the unit's mark.
	h.CreateAccount(t, "acct_probe", "free", nil)
	invokeCase(t, h, w, "acct_probe", aggregationCase{prime: aggregationCases[0].prime})
	faults.SetPlan(nil)
	invokeCase(t, h, w, "acct_probe", aggregationCase{pack: aggregationCases[0].pack, singles: aggregationCases[0].singles})
	writes := faults.Writes()
	if writes != 2 {
		t.Fatalf("a clean invocation made %d writes; want the claim and the mark", writes)
	}
	for n := 1; n <= writes; n++ {
		for _, kind := range []instrument.Fault{instrument.CrashBefore, instrument.CrashAfter} {
			name := map[instrument.Fault]string{instrument.CrashBefore: "before", instrument.CrashAfter: "after"}[kind]
			crashes = append(crashes, crash{name: fmt.Sprintf("%s write %d", name, n), plan: func(op string, _, write int) instrument.Fault {
				if write == n && (op == "TransactWriteItems" || op == "PutItem" || op == "UpdateItem") {
					return kind
				}
				return instrument.NoFault
			}})
		}
	}
	for _, c := range aggregationCases {
		for i, cr := range crashes {
			t.Run(c.name+"/"+strings.ReplaceAll(cr.name, " ", "_"), func(t *testing.T) {
				for _, tier := range []string{"free", "plus"} {
					acct := fmt.Sprintf("acct_%s_%d_%s", strings.ToLower(c.name), i, tier)
					h.CreateAccount(t, acct, tier, nil)
					invokeCase(t, h, w, acct, aggregationCase{prime: c.prime})
					bodies := caseBodies(t, h, acct, c)
					w.Hook = cr.hook
					faults.SetPlan(cr.plan)
					failed := invoke(t, w, bodies)
					w.Hook = nil
					fired := faults.Fired()
					faults.SetPlan(nil)
					if cr.plan != nil && len(fired) != 1 {
						t.Fatalf("%s: the fault fired %v", tier, fired)
					}
					if len(failed) == 0 {
						t.Fatalf("%s: killed %s, yet no message failed", tier, cr.name)
					}
					// Regrouped: one single alone, then the rest; then everything again.
					first := c.singles[0].id
					if f := invoke(t, w, map[string]string{first: bodies[first]}); len(f) != 0 {
						t.Fatalf("%s: redelivery of %s alone failed: %v", tier, first, f)
					}
					rest := map[string]string{}
					for k, v := range bodies {
						if k != first {
							rest[k] = v
						}
					}
					if f := invoke(t, w, rest); len(f) != 0 {
						t.Fatalf("%s: redelivery of the rest failed: %v", tier, f)
					}
					settled := figures(t, h, acct)
					if want := ledgerFigures(t, h, acct, c.ids()...); !reflect.DeepEqual(settled, want) {
						t.Fatalf("%s after the crash %s: figures %v, the entries say %v", tier, cr.name, settled, want)
					}
					billed := int64(0)
					for _, id := range c.ids() {
						e := entry(t, h, acct, id)
						if e.Status != ledger.Inserted && e.Status != ledger.Rejected {
							t.Fatalf("%s: %s left %s", tier, id, e.Status)
						}
						if e.Billed() {
							billed++
						}
					}
					if billed != settled["events"] || billed != int64(len(c.ids())) {
						t.Fatalf("%s: %d of %d events billed, the events meter says %d", tier, billed, len(c.ids()), settled["events"])
					}
					if f := invoke(t, w, bodies); len(f) != 0 || !reflect.DeepEqual(figures(t, h, acct), settled) {
						t.Fatalf("%s: a further delivery failed (%v) or moved a meter: %v, was %v", tier, f, figures(t, h, acct), settled)
					}
				}
			})
		}
	}
}

// caseBodies are the invocation's messages: the pack and each single.
func caseBodies(t testing.TB, h *apptest.Harness, acct string, c aggregationCase) map[string]string {
	bodies := messages(t, h, acct, c.singles...)
	if len(c.pack) > 0 {
		bodies["pack"] = pack(t, h, acct, c.pack...)
	}
	return bodies
}

// invokeCase runs the case's messages (or, with only prime set, its first unit) cleanly.
func invokeCase(t testing.TB, h *apptest.Harness, w *worker.Worker, acct string, c aggregationCase) {
	t.Helper()
	bodies := caseBodies(t, h, acct, c)
	if len(c.prime) > 0 {
		bodies = map[string]string{"prime": pack(t, h, acct, c.prime...)}
	}
	if failed := invoke(t, w, bodies); len(failed) != 0 {
		t.Fatalf("%s: %v", acct, failed)
	}
}

// Invocations racing on one account's capped meters — overlapping groupings of the same
// messages, run at once, then everything redelivered — never take a meter past its limit, count
// a distinct value once, keep the largest value, and end with every figure equal to what the
// admitted entries say.
func TestMeters_CapsExactUnderConcurrentInvocations(t *testing.T) {
	h, w := metered(t)
	h.CreateAccount(t, "acct_race", "free", map[string]any{"tokens_in": 100_000, "active_users": 5})
	var es []ev
	for i := range 30 {
		es = append(es, llmCall(fmt.Sprintf("evt_t%02d", i), int64(7_000+i*131), int64(i)))
	}
	for i := range 20 {
		es = append(es, login(fmt.Sprintf("evt_u%02d", i), fmt.Sprintf("user_%d", i%8)))
	}
	for i := range 10 {
		es = append(es, storage(fmt.Sprintf("evt_s%02d", i), int64((i*37)%97)))
	}
	all := messages(t, h, "acct_race", es...)
	var ids []string
	for id := range all {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	groups := make([]map[string]string, 4)
	for g := range groups {
		groups[g] = map[string]string{}
	}
	for i, id := range ids {
		groups[i%4][id] = all[id]
		groups[(i*7+1)%4][id] = all[id] // most messages in two invocations at once
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() { defer wg.Done(); _ = invokeQuiet(w, g) }()
	}
	wg.Wait()
	if failed := invoke(t, w, all); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	got := figures(t, h, "acct_race")
	if want := ledgerFigures(t, h, "acct_race", ids...); !reflect.DeepEqual(got, want) {
		t.Fatalf("figures %v, the entries say %v", got, want)
	}
	if got["tokens_in"] > 100_000 || got["active_users"] != 5 || got["storage_gb"] != 88 {
		t.Fatalf("figures %v: tokens_in past its limit, or distinct users not capped at 5, or the max lost", got)
	}
	// Exact, not merely under: an event refused at the cap needed more than was left when it was
	// refused, which is at least what is left now.
	for i := range 30 {
		e := entry(t, h, "acct_race", fmt.Sprintf("evt_t%02d", i))
		if e.Status == ledger.Rejected && int64(7_000+i*131) <= 100_000-got["tokens_in"] {
			t.Errorf("%s needed %d and was refused (%q) with %d left", e.EventID, 7_000+i*131, e.Reason, 100_000-got["tokens_in"])
		}
	}
}

// A unit grows while its claim fits one transaction: events that each bring a distinct value
// (an entry and a marker each) make smaller units than events counted alone, and a pack queued
// before its meters needed that many items is split in its own order, its message acked once
// every part is finished.
func TestMeters_UnitsBoundedByTheItemsTheirClaimNeeds(t *testing.T) {
	calls := instrument.NewCallCounter()
	h := apptest.New(t, apptest.Options{Catalog: metersCatalog(t), DynamoDB: calls.Options().DynamoDB})
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_items", "plus", nil)
	invokeCase(t, h, w, "acct_items", aggregationCase{prime: []ev{login("evt_warm", "warm")}})
	var singlesEs, packEs []ev
	for i := range 60 {
		singlesEs = append(singlesEs, login(fmt.Sprintf("evt_s%02d", i), fmt.Sprintf("s%d", i)))
		packEs = append(packEs, login(fmt.Sprintf("evt_p%02d", i), fmt.Sprintf("p%d", i)))
	}
	calls.Reset()
	if failed := invoke(t, w, messages(t, h, "acct_items", singlesEs...)); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if got := calls.Snapshot()["DynamoDB TransactWriteItems"]; got != 2 {
		t.Errorf("%d claim transactions for 60 events bringing 60 distinct values; want 2", got)
	}
	calls.Reset()
	if failed := invoke(t, w, map[string]string{"pack": pack(t, h, "acct_items", packEs...)}); len(failed) != 0 {
		t.Fatalf("the oversize pack failed: %v", failed)
	}
	if got := calls.Snapshot()["DynamoDB TransactWriteItems"]; got != 2 {
		t.Errorf("%d claim transactions for a pack of 60 distinct values; want its 2 parts", got)
	}
	for _, e := range append(singlesEs, packEs...) {
		if got := entry(t, h, "acct_items", e.id); got.Status != ledger.Inserted {
			t.Fatalf("%s: %s", e.id, got.Status)
		}
	}
	if got := figure(t, h, "acct_items", "active_users"); got != 121 {
		t.Fatalf("active_users %d, want 121", got)
	}
	// A redelivery of the pack, in its parts again, writes nothing.
	calls.Reset()
	if failed := invoke(t, w, map[string]string{"pack": pack(t, h, "acct_items", packEs...)}); len(failed) != 0 {
		t.Fatalf("the redelivered pack failed: %v", failed)
	}
	if got := calls.Snapshot()["DynamoDB TransactWriteItems"]; got != 0 {
		t.Errorf("the redelivery made %d claim transactions", got)
	}
}

// A single-event message alone in its invocation (sparse traffic) is a unit of one: its values
// move (or it is REJECTED with its reason) exactly as in a unit of several, an event with the
// events count alone moves that, and a redelivery moves nothing again.
func TestMeters_SingleEventMessageAlone_IsAUnitOfOne(t *testing.T) {
	h := apptest.New(t, apptest.Options{Catalog: metersCatalog(t)})
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_pe", "free", nil)
	ctx := context.Background()
	good := single(t, h, "acct_pe", llmCall("evt_llm", 1532, 210))
	for delivery := 0; delivery < 2; delivery++ {
		if res, err := w.Process(ctx, good); err != nil || res.Final != ledger.Inserted {
			t.Fatalf("delivery %d: %+v %v", delivery, res, err)
		}
	}
	bad := single(t, h, "acct_pe", ev{id: "evt_bad", typ: "storage.sampled", data: map[string]any{"gb": 1.5}})
	if res, err := w.Process(ctx, bad); err != nil || res.Final != ledger.Rejected {
		t.Fatalf("bad value: %+v %v", res, err)
	}
	if e := entry(t, h, "acct_pe", "evt_bad"); !strings.Contains(e.Reason, "meter storage_gb: /gb is 1.5, not an integer") {
		t.Fatalf("bad value's reason %q", e.Reason)
	}
	plain := single(t, h, "acct_pe", ev{id: "evt_plain", typ: "api.call", data: map[string]any{"kind": ""}})
	if res, err := w.Process(ctx, plain); err != nil || res.Final != ledger.Inserted {
		t.Fatalf("plain event: %+v %v", res, err)
	}
	want := map[string]int64{"events": 2, "tokens_in": 1532, "tokens_out": 210, "storage_gb": 0, "active_users": 0, "seats": 0}
	if got := figures(t, h, "acct_pe"); !reflect.DeepEqual(got, want) {
		t.Fatalf("figures %v, want %v", got, want)
	}
}

// Entries an earlier release's per-event worker claimed alone and never billed are planned by the
// unit that meets them like unclaimed events: each is read for its meters, checked against the
// caps in unit order, and put over its old entry — admitted with the values it moved, at the
// instants its first claim fixed and with a row of its own, or REJECTED whole with its reason (a
// cap it would cross, a bad value). A distinct value one of them counts first is not counted
// again by the event after it, and a redelivery moves nothing.
func TestMeters_EntriesClaimedAloneByAnEarlierRelease_PlannedLikeUnclaimedOnes(t *testing.T) {
	h, w := metered(t)
	h.CreateAccount(t, "acct_up", "free", map[string]any{"tokens_in": 2000})
	old := h.Clock.Now().Add(-time.Minute).UnixMilli()
	for _, id := range []string{"evt_t1", "evt_t2", "evt_bad", "evt_u"} {
		claimedAlone(t, h, "acct_up", id, old)
	}
	// evt_bad carries a value the meter refuses: storage_gb's /gb is not an integer.
	bad := ev{id: "evt_bad", typ: "storage.sampled", data: map[string]any{"gb": 1.5}}
	body := pack(t, h, "acct_up", llmCall("evt_t1", 1500, 100), llmCall("evt_t2", 1000, 100),
		bad, login("evt_u", "alice"), login("evt_new", "alice"))
	ctx := context.Background()
	if _, err := w.Process(ctx, body); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"evt_t1", "evt_u"} {
		e := entry(t, h, "acct_up", id)
		if e.Status != ledger.Inserted || !e.Billed() || e.RowInsertedAtMs != old || e.CreatedAtMs != old || e.RowInUnit || len(e.Meters) == 0 {
			t.Errorf("%s taken over: %+v; want INSERTED with its values, at its first claim's instants, its row its own", id, e)
		}
	}
	if e := entry(t, h, "acct_up", "evt_t2"); e.Status != ledger.Rejected || e.Billed() || !strings.Contains(e.Reason, "meter tokens_in") || e.CreatedAtMs != old {
		t.Errorf("evt_t2 past the tokens cap: %s billed=%v reason %q created %d", e.Status, e.Billed(), e.Reason, e.CreatedAtMs)
	}
	if e := entry(t, h, "acct_up", "evt_bad"); e.Status != ledger.Rejected || e.Billed() || !strings.Contains(e.Reason, "/gb") {
		t.Errorf("evt_bad with a bad value: %s billed=%v reason %q", e.Status, e.Billed(), e.Reason)
	}
	if n := countNew(t, h, "acct_up", []string{"evt_u", "evt_new"}, "alice"); n != 1 {
		t.Errorf("alice is counted new by %d entries; want the one taken over, first in unit order", n)
	}
	want := map[string]int64{"events": 3, "tokens_in": 1500, "tokens_out": 100, "storage_gb": 0, "active_users": 1, "seats": 0}
	if got := figures(t, h, "acct_up"); !reflect.DeepEqual(got, want) {
		t.Fatalf("figures %v, want %v", got, want)
	}
	if got := ledgerFigures(t, h, "acct_up", "evt_t1", "evt_t2", "evt_bad", "evt_u", "evt_new"); !reflect.DeepEqual(got, want) {
		t.Errorf("the entries' values make %v, the figures are %v", got, want)
	}
	if _, err := w.Process(ctx, body); err != nil {
		t.Fatal(err)
	}
	if got := figures(t, h, "acct_up"); !reflect.DeepEqual(got, want) {
		t.Errorf("after the redelivery the figures are %v, want %v", got, want)
	}
}
