package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
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

// metered is a harness on the meters catalog, its worker in batch mode.
func metered(t testing.TB) (*apptest.Harness, *worker.Worker) {
	t.Helper()
	h := apptest.New(t, apptest.Options{Catalog: metersCatalog(t), BatchMode: true})
	return h, coalescing(t, h)
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
