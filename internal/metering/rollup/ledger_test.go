package rollup_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Bounds of the randomized schedules.
const (
	ledgerSchedules   = 16
	ledgerEvents      = 100
	ledgerMaxUnit     = 12
	ledgerPollers     = 8
	ledgerClaimLaps   = 40
	ledgerSpan        = 3 * 24 * time.Hour
	ledgerMaxCopies   = 3
	ledgerMinuteRange = 24 * time.Hour
	// ledgerMaxPause bounds the pause of a claim between its read and its commit.
	ledgerMaxPause = 10 * time.Millisecond
)

// The meters of the schedules: one of each aggregation, with and without dimensions.
var ledgerMeters = []rollup.Meter{
	{Name: "tokens", Aggregation: meter.Sum, Dimensions: []string{"model", "region"}},
	{Name: "calls", Aggregation: meter.Count},
	{Name: "peak", Aggregation: meter.Max, Dimensions: []string{"region"}},
	{Name: "seats", Aggregation: meter.Latest},
	{Name: "users", Aggregation: meter.UniqueCount, Dimensions: []string{"model"}},
}

// usageEvent is one event of a schedule: what it carries for each meter.
type usageEvent struct {
	id                  string
	receivedAt          time.Time
	happened            time.Time // its CloudEvents time (LATEST's order)
	model, region, user string
	tokens, gb, seats   int64
}

// contributions are e's parts in the meters; firstUser says whether its claim is the first to
// see its user in the cycle (UNIQUE_COUNT counts it there).
func (e usageEvent) contributions(firstUser bool) []meter.Contribution {
	ms := e.receivedAt.UnixMilli()
	cs := []meter.Contribution{
		{Meter: "tokens", Aggregation: meter.Sum, AtMs: ms, Group: []string{e.model, e.region}, Value: e.tokens},
		{Meter: "calls", Aggregation: meter.Count, AtMs: ms, Value: 1},
		{Meter: "peak", Aggregation: meter.Max, AtMs: ms, Group: []string{e.region}, Value: e.gb},
		{Meter: "seats", Aggregation: meter.Latest, AtMs: ms, Value: e.seats, OrderKey: rollup.LatestOrderKey(e.happened.UnixMilli(), e.id)},
	}
	if firstUser {
		cs = append(cs, meter.Contribution{Meter: "users", Aggregation: meter.UniqueCount, AtMs: ms, Group: []string{e.model}, Value: 1})
	}
	return cs
}

// claimStore stands in for the worker's claim until the worker carries the rollup writes: one
// transaction puts each unclaimed event's ledger entry (conditional on its absence, the claim),
// the UNIQUE_COUNT markers of the users it sees first in its cycle (each conditional on its
// absence), and the unit's rollup writes. A cancelled transaction is resolved by reading the
// entries and markers again, strongly consistent, and claiming what is still unclaimed.
type claimStore struct {
	db      *dynamodb.Client
	ledger  string
	rollups *rollup.Store
	account string
	anchor  int
}

func (c *claimStore) entryKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(ledger.Key(c.account, id))}
}

func (c *claimStore) markerKey(e usageEvent) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(fmt.Sprintf("#unique#%s#users#%s#%s", c.account, cycle.At(e.receivedAt, c.anchor).Label(), e.user))}
}

func (c *claimStore) read(ctx context.Context, keys []map[string]types.AttributeValue) (map[string]bool, error) {
	present := map[string]bool{}
	items, err := dynamo.BatchGet(ctx, c.db, c.ledger, keys)
	for _, it := range items {
		present[dynamo.Str(it, "pk")] = true
	}
	return present, err
}

// claimUnit claims a unit (events delivered together, copies included) in bounded laps.
func (c *claimStore) claimUnit(ctx context.Context, unit []usageEvent) error {
	for lap := 0; lap < ledgerClaimLaps; lap++ {
		var keys []map[string]types.AttributeValue
		seen := map[string]bool{}
		var distinct []usageEvent
		for _, e := range unit {
			if !seen[e.id] {
				seen[e.id] = true
				distinct = append(distinct, e)
				keys = append(keys, c.entryKey(e.id))
			}
			// Events of one user share a marker; a BatchGetItem refuses a key listed twice.
			if m := dynamo.Str(c.markerKey(e), "pk"); !seen[m] {
				seen[m] = true
				keys = append(keys, c.markerKey(e))
			}
		}
		present, err := c.read(ctx, keys)
		if err != nil {
			return err
		}
		var claim []types.TransactWriteItem
		var cs []meter.Contribution
		marked := map[string]bool{}
		for _, e := range distinct {
			if present[ledger.Key(c.account, e.id)] {
				continue // claimed before: a copy, or a redelivery
			}
			marker := dynamo.Str(c.markerKey(e), "pk")
			first := !present[marker] && !marked[marker]
			entry := c.entryKey(e.id)
			entry["receivedAtMs"], entry["firstUser"] = dynamo.N(e.receivedAt.UnixMilli()), &types.AttributeValueMemberBOOL{Value: first}
			claim = append(claim, put(c.ledger, entry))
			if first {
				marked[marker] = true
				claim = append(claim, put(c.ledger, c.markerKey(e)))
			}
			cs = append(cs, e.contributions(first)...)
		}
		if len(claim) == 0 {
			return nil
		}
		err = c.rollups.Apply(ctx, c.account, cs, claim...)
		if !errors.Is(err, rollup.ErrCancelled) {
			return err
		}
	}
	return fmt.Errorf("a unit still cancelled after %d laps", ledgerClaimLaps)
}

