package worker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Bounds of the schedules the usage query is compared with the ledger after.
const (
	querySchedules   = 3
	queryEventCount  = 70
	queryMaxMessages = 3  // messages an event is sent in
	queryMaxPack     = 12 // events a packed message holds
	queryMaxBatch    = 10 // messages an invocation holds
	queryInvocations = 4  // invocations at once
	queryCrashShare  = 0.15
	queryMaxRounds   = 200 // invocation rounds until every message is finished
	querySpan        = 50 * time.Hour
)

// scheduled is one event of a schedule and the instant it was received.
type scheduled struct {
	ev
	receivedAt time.Time
}

// A schedule through the worker: events of every meter (each aggregation, with and without
// dimensions, some crossing the caps) received over two days around a cycle's end, each sent in
// one to three messages (singles and packs of random make-up), each message delivered once or
// twice, in invocations of random make-up, four at a time, the worker killed at random points and
// what failed delivered again until everything is finished. Then, for every meter, window and
// grouping, the usage query equals what the ledger's entries say was billed, and a CYCLE's value
// equals the cycle's figure on the usage rows.
func TestQuery_EqualsTheLedger_AfterRandomSchedulesThroughTheWorker(t *testing.T) {
	h, w := metered(t)
	catalog := metersCatalog(t)
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	boundary := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	start := boundary.Add(-querySpan / 2)
	store := &rollup.Store{DB: h.Env.Clients.DynamoDB, Table: h.Env.Names.Table(resources.TableRollups), ConsistentRead: true,
		Now: func() time.Time { return boundary.Add(querySpan) }}
	for seed := range uint64(querySchedules) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x9e7))
			acct := fmt.Sprintf("acct_q%d", seed)
			h.CreateAccount(t, acct, "free", map[string]any{"tokens_in": 40_000, "active_users": 6})
			events := queryEvents(rng, start)
			deliveries := queryMessages(t, h, rng, acct, events)
			crashes, rounds := runSchedule(t, w, rng, deliveries)
			billed := billedEntries(t, h, acct, events)
			t.Logf("%d events in %d deliveries, %d killed invocations, %d rounds: %d billed, %d rejected",
				len(events), len(deliveries), crashes, rounds, len(billed), len(events)-len(billed))
			rows := 0
			for _, name := range catalog.Meters.Names() {
				d, _ := catalog.Meters.Named(name)
				m := rollup.Meter{Name: d.Name, Aggregation: d.Aggregation, Dimensions: d.Dimensions.Names()}
				k0 := time.Date(2026, 11, 29, 0, 0, 0, 0, kolkata)
				for _, q := range []rollup.QueryInput{
					{Window: rollup.Cycle, From: cycle.At(start, 0).Start, To: cycle.At(boundary, 0).End},
					{Window: rollup.Day, From: start.Truncate(24 * time.Hour), To: boundary.Add(48 * time.Hour)},
					{Window: rollup.Day, Zone: kolkata, From: k0, To: k0.AddDate(0, 0, 4)},
					{Window: rollup.Hour, From: start.Truncate(time.Hour), To: start.Add(querySpan + time.Hour).Truncate(time.Hour)},
					{Window: rollup.Minute, From: boundary.Add(-12 * time.Hour), To: boundary.Add(12 * time.Hour)},
				} {
					q.Account, q.Meter = acct, m
					for _, groupBy := range [][]string{nil, m.Dimensions} {
						q.GroupBy = groupBy
						res, err := store.Query(context.Background(), q)
						if err != nil {
							t.Fatalf("%s by %s: %v", m.Name, q.Window, err)
						}
						rows += len(res.Rows)
						got, want := rowLines(res.Rows), rowLines(fromLedger(q, res.Windows, billed))
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("%s by %s (zone %v, grouped by %v): the query and the ledger differ:\nonly in the query  %q\nonly in the ledger %q",
								m.Name, q.Window, q.Zone, groupBy, minus(got, want), minus(want, got))
						}
						if q.Window == rollup.Cycle && groupBy == nil {
							for _, r := range res.Rows {
								if fig := cycleFigure(t, h, acct, d.Feature, r.Start); fig != r.Value {
									t.Errorf("%s in cycle %s: the query says %d, the usage rows %d", m.Name, r.Start.Format("2006-01"), r.Value, fig)
								}
							}
						}
					}
				}
			}
			t.Logf("%d rows compared", rows)
		})
	}
}

