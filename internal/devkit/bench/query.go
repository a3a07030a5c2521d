package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"golang.org/x/sync/errgroup"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Defaults and bounds of the query benchmark.
const (
	benchQueryEvents  = 1_000_000
	benchQueryRepeats = 5
	// benchQueryWriters is how many hours of rollups are written at once.
	benchQueryWriters = 8
	benchQueryTimeout = 20 * time.Minute
	// benchQueryMaxTokens bounds one event's value (tokens).
	benchQueryMaxTokens = 4_000
)

// The month the benchmark fills and reads: November 2026, 30 days.
var benchQueryMonth = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// The meter the benchmark fills: a SUM with two dimensions, as an LLM platform's tokens.
var (
	benchQueryMeter   = rollup.Meter{Name: "tokens_in", Aggregation: meter.Sum, Dimensions: []string{"model", "region"}}
	benchQueryModels  = []string{"gpt-4", "gpt-4o-mini", "claude-sonnet", "llama-70b"}
	benchQueryRegions = []string{"eu", "us", "ap"}
)

// QueryOptions shape the query benchmark.
type QueryOptions struct {
	// Events is how many events the month holds.
	Events int
	// Repeats is how many times each query runs (the latency is their median).
	Repeats int
	// Seed decides each event's minute, group and value.
	Seed uint64
}

// DefaultQuery is the run the docs report.
var DefaultQuery = QueryOptions{Events: benchQueryEvents, Repeats: benchQueryRepeats, Seed: 1}

// queryCase is one query the benchmark runs, and what it consumed.
type queryCase struct {
	name    string
	in      rollup.QueryInput
	rows    int
	calls   int
	units   float64
	latency time.Duration
}

