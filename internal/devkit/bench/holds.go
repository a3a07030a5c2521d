package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"text/tabwriter"
	"time"

	apifn "github.com/ferrymeter/ferry/functions/api"
	holdsfn "github.com/ferrymeter/ferry/functions/holds"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/holds"
	budget "github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/operator/figures"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Defaults and constants of the holds benchmark.
const (
	benchHoldsOps         = 400
	benchHoldsConcurrency = 50
	benchHoldsAmount      = 1_000
	benchHoldsFeature     = "tokens"
	benchHoldsTimeout     = 10 * time.Minute

	// DynamoDB's physical limits and prices, for the figures that do not depend on the machine.
	// One partition (so one item) takes at most ~1,000 write units a second; a transactional
	// write of an item up to 1 KB costs 2 write units.
	itemWriteUnitsPerSecond    = 1_000
	transactionalWriteUnits    = 2
	writeUnitBytes             = 1_024
	onDemandWriteUSDPerMillion = 0.625 // us-east-1, per million write request units
	onDemandReadUSDPerMillion  = 0.125 // us-east-1, per million read request units
)

// benchSide is what one side of the comparison measured.
type benchSide struct {
	name      string
	ops       int
	errors    int
	elapsed   time.Duration
	latencies []time.Duration
	// units are the request units counted at the client; units.Reported counts the calls whose
	// units DynamoDB reported (none on emulators, which leaves DynamoDB's sizing rules).
	units instrument.OpUsage
}

func (s benchSide) perOp(v float64) float64 { return v / float64(s.ops) }
func (s benchSide) rate() float64           { return float64(s.ops) / s.elapsed.Seconds() }

// runConcurrently runs op for i in [0, n) with c at a time and times each call.
func runConcurrently(ctx context.Context, n, c int, op func(ctx context.Context, i int) error) (time.Duration, []time.Duration, int) {
	var (
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, n)
		failures  int
		wg        sync.WaitGroup
		next      = make(chan int)
	)
	began := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				start := time.Now()
				err := op(ctx, i)
				d := time.Since(start)
				mu.Lock()
				latencies = append(latencies, d)
				if err != nil {
					failures++
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return time.Since(began), latencies, failures
}

// plainCheck is the check a client writes without holds: read the budget, and if there is room,
// spend. The read and the write are two calls, so concurrent jobs all see the same room.
type plainCheck struct {
	db    *dynamodb.Client
	table budget.Table
}

const plainSpend = "ADD #used :n, #committed :n"

func (p plainCheck) run(ctx context.Context, accountID, cycleLabel string, limit plans.Limit, amount int64) (bool, error) {
	b, err := p.table.ReadBudget(ctx, accountID, benchHoldsFeature, cycleLabel, true)
	if err != nil {
		return false, err
	}
	if r := limit.Remaining(b.Committed); r != nil && *r < amount {
		return false, nil
	}
	_, err = p.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(p.table.Name),
		Key:                       budget.BudgetKey(accountID, benchHoldsFeature, cycleLabel),
		UpdateExpression:          aws.String(plainSpend),
		ExpressionAttributeNames:  dynamo.Names(plainSpend),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": dynamo.N(amount)},
	})
	return err == nil, err
}

// HoldsOptions shape the holds benchmark.
type HoldsOptions struct {
	// Ops is how many admissions run on each side.
	Ops int
	// Concurrency is how many admissions are in flight at once.
	Concurrency int
}

// DefaultHolds is the run the README reports: 400 admissions a side, 50 at a time.
var DefaultHolds = HoldsOptions{Ops: benchHoldsOps, Concurrency: benchHoldsConcurrency}