func put(table string, item map[string]types.AttributeValue) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: item,
		ConditionExpression: aws.String("attribute_not_exists(#pk)"), ExpressionAttributeNames: map[string]string{"#pk": "pk"}}}
}

// A schedule: events over three days around a cycle's end, each delivered one to three times in
// units of random make-up, the units claimed by eight pollers at once, each claim pausing a
// little between its read and its commit (pausingTransactions). Afterwards the usage query,
// for every meter, window and grouping, equals what the ledger's entries say was billed — each
// event once, in the window of the instant it was received.
func TestQuery_EqualsTheLedger_AfterRandomSchedulesWithCopiesAndRedeliveries(t *testing.T) {
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(ledgerSchedules) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			// Fresh tables for each schedule: the emulator's reads cost what its tables hold.
			s, env := newStore(t, tableDef(resources.TableLedger))
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			anchor := []int{0, 1, 15, 28}[rng.IntN(4)]
			// Three days ending two days into a cycle: the range crosses a cycle boundary.
			boundary := cycle.At(now, anchor).Start
			start := boundary.Add(-ledgerSpan + 48*time.Hour).Truncate(time.Hour)
			queryNow := start.Add(ledgerSpan + time.Hour)
			store := *s
			store.Now = func() time.Time { return queryNow }
			store.DB = pausingTransactions(env.Clients.DynamoDB)
			c := &claimStore{db: env.Clients.DynamoDB, ledger: env.Names.Table(resources.TableLedger), rollups: &store,
				account: "acct_s" + strconv.FormatUint(seed, 10), anchor: anchor}
			events := randomEvents(rng, start)
			units := deliveries(rng, events)
			var wg sync.WaitGroup
			errs := make(chan error, len(units))
			next := make(chan []usageEvent)
			for range ledgerPollers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for u := range next {
						errs <- c.claimUnit(context.Background(), u)
					}
				}()
			}
			for _, u := range units {
				next <- u
			}
			close(next)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			billed := c.billed(t, events)
			if len(billed) != len(events) {
				t.Fatalf("%d events in the ledger; want each of the %d once", len(billed), len(events))
			}
			day0 := start.Truncate(24 * time.Hour)
			k0, _ := time.Parse(time.RFC3339, day0.Add(-24*time.Hour).In(kolkata).Format("2006-01-02")+"T00:00:00+05:30")
			for _, m := range ledgerMeters {
				for _, q := range []rollup.QueryInput{
					{Window: rollup.Cycle, From: cycle.At(start, anchor).Start, To: cycle.At(boundary, anchor).End},
					{Window: rollup.Day, From: day0, To: day0.Add(5 * 24 * time.Hour)},
					{Window: rollup.Day, Zone: kolkata, From: k0, To: k0.Add(5 * 24 * time.Hour)},
					{Window: rollup.Hour, From: start, To: start.Add(ledgerSpan)},
					{Window: rollup.Minute, From: boundary.Add(-ledgerMinuteRange / 2), To: boundary.Add(ledgerMinuteRange / 2)},
				} {
					q.Account, q.Meter, q.AgreementDay = c.account, m, anchor
					// Grouped by every dimension or by none, as the schedule draws.
					for _, groupBy := range [][]string{[][]string{nil, m.Dimensions}[rng.IntN(2)]} {
						q.GroupBy = groupBy
						res, err := store.Query(context.Background(), q)
						if err != nil {
							t.Fatalf("%s %s: %v", m.Name, q.Window, err)
						}
						got, want := render(res.Rows), render(expected(q, res.Windows, billed))
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("%s by %s (zone %v, grouped by %v): the query and the ledger differ:\nonly in the query  %q\nonly in the ledger %q",
								m.Name, q.Window, q.Zone, groupBy, without(got, want), without(want, got))
						}
					}
				}
			}
		})
	}
}

// randomEvents are a schedule's events, received over ledgerSpan from start.
func randomEvents(rng *rand.Rand, start time.Time) []usageEvent {
	events := make([]usageEvent, ledgerEvents)
	for i := range events {
		at := start.Add(time.Duration(rng.Int64N(int64(ledgerSpan)))).Truncate(time.Millisecond)
		if rng.IntN(2) == 0 {
			// Half the events in one busy hour, so that claims race on its items.
			at = start.Add(ledgerSpan/2 + time.Duration(rng.Int64N(int64(time.Hour)))).Truncate(time.Millisecond)
		}
		events[i] = usageEvent{
			id: fmt.Sprintf("evt_%03d", i), receivedAt: at,
			// LATEST's order is the event's own time, up to an hour before it was received, on
			// a coarse grid so that some events share an instant (the larger id wins).
			happened: at.Add(-time.Duration(rng.IntN(60)) * time.Minute).Truncate(10 * time.Minute),
			model:    []string{"gpt-4", "mini", "o3"}[rng.IntN(3)], region: []string{"eu", "us", ""}[rng.IntN(3)],
			user:   fmt.Sprintf("user-%d", rng.IntN(12)),
			tokens: rng.Int64N(2000), gb: rng.Int64N(500), seats: rng.Int64N(50),
		}
	}
	return events
}