// Query measures the usage query on one account's month: the month's rollups are written as
// rollup.PlanWrites plans them (the writes the worker's claim carries) and as the claims of Events
// events would leave them — each event a minute, a model and a region and a
// value drawn from Seed, folded per minute and group as ADD folds them — and then each query runs
// Repeats times: its round trips and read units (eventually consistent, as the api function
// reads) at the client, and its median latency on the embedded stack. Beside the DAY query, the
// same answer read from the month's minute items alone, as rollups without hour items would have
// to.
func Query(ctx context.Context, o QueryOptions, stdout, stderr io.Writer) error {
	if o.Events < 1 || o.Repeats < 1 {
		return errors.New("--events and --repeats must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, benchQueryTimeout)
	defer cancel()
	fmt.Fprintln(stderr, "starting the local stack…")
	emu, err := devstack.StartEmulators(devstack.EmulatorOptions{External: cloud.EndpointsFromEnv()})
	if err != nil {
		return err
	}
	defer emu.Stop()
	meterRU := instrument.NewRequestMeter()
	clients, err := cloud.New(ctx, emu.Endpoints, cloud.Options{DynamoDB: []func(*dynamodb.Options){meterRU.Option}})
	if err != nil {
		return err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	var tables []resources.Table
	for _, logical := range []string{resources.TableRollups, resources.TableAnalytics} {
		table, ok := resources.TableByLogical(logical)
		if !ok {
			return fmt.Errorf("no %s table among the definitions", logical)
		}
		tables = append(tables, table)
	}
	names, err := devstack.Provision(ctx, clients, "bench-query-"+hex.EncodeToString(b[:]), devstack.ProvisionOptions{
		Tables: tables, Queues: []resources.Queue{}, Buckets: []resources.Bucket{},
	})
	defer func() {
		tctx, tcancel := context.WithTimeout(context.Background(), time.Minute)
		defer tcancel()
		_ = devstack.Teardown(tctx, clients, names)
	}()
	if err != nil {
		return err
	}
	monthEnd := benchQueryMonth.AddDate(0, 1, 0)
	store := &rollup.Store{DB: clients.DynamoDB, Table: names.Table(resources.TableRollups), Now: func() time.Time { return monthEnd }}
	const account = "acct_bench"

	events := monthEvents(o)
	fmt.Fprintf(stderr, "writing the rollups of %d events over %s…\n", o.Events, benchQueryMonth.Format("2006-01"))
	hours, err := fillMonth(ctx, store, account, events, stderr)
	if err != nil {
		return err
	}
	written, writes := meterRU.Totals(), meterRU.Snapshot()["UpdateItem"].Calls
	fmt.Fprintf(stderr, "writing the analytics rows of %d events, as units of %d…\n", o.Events, event.MaxPackedEvents)
	rowsTable := &analytics.DynamoWriter{DB: clients.DynamoDB, Table: names.Table(resources.TableAnalytics)}
	rowItems, err := fillRows(ctx, rowsTable, account, events, stderr)
	if err != nil {
		return err
	}

	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		return err
	}
	k0 := time.Date(2026, 11, 1, 0, 0, 0, 0, kolkata)
	base := rollup.QueryInput{Account: account, Meter: benchQueryMeter, From: benchQueryMonth, To: monthEnd}
	with := func(f func(*rollup.QueryInput)) rollup.QueryInput { in := base; f(&in); return in }
	cases := []*queryCase{
		{name: "DAY, UTC, by model", in: with(func(in *rollup.QueryInput) { in.Window, in.GroupBy = rollup.Day, []string{"model"} })},
		{name: "DAY, UTC, by model, region=eu", in: with(func(in *rollup.QueryInput) {
			in.Window, in.GroupBy, in.Filter = rollup.Day, []string{"model"}, map[string]string{"region": "eu"}
		})},
		{name: "DAY, Asia/Kolkata, by model", in: with(func(in *rollup.QueryInput) {
			in.Window, in.GroupBy, in.Zone, in.From, in.To = rollup.Day, []string{"model"}, kolkata, k0, k0.AddDate(0, 0, 30)
		})},
		{name: "CYCLE, by model", in: with(func(in *rollup.QueryInput) { in.Window, in.GroupBy = rollup.Cycle, []string{"model"} })},
		{name: "HOUR, no grouping", in: with(func(in *rollup.QueryInput) { in.Window = rollup.Hour; in.To = in.From.AddDate(0, 0, 30) })},
	}
	for _, c := range cases {
		if err := runQueryCase(ctx, store, meterRU, c, o.Repeats); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	// The same DAY answer from minute items alone: a MINUTE query per day, folded here.
	minutes := &queryCase{name: "DAY, UTC, by model, from minute items alone"}
	if err := runMinuteDays(ctx, store, meterRU, minutes, base, o.Repeats); err != nil {
		return err
	}
	// And from the month's analytics rows, every event's row read back and folded here, as a
	// query without rollups would have to; its answer must be the rollups' to the token.
	fromRows := &queryCase{name: "DAY, UTC, by model, from the analytics rows"}
	if err := runRowDays(ctx, rowsTable, store, meterRU, fromRows, cases[0].in, o.Repeats); err != nil {
		return err
	}

	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(stdout, "The usage query on one account's month (%s): %d events of %s (SUM, %d models × %d regions), %d hour items and their minute items.\n",
		benchQueryMonth.Format("2006-01"), o.Events, benchQueryMeter.Name, len(benchQueryModels), len(benchQueryRegions), hours)
	fmt.Fprintf(stdout, "Writing them took %d item writes (%.0f write units outside a transaction); the worker's claims carry the same writes.\n",
		writes, written.WriteUnits)
	fmt.Fprintf(stdout, "The same events' analytics rows: %d rows items of at most %d events, as the worker's units write them.\n\n", rowItems, event.MaxPackedEvents)
	fmt.Fprintln(tw, "query\trows\tround trips\tread units\tlatency (median)\t")
	for _, c := range append(cases, minutes, fromRows) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%s\t\n", c.name, c.rows, c.calls, c.units, c.latency.Round(10*time.Microsecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	day := cases[0]
	fmt.Fprintf(stdout, "\nDAY by model: %.1f read units (goal ≤ 50), $%.6f a query; the same answer from minute items alone reads %.0f× the units and takes %.1f× as long.\n",
		day.units, day.units*priceDynamoReadUnitPerMillion/1e6, minutes.units/day.units, float64(minutes.latency)/float64(day.latency))
	// A strongly consistent read unit is 4 KB, and a Query page at most 1 MB: the pages DynamoDB
	// would answer in, whatever the emulator does.
	pages := int(math.Ceil(fromRows.units * 4096 / (1 << 20)))
	fmt.Fprintf(stdout, "From the month's analytics rows (strongly consistent, as analytics.DynamoWriter.Rows reads; half the units eventually consistent), the same answer reads %.0f× the units in %d pages of 1 MB and takes %.1f× as long.\n",
		fromRows.units/day.units, pages, float64(fromRows.latency)/float64(day.latency))
	source := "DynamoDB's sizing rules (the emulators report no consumed capacity)"
	if meterRU.Totals().Reported > 0 {
		source = "the capacity DynamoDB reported"
	}
	fmt.Fprintf(stdout, "Read units are eventually consistent reads, from %s.\n", source)
	return nil
}

// fillMonth writes the month's rollups, planned an hour at a time (its minute items and its hour
// item) by rollup.PlanWrites from a read of what the plan needs, and returns how many hours it
// wrote.
func fillMonth(ctx context.Context, store *rollup.Store, account string, events []monthEvent, progress io.Writer) (int, error) {
	type cell struct {
		minute int64
		group  int
	}
	sums := map[cell]int64{}
	for _, e := range events {
		sums[cell{e.atMs / time.Minute.Milliseconds(), e.group}] += e.tokens
	}
	byHour := map[int64][]meter.Contribution{}
	for c, v := range sums {
		model, region := benchQueryGroup(c.group)
		byHour[c.minute/60] = append(byHour[c.minute/60], meter.Contribution{
			Meter: benchQueryMeter.Name, Aggregation: benchQueryMeter.Aggregation, AtMs: c.minute * time.Minute.Milliseconds(),
			Group: []string{model, region}, Value: v,
		})
	}
	hours := make([]int64, 0, len(byHour))
	for h := range byHour {
		hours = append(hours, h)
	}
	slices.Sort(hours)
	// Each hour's writes touch its own items only (its minutes and its hour), so hours are
	// written side by side; each write is the plan's own update, sent alone rather than in a
	// transaction, which an emulator commits far faster and which leaves the same items.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(benchQueryWriters)
	var done atomic.Int64
	for _, h := range hours {
		g.Go(func() error {
			cs := byHour[h]
			read, err := store.Read(gctx, account, cs)
			if err != nil {
				return err
			}
			plan, err := rollup.PlanWrites(store.Table, account, cs, read)
			if err != nil {
				return err
			}
			for _, w := range plan.Writes {
				u := w.Update
				if _, err := store.DB.UpdateItem(gctx, &dynamodb.UpdateItemInput{
					TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
					ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
				}); err != nil {
					return fmt.Errorf("write %v: %w", u.Key, err)
				}
			}
			if n := done.Add(1); n%100 == 0 {
				fmt.Fprintf(progress, "  %d of %d hours written\n", n, len(hours))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return len(hours), nil
}

// monthEvent is one event of the benchmark's month: the instant it was received, its group
// (a model and a region) and its tokens.
type monthEvent struct {
	atMs   int64
	group  int
	tokens int64
}

// monthEvents draws the month's events from o.Seed, in the order they were received.
func monthEvents(o QueryOptions) []monthEvent {
	rng := mrand.New(mrand.NewPCG(o.Seed, 0x51))
	month := benchQueryMonth.AddDate(0, 1, 0).Sub(benchQueryMonth).Milliseconds()
	groups := len(benchQueryModels) * len(benchQueryRegions)
	events := make([]monthEvent, o.Events)
	for i := range events {
		events[i] = monthEvent{atMs: benchQueryMonth.UnixMilli() + rng.Int64N(month), group: rng.IntN(groups), tokens: 1 + rng.Int64N(benchQueryMaxTokens)}
	}
	slices.SortFunc(events, func(a, b monthEvent) int { return cmp.Compare(a.atMs, b.atMs) })
	return events
}

// benchQueryGroup is a group's model and region.
func benchQueryGroup(g int) (model, region string) {
	return benchQueryModels[g/len(benchQueryRegions)], benchQueryRegions[g%len(benchQueryRegions)]
}

// fillRows writes the month's analytics rows as the worker's units leave them: the events, in
// the order received, cut into units of event.MaxPackedEvents, each unit's rows in one rows item
// (analytics.UnitItem) under the instant of its last event. It returns how many items it wrote.
func fillRows(ctx context.Context, w *analytics.DynamoWriter, account string, events []monthEvent, progress io.Writer) (int, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(benchQueryWriters)
	var items atomic.Int64
	for start := 0; start < len(events); start += event.MaxPackedEvents {
		unit := events[start:min(start+event.MaxPackedEvents, len(events))]
		g.Go(func() error {
			claimedAt := unit[len(unit)-1].atMs
			rows := make([]analytics.Row, len(unit))
			for i, e := range unit {
				model, region := benchQueryGroup(e.group)
				rows[i] = analytics.Row{
					AccountID: account, EventID: fmt.Sprintf("evt_%07d", start+i), Type: "llm.call", Source: "bench",
					ReceivedAtMs: e.atMs, RowInsertedAtMs: claimedAt, Cycle: benchQueryMonth.Format("2006-01"),
					ArchiveKey: fmt.Sprintf("bench/%07d", start),
					Dimensions: map[string]any{"model": model, "region": region, "tokens": e.tokens},
				}
			}
			item, n, err := analytics.UnitItem(fmt.Sprintf("unit-%07d", start), rows)
			if err != nil {
				return err
			}
			if n != len(rows) {
				return fmt.Errorf("a unit of %d rows keeps %d in its rows item", len(rows), n)
			}
			if _, err := w.DB.PutItem(gctx, &dynamodb.PutItemInput{TableName: aws.String(w.Table), Item: item}); err != nil {
				return err
			}
			if n := items.Add(1); n%1000 == 0 {
				fmt.Fprintf(progress, "  %d rows items written\n", n)
			}
			return nil
		})
	}
	err := g.Wait()
	return int(items.Load()), err
}

// runRowDays answers in's DAY query (UTC, by model) from the month's analytics rows: every row
// of the range read (analytics.DynamoWriter.Rows) and its tokens folded per day and model. The
// answer must equal the rollups'.
func runRowDays(ctx context.Context, w *analytics.DynamoWriter, store *rollup.Store, m *instrument.RequestMeter, c *queryCase, in rollup.QueryInput, repeats int) error {
	want := map[string]int64{}
	res, err := store.Query(ctx, in)
	if err != nil {
		return err
	}
	for _, r := range res.Rows {
		want[r.Start.Format(time.DateOnly)+" "+r.Group["model"]] += r.Value
	}
	var took []time.Duration
	for i := range repeats {
		m.Reset()
		start := time.Now()
		rows, err := w.Rows(ctx, in.Account, in.From.UnixMilli(), in.To.UnixMilli()-1)
		if err != nil {
			return err
		}
		got := map[string]int64{}
		for _, r := range rows {
			tokens, err := strconv.ParseInt(fmt.Sprint(r.Dimensions["tokens"]), 10, 64)
			if err != nil {
				return fmt.Errorf("row %s: tokens: %w", r.EventID, err)
			}
			day := time.UnixMilli(r.ReceivedAtMs).UTC().Format(time.DateOnly)
			got[day+" "+fmt.Sprint(r.Dimensions["model"])] += tokens
		}
		took = append(took, time.Since(start))
		if !maps.Equal(got, want) {
			return fmt.Errorf("the rows' answer (%d days × models) differs from the rollups' (%d)", len(got), len(want))
		}
		if i == 0 {
			t := m.Totals()
			c.rows, c.calls, c.units = len(got), t.Calls, t.ReadUnits
		}
	}
	c.latency = median(took)
	return nil
}

// runQueryCase runs c's query repeats times; the counts are one run's, the latency the median.
func runQueryCase(ctx context.Context, store *rollup.Store, m *instrument.RequestMeter, c *queryCase, repeats int) error {
	var took []time.Duration
	for i := range repeats {
		m.Reset()
		start := time.Now()
		res, err := store.Query(ctx, c.in)
		took = append(took, time.Since(start))
		if err != nil {
			return err
		}
		if i == 0 {
			t := m.Totals()
			c.rows, c.calls, c.units = len(res.Rows), t.Calls, t.ReadUnits
		}
	}
	c.latency = median(took)
	return nil
}

// runMinuteDays answers the DAY query from minute items alone: one MINUTE query per day (the
// longest a MINUTE range may be), the rows folded per day and model.
func runMinuteDays(ctx context.Context, store *rollup.Store, m *instrument.RequestMeter, c *queryCase, base rollup.QueryInput, repeats int) error {
	var took []time.Duration
	for i := range repeats {
		m.Reset()
		start := time.Now()
		rows := map[string]bool{}
		for day := base.From; day.Before(base.To); day = day.AddDate(0, 0, 1) {
			in := base
			in.Window, in.GroupBy, in.From, in.To = rollup.Minute, []string{"model"}, day, day.AddDate(0, 0, 1)
			res, err := store.Query(ctx, in)
			if err != nil {
				return err
			}
			for _, r := range res.Rows {
				rows[day.Format(time.DateOnly)+" "+r.Group["model"]] = true
			}
		}
		took = append(took, time.Since(start))
		if i == 0 {
			t := m.Totals()
			c.rows, c.calls, c.units = len(rows), t.Calls, t.ReadUnits
		}
	}
	c.latency = median(took)
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