// Holds measures admissions with holds against a plain check on the same emulators: rate,
// latency, round trips and request units per admission, and what each lets through under
// contention.
func Holds(ctx context.Context, o HoldsOptions, stdout, stderr io.Writer) error {
	ops, concurrency := &o.Ops, &o.Concurrency
	if *ops < 2 || *concurrency < 1 {
		return errors.New("--ops must be at least 2 and --concurrency positive")
	}
	ctx, cancel := context.WithTimeout(ctx, benchHoldsTimeout)
	defer cancel()

	fmt.Fprintln(stderr, "starting the local stack…")
	external := cloud.EndpointsFromEnv()
	emu, err := devstack.StartEmulators(devstack.EmulatorOptions{External: external})
	if err != nil {
		return err
	}
	defer emu.Stop()
	meter := instrument.NewRequestMeter()
	clients, err := cloud.New(ctx, emu.Endpoints, cloud.Options{DynamoDB: []func(*dynamodb.Options){meter.Option}})
	if err != nil {
		return err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "bench-holds-" + hex.EncodeToString(b[:])
	names, err := devstack.Provision(ctx, clients, prefix, devstack.ProvisionOptions{})
	defer func() {
		tctx, tcancel := context.WithTimeout(context.Background(), time.Minute)
		defer tcancel()
		_ = devstack.Teardown(tctx, clients, names)
	}()
	if err != nil {
		return err
	}
	fns, err := composeAll(names, clients, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	// The operator's accounts (the api function's) and the holds function.
	operator, a := apifn.PartsOf(fns[resources.FunctionAPI]), holdsfn.PartsOf(fns[resources.FunctionHolds])
	// The per-account rate limit (120 new holds a minute) would stop a benchmark on one account
	// after 120 admissions; lifting it here measures the transaction on one hot budget row,
	// which is what bounds an account once its rate limit is raised.
	a.Holds.RatePerMinute = int64(4 * *ops)

	newAccount := func(id string, limit int64) (accounts.Account, error) {
		acct, _, err := operator.Accounts.Create(ctx, accounts.CreateInput{
			ID: id, Plan: "free", Limits: map[string]plans.Limit{benchHoldsFeature: plans.Max(limit)},
		})
		return acct, err
	}
	// warm fixes the account's cycle with one reservation, settled at no usage, so that the
	// measured admissions do only what every admission after an account's first does.
	warm := func(acct accounts.Account) (accounts.Account, error) {
		h, _, err := a.Holds.Reserve(ctx, acct, holds.ReserveInput{Key: "warm-up", Feature: benchHoldsFeature, Amount: 1})
		if err != nil {
			return acct, err
		}
		if _, err := a.Holds.Settle(ctx, acct, holds.SettleInput{HoldID: h.ID, Used: new(int64)}); err != nil {
			return acct, err
		}
		return operator.Accounts.Get(ctx, acct.ID)
	}
	ample := int64(*ops) * benchHoldsAmount * 2
	holdsAcct, err := newAccount("bench-holds", ample)
	if err != nil {
		return err
	}
	if holdsAcct, err = warm(holdsAcct); err != nil {
		return err
	}
	plainAcct, err := newAccount("bench-plain", ample)
	if err != nil {
		return err
	}
	cycleLabel := plainAcct.CycleAt(time.Now()).Label()
	plain := plainCheck{db: clients.DynamoDB, table: a.Usage}
	// The plain side's budget row exists before measuring, as the holds side's does.
	if _, err := plain.run(ctx, plainAcct.ID, cycleLabel, plans.Max(ample), 1); err != nil {
		return err
	}

	measure := func(name string, op func(ctx context.Context, i int) error) benchSide {
		fmt.Fprintf(stderr, "measuring %s: %d operations, %d at a time…\n", name, *ops, *concurrency)
		meter.Reset()
		elapsed, latencies, failures := runConcurrently(ctx, *ops, *concurrency, op)
		units := meter.Totals()
		return benchSide{name: name, ops: *ops, errors: failures, elapsed: elapsed, latencies: latencies, units: units}
	}

	// Side by side on the same stack: the plain check, then holds (ample room: every admission
	// succeeds, so both sides do the same work per operation).
	plainSide := measure("plain check", func(ctx context.Context, i int) error {
		_, err := plain.run(ctx, plainAcct.ID, cycleLabel, plans.Max(ample), benchHoldsAmount)
		return err
	})
	ids := make([]string, *ops)
	holdsSide := measure("holds", func(ctx context.Context, i int) error {
		h, _, err := a.Holds.Reserve(ctx, holdsAcct, holds.ReserveInput{Key: fmt.Sprintf("job-%d", i), Feature: benchHoldsFeature, Amount: benchHoldsAmount})
		ids[i] = h.ID
		return err
	})
	// The rest of each job's life: one charge step and the settlement.
	finishSide := measure("charge + settle", func(ctx context.Context, i int) error {
		if ids[i] == "" {
			return errors.New("not admitted")
		}
		if _, err := a.Holds.Charge(ctx, holdsAcct, holds.ChargeInput{HoldID: ids[i], Key: "run", Amount: benchHoldsAmount}); err != nil {
			return err
		}
		_, err := a.Holds.Settle(ctx, holdsAcct, holds.SettleInput{HoldID: ids[i]})
		return err
	})

	// Under contention, with room for half of the jobs: what each side lets through.
	half := int64(*ops/2) * benchHoldsAmount
	tightPlain, err := newAccount("bench-plain-tight", half)
	if err != nil {
		return err
	}
	tightHolds, err := newAccount("bench-holds-tight", half)
	if err != nil {
		return err
	}
	if tightHolds, err = warm(tightHolds); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "racing both against room for %d jobs…\n", *ops/2)
	var plainRan, holdsAdmitted, holdsRefused, raceErrors int
	var mu sync.Mutex
	runConcurrently(ctx, *ops, *concurrency, func(ctx context.Context, i int) error {
		ran, err := plain.run(ctx, tightPlain.ID, cycleLabel, plans.Max(half), benchHoldsAmount)
		mu.Lock()
		defer mu.Unlock()
		if ran {
			plainRan++
		}
		if err != nil {
			raceErrors++
		}
		return err
	})
	runConcurrently(ctx, *ops, *concurrency, func(ctx context.Context, i int) error {
		_, _, err := a.Holds.Reserve(ctx, tightHolds, holds.ReserveInput{Key: fmt.Sprintf("job-%d", i), Feature: benchHoldsFeature, Amount: benchHoldsAmount})
		var refused *holds.RefusedError
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			holdsAdmitted++
		case errors.As(err, &refused):
			holdsRefused++
		default:
			raceErrors++
		}
		return err
	})
	tightHeld, err := a.Usage.ReadBudget(ctx, tightHolds.ID, benchHoldsFeature, cycleLabel, true)
	if err != nil {
		return err
	}
	budgetBytes, err := budgetRowBytes(ctx, clients.DynamoDB, a.Usage, holdsAcct.ID, cycleLabel)
	if err != nil {
		return err
	}

	// Report.
	where := "the local emulators (minidyn in-process; DynamoDB's own latency is not in these figures)"
	if external.DynamoDB != "" {
		where = "DynamoDB at " + external.DynamoDB
	}
	fmt.Fprintf(stdout, "ferry bench holds: %d admissions a side, %d at a time, %s of %s each, on %s.\n\n",
		*ops, *concurrency, figures.Thousands(benchHoldsAmount), benchHoldsFeature, where)
	tw := tabwriter.NewWriter(stdout, 0, 0, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tplain check\tholds\tholds ÷ plain\t")
	fmt.Fprintf(tw, "admissions per second\t%.0f\t%.0f\t%.2f\t\n", plainSide.rate(), holdsSide.rate(), holdsSide.rate()/plainSide.rate())
	for _, p := range []int{50, 99} {
		pl, ho := figures.Percentile(plainSide.latencies, p), figures.Percentile(holdsSide.latencies, p)
		fmt.Fprintf(tw, "latency p%d\t%s\t%s\t%.2f\t\n", p, figures.Round(pl), figures.Round(ho), float64(ho)/float64(pl))
	}
	fmt.Fprintf(tw, "round trips per admission\t%.2f\t%.2f\t\t\n", plainSide.perOp(float64(plainSide.units.Calls)), holdsSide.perOp(float64(holdsSide.units.Calls)))
	fmt.Fprintf(tw, "write units per admission\t%.2f\t%.2f\t\t\n", plainSide.perOp(plainSide.units.WriteUnits), holdsSide.perOp(holdsSide.units.WriteUnits))
	fmt.Fprintf(tw, "read units per admission\t%.2f\t%.2f\t\t\n", plainSide.perOp(plainSide.units.ReadUnits), holdsSide.perOp(holdsSide.units.ReadUnits))
	fmt.Fprintf(tw, "errors\t%d\t%d\t\t\n", plainSide.errors, holdsSide.errors)
	fmt.Fprintf(tw, "room for %d jobs, %d raced: jobs let through\t%d\t%d\t\t\n", *ops/2, *ops, plainRan, holdsAdmitted)
	fmt.Fprintf(tw, "… spent or held past the limit\t%s\t%s\t\t\n",
		figures.Thousands(max(0, int64(plainRan)*benchHoldsAmount-half)), figures.Thousands(max(0, tightHeld.Committed-half)))
	_ = tw.Flush()
	if raceErrors > 0 {
		fmt.Fprintf(stdout, "(%d errors in the contention race)\n", raceErrors)
	}

	jobWrite := holdsSide.perOp(holdsSide.units.WriteUnits) + finishSide.perOp(finishSide.units.WriteUnits)
	jobRead := holdsSide.perOp(holdsSide.units.ReadUnits) + finishSide.perOp(finishSide.units.ReadUnits)
	jobTrips := holdsSide.perOp(float64(holdsSide.units.Calls)) + finishSide.perOp(float64(finishSide.units.Calls))
	fmt.Fprintf(stdout, "\nA whole job (reserve, one charge step, settle): %.1f round trips, %.1f write units, %.1f read units;\n",
		jobTrips, jobWrite, jobRead)
	fmt.Fprintf(stdout, "at on-demand prices ($%.3f per million writes, $%.3f per million reads) that is $%.2f per million jobs.\n",
		onDemandWriteUSDPerMillion, onDemandReadUSDPerMillion, jobWrite*onDemandWriteUSDPerMillion+jobRead*onDemandReadUSDPerMillion)
	source := "DynamoDB's published sizing rules (the emulator reports no consumed capacity)"
	if holdsSide.units.Reported > 0 {
		source = "the consumed capacity DynamoDB reported"
	}
	fmt.Fprintf(stdout, "Request units come from %s.\n", source)

	// The ceiling this design implies on real DynamoDB: every admission and every settlement
	// writes the budget row of (account, feature, cycle) in a transaction.
	rowTxPerSecond := itemWriteUnitsPerSecond / (transactionalWriteUnits * math.Ceil(float64(max(budgetBytes, 1))/writeUnitBytes))
	fmt.Fprintf(stdout, "\nThe hot row: the budget row is %d bytes, so a transactional write of it costs %d write units, and one item\n",
		budgetBytes, transactionalWriteUnits*int(math.Ceil(float64(max(budgetBytes, 1))/writeUnitBytes)))
	fmt.Fprintf(stdout, "takes about %s write units a second: about %.0f admissions a second per (account, feature, cycle), or %.0f whole\n",
		figures.Thousands(itemWriteUnitsPerSecond), rowTxPerSecond, rowTxPerSecond/2)
	fmt.Fprintf(stdout, "jobs a second, since settling writes the row too. Nothing else touches it: charges write only the hold, and the\n")
	fmt.Fprintf(stdout, "rate counter is its own item. The per-account limit of %d new holds a minute (%.0f a second) is far below it;\n",
		holds.DefaultRatePerMinute, float64(holds.DefaultRatePerMinute)/60)
	fmt.Fprintf(stdout, "many accounts and features run in parallel, each on its own row.\n")
	fmt.Fprintf(stdout, "Emulator wall time says more about the emulator (one lock, a snapshot of every table per transaction) than about\n")
	fmt.Fprintf(stdout, "Ferry; the ratios, units and round trips are the figures to compare. Holds: %d admitted, %d refused in the race.\n",
		holdsAdmitted, holdsRefused)
	return nil
}

// budgetRowBytes is the size of an account's budget row by DynamoDB's sizing rules.
func budgetRowBytes(ctx context.Context, db *dynamodb.Client, t budget.Table, accountID, cycleLabel string) (int, error) {
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(t.Name), Key: budget.BudgetKey(accountID, benchHoldsFeature, cycleLabel), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, fmt.Errorf("read the budget row: %w", err)
	}
	return instrument.ItemSize(out.Item), nil
}