// queryEvents are a schedule's events, received over querySpan from start, on a grid of seconds
// so that several share a minute.
func queryEvents(rng *rand.Rand, start time.Time) []scheduled {
	out := make([]scheduled, queryEventCount)
	for i := range out {
		at := start.Add(time.Duration(rng.Int64N(int64(querySpan/time.Second))) * time.Second)
		if rng.IntN(3) == 0 {
			at = start.Add(querySpan/2 - time.Duration(rng.IntN(600))*time.Second) // a busy ten minutes before the cycle ends
		}
		id := fmt.Sprintf("evt_%02d", i)
		var e ev
		switch rng.IntN(5) {
		case 0:
			e = llmCall(id, rng.Int64N(9_000), rng.Int64N(500))
			e.data["model"] = []string{"gpt-4", "mini"}[rng.IntN(2)]
			if rng.IntN(3) == 0 {
				delete(e.data, "region") // a missing dimension is the empty value
			}
		case 1:
			e = storage(id, rng.Int64N(90))
		case 2:
			e = login(id, fmt.Sprintf("user_%d", rng.IntN(9)))
		case 3:
			e = seats(id, at.Add(-time.Duration(rng.IntN(30))*time.Minute).Truncate(5*time.Minute).Format(time.RFC3339), rng.Int64N(40))
			e.data["team"] = []string{"a", "b"}[rng.IntN(2)]
		default:
			e = ev{id: id, typ: "api.call", data: map[string]any{"kind": []string{"read", "write"}[rng.IntN(2)]}}
		}
		out[i] = scheduled{ev: e, receivedAt: at}
	}
	return out
}

