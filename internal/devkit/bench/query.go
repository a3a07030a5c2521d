package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"sort"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"golang.org/x/sync/errgroup"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
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
	table, ok := resources.TableByLogical(resources.TableRollups)
	if !ok {
		return errors.New("no rollups table among the definitions")
	}
	names, err := devstack.Provision(ctx, clients, "bench-query-"+hex.EncodeToString(b[:]), devstack.ProvisionOptions{
		Tables: []resources.Table{table}, Queues: []resources.Queue{}, Buckets: []resources.Bucket{},
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

	fmt.Fprintf(stderr, "writing the rollups of %d events over %s…\n", o.Events, benchQueryMonth.Format("2006-01"))
	hours, err := fillMonth(ctx, store, account, o, stderr)
	if err != nil {
		return err
	}
	written, writes := meterRU.Totals(), meterRU.Snapshot()["UpdateItem"].Calls

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

	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(stdout, "The usage query on one account's month (%s): %d events of %s (SUM, %d models × %d regions), %d hour items and their minute items.\n",
		benchQueryMonth.Format("2006-01"), o.Events, benchQueryMeter.Name, len(benchQueryModels), len(benchQueryRegions), hours)
	fmt.Fprintf(stdout, "Writing them took %d item writes (%.0f write units outside a transaction); the worker's claims carry the same writes.\n\n",
		writes, written.WriteUnits)
	fmt.Fprintln(tw, "query\trows\tround trips\tread units\tlatency (median)\t")
	for _, c := range append(cases, minutes) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%s\t\n", c.name, c.rows, c.calls, c.units, c.latency.Round(10*time.Microsecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	day := cases[0]
	fmt.Fprintf(stdout, "\nDAY by model: %.1f read units (goal ≤ 50), $%.6f a query; the same answer from minute items alone reads %.0f× the units and takes %.1f× as long.\n",
		day.units, day.units*priceDynamoReadUnitPerMillion/1e6, minutes.units/day.units, float64(minutes.latency)/float64(day.latency))
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
func fillMonth(ctx context.Context, store *rollup.Store, account string, o QueryOptions, progress io.Writer) (int, error) {
	rng := mrand.New(mrand.NewPCG(o.Seed, 0x51))
	minutes := int(benchQueryMonth.AddDate(0, 1, 0).Sub(benchQueryMonth) / time.Minute)
	type cell struct {
		minute, group int
	}
	sums := map[cell]int64{}
	groups := len(benchQueryModels) * len(benchQueryRegions)
	for range o.Events {
		sums[cell{rng.IntN(minutes), rng.IntN(groups)}] += 1 + rng.Int64N(benchQueryMaxTokens)
	}
	byHour := map[int][]meter.Contribution{}
	for c, v := range sums {
		at := benchQueryMonth.Add(time.Duration(c.minute) * time.Minute)
		byHour[c.minute/60] = append(byHour[c.minute/60], meter.Contribution{
			Meter: benchQueryMeter.Name, Aggregation: benchQueryMeter.Aggregation, AtMs: at.UnixMilli(),
			Group: []string{benchQueryModels[c.group/len(benchQueryRegions)], benchQueryRegions[c.group%len(benchQueryRegions)]}, Value: v,
		})
	}
	hours := make([]int, 0, len(byHour))
	for h := range byHour {
		hours = append(hours, h)
	}
	sort.Ints(hours)
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