// deliveries are the units a schedule's events arrive in: each event one to three times (a
// client's retry, SQS's redelivery), shuffled, cut into units of one to ledgerMaxUnit.
func deliveries(rng *rand.Rand, events []usageEvent) [][]usageEvent {
	var copies []usageEvent
	for _, e := range events {
		for range 1 + rng.IntN(ledgerMaxCopies) {
			copies = append(copies, e)
		}
	}
	rng.Shuffle(len(copies), func(i, j int) { copies[i], copies[j] = copies[j], copies[i] })
	var units [][]usageEvent
	for len(copies) > 0 {
		n := min(len(copies), 1+rng.IntN(ledgerMaxUnit))
		// A unit fits one transaction, as the worker cuts them: an entry and a marker per event
		// at most, and the rollup writes.
		for n > 1 && unitItems(copies[:n]) > 100 {
			n--
		}
		units = append(units, copies[:n])
		copies = copies[n:]
	}
	return units
}

// unitItems is the most items a unit's claim writes.
func unitItems(unit []usageEvent) int {
	var cs []meter.Contribution
	for _, e := range unit {
		cs = append(cs, e.contributions(true)...)
	}
	return 2*len(unit) + rollup.WriteCount("acct", cs)
}

// billedEvent is an event as the ledger recorded its claim.
type billedEvent struct {
	usageEvent
	firstUser bool
}

// billed reads every event's ledger entry.
func (c *claimStore) billed(t *testing.T, events []usageEvent) []billedEvent {
	t.Helper()
	byKey := map[string]usageEvent{}
	var keys []map[string]types.AttributeValue
	for _, e := range events {
		byKey[ledger.Key(c.account, e.id)] = e
		keys = append(keys, c.entryKey(e.id))
	}
	var out []billedEvent
	for start := 0; start < len(keys); start += dynamo.MaxBatchGetKeys {
		items, err := dynamo.BatchGet(context.Background(), c.db, c.ledger, keys[start:min(start+dynamo.MaxBatchGetKeys, len(keys))])
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			first, _ := it["firstUser"].(*types.AttributeValueMemberBOOL)
			out = append(out, billedEvent{usageEvent: byKey[dynamo.Str(it, "pk")], firstUser: first != nil && first.Value})
		}
	}
	return out
}

// expected is the query's answer computed from the ledger alone: each billed event's
// contributions, in the window of the instant it was received, folded as the meter aggregates.
func expected(q rollup.QueryInput, windows []rollup.Span, billed []billedEvent) []rollup.Row {
	type acc struct {
		group map[string]string
		value int64
		order string
	}
	byWindow := map[int]map[string]*acc{}
	for _, e := range billed {
		for _, c := range e.contributions(e.firstUser) {
			if c.Meter != q.Meter.Name {
				continue
			}
			t := time.UnixMilli(c.AtMs)
			w := sort.Search(len(windows), func(i int) bool { return windows[i].End.After(t) })
			if w == len(windows) || t.Before(windows[w].Start) {
				continue
			}
			group := map[string]string{}
			for _, d := range q.GroupBy {
				for i, name := range q.Meter.Dimensions {
					if name == d {
						group[d] = c.Group[i]
					}
				}
			}
			key := fmt.Sprint(group)
			if byWindow[w] == nil {
				byWindow[w] = map[string]*acc{}
			}
			a := byWindow[w][key]
			if a == nil {
				byWindow[w][key] = &acc{group: group, value: c.Value, order: c.OrderKey}
				continue
			}
			switch q.Meter.Aggregation {
			case meter.Max:
				a.value = max(a.value, c.Value)
			case meter.Latest:
				if c.OrderKey > a.order {
					a.value, a.order = c.Value, c.OrderKey
				}
			default:
				a.value += c.Value
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

// render is rows as sorted lines, to compare.
func render(rows []rollup.Row) []string {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s %v other=%v %d", r.Start.Format(time.RFC3339), r.Group, r.Other, r.Value))
	}
	sort.Strings(out)
	return out
}

// without is the lines of a that b lacks.
func without(a, b []string) []string {
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

// pausingTransactions is db whose transactions each wait up to ledgerMaxPause before they are
// sent, as an invocation slowed between its read and its commit would: claims that read the same
// items then commit one after the other, which is the race the rollups' guards are for. On an
// emulator in this process the window is otherwise too short to meet reliably.
func pausingTransactions(db *dynamodb.Client) *dynamodb.Client {
	return dynamodb.New(db.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
			return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("pause-before-commit",
				func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
					if _, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput); ok {
						time.Sleep(rand.N(ledgerMaxPause))
					}
					return next.HandleInitialize(ctx, in)
				}), smithymw.After)
		})
	})
}