// queryMessages are the deliveries of a schedule: each event in one to three messages, each
// message delivered once or twice, shuffled. A pack holds events of one received instant, as
// ingest packs one request's.
func queryMessages(t *testing.T, h *apptest.Harness, rng *rand.Rand, acct string, events []scheduled) []string {
	t.Helper()
	var bodies []string
	for _, e := range events {
		for range 1 + rng.IntN(queryMaxMessages) {
			h.Clock.Set(e.receivedAt)
			if rng.IntN(2) == 0 {
				bodies = append(bodies, single(t, h, acct, e.ev))
				continue
			}
			// A pack of events received the same second as this one, this one included.
			var group []ev
			for _, o := range events {
				if o.receivedAt.Equal(e.receivedAt) && len(group) < queryMaxPack && (o.id == e.id || rng.IntN(2) == 0) {
					group = append(group, o.ev)
				}
			}
			bodies = append(bodies, pack(t, h, acct, group...))
		}
	}
	var out []string
	for _, b := range bodies {
		for range 1 + rng.IntN(2) {
			out = append(out, b)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// runSchedule delivers the messages in invocations of random make-up, four at a time, the worker
// killed at random points; what failed is delivered again, until every message is finished.
func runSchedule(t *testing.T, w *worker.Worker, rng *rand.Rand, pending []string) (crashes, rounds int) {
	t.Helper()
	var mu sync.Mutex
	crash := rand.New(rand.NewPCG(rng.Uint64(), 1))
	w.Hook = func(_ context.Context, p worker.Point) error {
		mu.Lock()
		defer mu.Unlock()
		if crash.Float64() < queryCrashShare {
			crashes++
			return fmt.Errorf("%s: %w", p, errKilled)
		}
		return nil
	}
	defer func() { w.Hook = nil }()
	for round := 0; len(pending) > 0; round++ {
		if round == queryMaxRounds {
			t.Fatalf("%d messages still unfinished after %d rounds", len(pending), queryMaxRounds)
		}
		if round > queryMaxRounds/2 {
			mu.Lock()
			w.Hook = nil // the last rounds finish what is left
			mu.Unlock()
		}
		var batches []map[string]string
		for len(pending) > 0 {
			n := min(len(pending), 1+rng.IntN(queryMaxBatch))
			b := map[string]string{}
			for i, body := range pending[:n] {
				b[fmt.Sprintf("m%03d", i)] = body
			}
			batches = append(batches, b)
			pending = pending[n:]
		}
		var (
			wg     sync.WaitGroup
			failMu sync.Mutex
			again  []string
		)
		sem := make(chan struct{}, queryInvocations)
		for _, b := range batches {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				failed := invoke(t, w, b)
				failMu.Lock()
				for _, id := range failed {
					again = append(again, b[id])
				}
				failMu.Unlock()
			}()
		}
		wg.Wait()
		rng.Shuffle(len(again), func(i, j int) { again[i], again[j] = again[j], again[i] })
		pending = again
		rounds = round + 1
	}
	return crashes, rounds
}

// billedEvent is an event as the ledger billed it.
type billedEvent struct {
	scheduled
	entry ledger.Entry
}

// billedEntries reads every event's entry; those that were billed.
func billedEntries(t *testing.T, h *apptest.Harness, acct string, events []scheduled) []billedEvent {
	t.Helper()
	var out []billedEvent
	for _, e := range events {
		en := entry(t, h, acct, e.id)
		if en.Status != ledger.Inserted && en.Status != ledger.Rejected {
			t.Fatalf("%s ended %s", e.id, en.Status)
		}
		if en.Billed() {
			out = append(out, billedEvent{e, en})
		}
	}
	return out
}

// fromLedger is the query's answer computed from the ledger alone: each billed entry's values,
// in the window of the instant its event was received, folded as the meter aggregates (LATEST by
// the event's time, then id).
func fromLedger(q rollup.QueryInput, windows []rollup.Span, billed []billedEvent) []rollup.Row {
	type acc struct {
		group map[string]string
		value int64
		order string
	}
	byWindow := map[int]map[string]*acc{}
	for _, b := range billed {
		t := time.UnixMilli(b.entry.ReceivedAtMs)
		w := sort.Search(len(windows), func(i int) bool { return windows[i].End.After(t) })
		if w == len(windows) || t.Before(windows[w].Start) {
			continue
		}
		for _, mv := range b.entry.MeterValues() {
			if mv.Meter != q.Meter.Name || q.Meter.Aggregation == meter.UniqueCount && !mv.New {
				continue
			}
			group := map[string]string{}
			for _, d := range q.GroupBy {
				for i, name := range q.Meter.Dimensions {
					if name == d && i < len(mv.Group) {
						group[d] = mv.Group[i]
					}
				}
			}
			value := mv.Value
			if q.Meter.Aggregation == meter.UniqueCount {
				value = 1
			}
			order := ""
			if q.Meter.Aggregation == meter.Latest {
				at, _ := time.Parse(time.RFC3339, b.time)
				order = rollup.LatestOrderKey(at.UnixMilli(), b.id)
			}
			key := fmt.Sprint(group)
			if byWindow[w] == nil {
				byWindow[w] = map[string]*acc{}
			}
			a := byWindow[w][key]
			switch {
			case a == nil:
				byWindow[w][key] = &acc{group: group, value: value, order: order}
			case q.Meter.Aggregation == meter.Max:
				a.value = max(a.value, value)
			case q.Meter.Aggregation == meter.Latest:
				if order > a.order {
					a.value, a.order = value, order
				}
			default:
				a.value += value
			}
		}
	}
	var rows []rollup.Row
	for w := range windows {
		for _, a := range byWindow[w] {
			rows = append(rows, rollup.Row{Span: windows[w], Group: a.group, Value: a.value})
		}
	}
	return rows
}

// cycleFigure is a feature's figure on the usage rows for the cycle starting at start.
func cycleFigure(t *testing.T, h *apptest.Harness, acct, feature string, start time.Time) int64 {
	t.Helper()
	tot, err := h.Worker().Usage.Read(context.Background(), acct, feature, start.Format("2006-01"))
	if err != nil {
		t.Fatal(err)
	}
	return tot.Used
}

func rowLines(rows []rollup.Row) []string {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s %v other=%v %d", r.Start.Format(time.RFC3339), r.Group, r.Other, r.Value))
	}
	sort.Strings(out)
	return out
}

// minus is the lines of a that b lacks.
func minus(a, b []string) []string {
	in := map[string]bool{}
	for _, l := range b {
		in[l] = true
	}
	var out []string
	for _, l := range a {
		if !in[l] {
			out = append(out, l)
		}
	}
	return out
}

// queryWideGroups is how many distinct models the bound test sends, each in a unit of its own:
// past what one hour item keeps (rollup.MaxItemGroupBytes), so some land in the other group.
const queryWideGroups = 70

// An hour's groups are bounded across units, not only within one: each unit reads the hour item
// of a meter with dimensions before it plans, so once the item is full a new model is counted in
// the other group, in the hour and the minute items alike, and the query still adds up to what
// the ledger billed.
func TestQuery_AnHoursGroupsBoundedAcrossUnits(t *testing.T) {
	h, w := metered(t)
	acct := "acct_wide"
	h.CreateAccount(t, acct, "plus", nil)
	start := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	var total int64
	for i := range queryWideGroups {
		h.Clock.Set(start.Add(time.Duration(i) * 30 * time.Second))
		e := llmCall(fmt.Sprintf("evt_w%02d", i), int64(100+i), 1)
		e.data["model"] = fmt.Sprintf("model-%02d-%s", i, strings.Repeat("x", 54))
		e.data["region"] = strings.Repeat("r", 64) // groups of about 150 bytes: some 54 fill an item
		total += int64(100 + i)
		if failed := invoke(t, w, map[string]string{"m": single(t, h, acct, e)}); len(failed) != 0 {
			t.Fatalf("event %d failed", i)
		}
	}
	store := &rollup.Store{DB: h.Env.Clients.DynamoDB, Table: h.Env.Names.Table(resources.TableRollups), ConsistentRead: true,
		Now: func() time.Time { return start.Add(24 * time.Hour) }}
	m := rollup.Meter{Name: "tokens_in", Aggregation: meter.Sum, Dimensions: []string{"model", "region"}}
	for _, window := range []rollup.Window{rollup.Hour, rollup.Minute} {
		to := start.Add(time.Hour)
		res, err := store.Query(context.Background(), rollup.QueryInput{Account: acct, Meter: m, Window: window,
			From: start, To: to, GroupBy: []string{"model"}})
		if err != nil {
			t.Fatal(err)
		}
		named, other, sum := map[string]bool{}, int64(0), int64(0)
		for _, r := range res.Rows {
			sum += r.Value
			if r.Other {
				other += r.Value
				continue
			}
			named[r.Group["model"]] = true
		}
		if sum != total {
			t.Errorf("by %s: the rows add up to %d; the ledger billed %d", window, sum, total)
		}
		if other == 0 || len(named) >= queryWideGroups {
			t.Errorf("by %s: %d models named and %d in the other group; an hour item keeps at most %d bytes of groups",
				window, len(named), other, rollup.MaxItemGroupBytes)
		}
	}
}
