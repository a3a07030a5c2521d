package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	drainerfn "github.com/ferrymeter/ferry/functions/drainer"
	reporterfn "github.com/ferrymeter/ferry/functions/reporter"
	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/platform/retry"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/reporting/report"
)

// Limits of a reporter schedule.
const (
	maxReportAccounts = 3
	maxWaves          = 4 // billing waves per account
	maxWaveEvents     = 4
	// maxRuns bounds the reporter and drainer runs started while faults are on: each run, when it
	// ends, starts the next of its kind (the next minute's), and others start beside them.
	maxRuns = 10
	// runOneIn, waveOneIn and clockOneIn are the per-step chances (1 in n) that the environment
	// starts a reporter or drainer run, bills the next wave, or moves the clock.
	runOneIn = 25
	// Drainer runs start only at random points (every minute, in production), so that most
	// meet rows the reports wrote.
	maxDrains  = 16
	drainOneIn = 40
	waveOneIn  = 30
	clockOneIn = 40
	pauseOneIn = 3
	// maxIdleRounds bounds the rounds that finish a schedule once faults are over: a report of
	// what is still marked, or a drain of what is still due, each.
	maxIdleRounds = 40
	// driftOneIn: one schedule in driftOneIn moves a customer's meter behind Ferry's back at the
	// end, which the reconciler must find.
	driftOneIn = 8
)

// clockJumps are how far the clock jumps while faults are on: past a report lease, past an
// outbox claim, to a row's first backoff.
var clockJumps = []time.Duration{report.LeaseFor + time.Second, outbox.ClaimFor + time.Second, outbox.BackoffBase}

// Reporter is the pipeline that reports usage to Stripe: accounts linked to Stripe customers are
// billed by the worker in waves, while reporter runs (marks → lastSent and an outbox row in
// one transaction → marks off) and drainer runs (claim → send → SENT) start at random points,
// overlap, crash between their steps, are stopped at their timeout or paused past their leases,
// and every DynamoDB and Stripe call meets the faults of the wire (a 429 with Retry-After, a 5xx,
// a connection reset, a meter event applied whose answer is lost or comes after the client's
// timeout). Once faults are over, the marked cycles are reported and the due rows drained.
//
// Invariants, per account: Stripe applied each identifier at most once, and its meter equals the
// ledger's billed total; every applied identifier is an outbox row's, with the row's delta; every
// outbox row is SENT, or DEAD with its bounded sends spent on faults and the OutboxDead metric
// counted; lastSent is the ledger's total and no mark is left; the reconciler finds the meter
// matching the ledger (or repairs what DEAD rows left out, and confirms it), and finds a drift
// injected on purpose.
type Reporter struct{}

// Name implements Pipeline.
func (*Reporter) Name() string { return "reporter" }

type reportAccount struct {
	acct  accounts.Account
	waves [][]string // event ids, by wave
	// billed is the next wave to bill.
	billed int
}

type reporterState struct {
	accts []*reportAccount
	// reports and drains count the runs started.
	reports, drains int
	idle            int
	// deadBefore is the OutboxDead count when the schedule began.
	deadBefore int
	// drift is the units injected on a customer's meter at the end (0: none).
	drift int64
}

// Start implements Pipeline.
func (p *Reporter) Start(ctx context.Context, s *Schedule) error {
	r := s.Rand
	st := &reporterState{deadBefore: s.Env.Metrics.Get(metrics.OutboxDead)}
	s.State = st
	s.Env.provider.fresh(plans.Default())
	api := s.Env.API()
	n := 1 + r.IntN(maxReportAccounts)
	for i := range n {
		plan := "free"
		if r.IntN(2) == 0 {
			plan = "plus" // uncapped: 64 counter shards, each with its own mark
		}
		acct, _, err := api.Accounts.Create(ctx, accounts.CreateInput{
			ID: fmt.Sprintf("acct_r%d_%d", s.Seed, i), Plan: plan, Status: accounts.Active,
			Links: map[accounts.LinkKind]string{accounts.StripeCustomer: fmt.Sprintf("cus_r%d_%d", s.Seed, i)},
		})
		if err != nil {
			return fmt.Errorf("create account: %w", err)
		}
		ra := &reportAccount{acct: acct}
		for w := range 1 + r.IntN(maxWaves) {
			ids := make([]string, 1+r.IntN(maxWaveEvents))
			for j := range ids {
				ids[j] = fmt.Sprintf("evt_w%d_%d", w, j)
			}
			ra.waves = append(ra.waves, ids)
		}
		st.accts = append(st.accts, ra)
	}
	if r.IntN(driftOneIn) == 0 {
		st.drift = int64(1 + r.IntN(5))
		if r.IntN(2) == 0 {
			st.drift = -st.drift
		}
	}
	s.Note("reporter: %d accounts, fault rate %.2f, drift %d", n, s.FaultRate, st.drift)
	installReportHooks(s.Env)
	// A final row (SENT, DEAD, REVIEW) is never written again but to cancel it: a late drainer
	// that rewrites one has overwritten what another drainer finished.
	final := map[string]outbox.Status{}
	s.Observe(func(a *Actor, c Call, params any, committed bool) {
		in, ok := params.(*dynamodb.PutItemInput)
		if !ok || !committed || c.Table != resources.TableOutbox {
			return
		}
		key := dynamo.Str(in.Item, "pk") + " " + dynamo.Str(in.Item, "sk")
		status := outbox.Status(dynamo.Str(in.Item, "status"))
		if prev, ok := final[key]; ok && status != outbox.Cancelled {
			s.Violate("reporter: #%d %s rewrote the %s outbox row %s as %s", a.ID, a.Name, prev, key, status)
		}
		if !status.Due() {
			final[key] = status
		}
	})
	for _, ra := range st.accts {
		p.bill(s, st, ra)
	}
	p.report(s, st)
	p.drain(s, st, nil)
	if r.IntN(2) == 0 {
		p.report(s, st) // two runs at once from the start
	}
	s.beforeStep = func() {
		if s.Quiet() {
			return
		}
		rng := s.Rand
		if rng.IntN(waveOneIn) == 0 {
			ra := st.accts[rng.IntN(len(st.accts))]
			if ra.billed < len(ra.waves) {
				p.bill(s, st, ra)
			}
		}
		if st.reports < maxRuns && rng.IntN(runOneIn) == 0 {
			p.report(s, st)
		}
		if st.drains < maxDrains && rng.IntN(drainOneIn) == 0 {
			p.drain(s, st, nil)
		}
		if rng.IntN(clockOneIn) == 0 {
			d := clockJumps[rng.IntN(len(clockJumps))]
			s.Count("lease-expiry")
			s.Env.Clock.Advance(d)
			s.Note("clock +%s", d)
		}
	}
	return nil
}

// bill spawns the account's next wave: each event billed as the worker bills it, a message of
// its own handled as an invocation of one (a unit of one event: archived, claimed and metered
// with its report mark, stored), up to maxRequests tries each, the same message each time.
func (p *Reporter) bill(s *Schedule, st *reporterState, ra *reportAccount) {
	wave := ra.billed
	ra.billed++
	ids := ra.waves[wave]
	w := s.Env.Worker().Worker
	s.Spawn(fmt.Sprintf("bill %s w%d", ra.acct.ID, wave), resources.FunctionWorker, func(ctx context.Context) error {
		a := ActorFrom(ctx)
		for _, id := range ids {
			body, err := event.EncodeEnvelope(event.Envelope{
				AccountID: ra.acct.ID, EventID: id, ReceivedAtMs: s.Env.Clock.Now().UnixMilli(),
				Event: []byte(fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/harness","type":"api.call"}`, id)),
			})
			if err != nil {
				return err
			}
			for range maxRequests {
				if _, err = w.Process(s.Invoke(ctx, resources.FunctionWorker), body); err == nil || a.Dead() {
					break
				}
			}
			if a.Dead() {
				return err
			}
		}
		return nil
	}, func(error) {
		// While faults are on, a reporter run follows the wave (the next minute's), and the
		// account's next wave is billed (once faults are over, Idle bills the rest).
		if s.Quiet() {
			return
		}
		if st.reports < maxRuns {
			p.report(s, st)
		}
		if ra.billed < len(ra.waves) {
			p.bill(s, st, ra)
		}
	})
}

// afterReport starts, while faults are on, a drainer run after a run that reported, which then
// meets the rows the report wrote.
func (p *Reporter) afterReport(s *Schedule, st *reporterState, reported *bool, one *reportAccount) func(error) {
	return func(error) {
		if *reported && !s.Quiet() && st.drains < maxDrains {
			p.drain(s, st, one)
		}
	}
}

// report spawns a reporter run: one invocation of the reporter function, under its own owner.
func (p *Reporter) report(s *Schedule, st *reporterState) {
	st.reports++
	fn := s.Env.Function(resources.FunctionReporter)
	pause := s.FaultRate > 0 && s.Rand.IntN(pauseOneIn) == 0
	n := st.reports
	// Half the runs while faults are on report one account's cycle by itself (Report, as a
	// reconciliation does for a key): a whole run reads 16 buckets of marks first, which few
	// runs get through while faults are on.
	var one *reportAccount
	if !s.Quiet() && s.Rand.IntN(2) == 0 {
		one = st.accts[s.Rand.IntN(len(st.accts))]
	}
	reported := new(bool)
	spawnRun(s, resources.FunctionReporter, n, pause, func(ictx context.Context) error {
		rep := reporterOf(fn, fmt.Sprintf("reporter-%d", n))
		if one != nil {
			out, err := rep.Report(ictx, report.Key{Account: one.acct.ID, Feature: plans.FeatureEvents, Cycle: p.cycle(s, one)}, nil)
			*reported = out == report.Reported
			return err
		}
		res, err := rep.Run(ictx)
		*reported = res.Reported > 0
		return err
	}, p.afterReport(s, st, reported, one))
}

// drain spawns a drainer run: one invocation of the drainer function, under its own owner.
func (p *Reporter) drain(s *Schedule, st *reporterState, target *reportAccount) {
	st.drains++
	fn := s.Env.Function(resources.FunctionDrainer)
	pause := s.FaultRate > 0 && s.Rand.IntN(pauseOneIn) == 0
	n := st.drains
	// Most runs while faults are on drain one account's cycle by itself (its rows read, each
	// due one drained, as the reconciler drains a repair row): a whole run reads 8 shards of the
	// due index first.
	one := target
	if one == nil && !s.Quiet() && s.Rand.IntN(3) != 0 {
		one = st.accts[s.Rand.IntN(len(st.accts))]
	}
	due := new(bool)
	spawnRun(s, resources.FunctionDrainer, n, pause, func(ictx context.Context) error {
		d := drainerOf(fn, fmt.Sprintf("drainer-%d", n))
		if one == nil {
			res, err := d.Run(ictx)
			*due = res.Due > 0
			return err
		}
		rows, err := drainerfn.PartsOf(fn).Outbox.Cycle(ictx, one.acct.ID, plans.FeatureEvents, p.cycle(s, one))
		if err != nil {
			return err
		}
		var errs []error
		for _, row := range rows {
			if row.Status.Due() {
				*due = true
				if _, err := d.Drain(ictx, outbox.RefOf(row)); err != nil {
					errs = append(errs, err)
				}
			}
		}
		return errors.Join(errs...)
	}, func(error) {
		// While faults are on and rows were due, the next minute's drainer run follows.
		if *due && !s.Quiet() && st.drains < maxDrains {
			s.Env.Clock.Advance(time.Minute)
			s.Note("clock +%s (the next drainer run)", time.Minute)
			p.drain(s, st, one)
		}
	})
}

// spawnRun spawns run n of a scheduled function (the reporter or the drainer) as one
// invocation, paused past its deadline when pause is set.
func spawnRun(s *Schedule, function string, n int, pause bool, run func(ictx context.Context) error, done func(error)) {
	s.Spawn(fmt.Sprintf("%s %d", function, n), function, func(ctx context.Context) error {
		ictx := s.Invoke(ctx, function)
		if pause {
			s.Pause(ictx)
		}
		return run(ictx)
	}, done)
}

// reporterOf is the function's reporter under its own owner: each invocation is its own process
// in Lambda, with its own name in the leases it takes.
func reporterOf(fn *compose.Function, owner string) *report.Reporter {
	r := reporterfn.PartsOf(fn).Reporter
	return &report.Reporter{
		Usage: r.Usage, Marks: r.Marks, State: r.State, Outbox: r.Outbox, Accounts: r.Accounts, Catalog: r.Catalog,
		Kinde: r.Kinde, Stripe: r.Stripe, Review: r.Review, Reconcile: r.Reconcile, Metrics: r.Metrics, Log: r.Log,
		Now: r.Now, Owner: owner, Hook: r.Hook,
		// One thread: the scheduler owns every interleaving.
		Concurrency: 1,
	}
}

// drainerOf is the function's drainer under its own owner.
func drainerOf(fn *compose.Function, owner string) *outbox.Drainer {
	d := drainerfn.PartsOf(fn).Drainer
	return &outbox.Drainer{
		Store: d.Store, Sender: d.Sender, Review: d.Review, Metrics: d.Metrics, Log: d.Log, Now: d.Now, Owner: owner, Hook: d.Hook,
		Concurrency: 1,
	}
}

// installReportHooks makes the reporter and the drainer crash, at random, between their steps.
func installReportHooks(env *Env) {
	if r := env.Reporter().Reporter; r.Hook == nil {
		r.Hook = func(ctx context.Context, pt report.Point, _ report.Key) error {
			return crashBetweenSteps(ctx, string(pt))
		}
	}
	if d := env.Drainer().Drainer; d.Hook == nil {
		d.Hook = func(ctx context.Context, pt outbox.Point, _ outbox.Row) error {
			return crashBetweenSteps(ctx, string(pt))
		}
	}
}

// Idle implements Pipeline: once faults are over, the waves not billed yet are billed, then
// what is still marked is reported (the clock moved past any lease a crashed run left) and what
// is still due is drained (the clock moved to its next attempt), until nothing is left.
func (p *Reporter) Idle(ctx context.Context, s *Schedule) bool {
	st := s.State.(*reporterState)
	if st.idle >= maxIdleRounds {
		return false
	}
	st.idle++
	spawned := false
	for _, ra := range st.accts {
		for ra.billed < len(ra.waves) {
			p.bill(s, st, ra)
			spawned = true
		}
	}
	if spawned {
		return true
	}
	fn := s.Env.Reporter()
	keys, _, err := fn.Reporter.Marks.Dirty(ctx, report.MaxKeysPerRun, 0)
	if err != nil {
		s.Violate("reporter: read the marks: %v", err)
		return false
	}
	if len(keys) > 0 {
		s.Env.Clock.Advance(report.LeaseFor + time.Second)
		s.Note("clock +%s (%d cycles still marked)", report.LeaseFor+time.Second, len(keys))
		p.report(s, st)
		return true
	}
	next := int64(0)
	for _, ra := range st.accts {
		rows, err := fn.Outbox.Cycle(ctx, ra.acct.ID, plans.FeatureEvents, p.cycle(s, ra))
		if err != nil {
			s.Violate("reporter: read the outbox: %v", err)
			return false
		}
		for _, row := range rows {
			at := int64(0)
			switch row.Status {
			case outbox.Pending:
				at = row.NextAttemptAtMs
			case outbox.Sending:
				at = row.ClaimUntilMs
			default:
				continue
			}
			if next == 0 || at < next {
				next = at
			}
		}
	}
	if next == 0 {
		return false
	}
	if wait := time.Duration(next-s.Env.Clock.Now().UnixMilli()) * time.Millisecond; wait > 0 {
		s.Env.Clock.Advance(wait + time.Millisecond)
		s.Note("clock +%s (the next outbox row due)", wait+time.Millisecond)
	}
	p.drain(s, st, nil)
	return true
}

// cycle is the account's cycle the schedule bills into (the clock never leaves it).
func (p *Reporter) cycle(s *Schedule, ra *reportAccount) string {
	return ra.acct.CycleAt(startTime).Label()
}

// Check implements Pipeline.
func (p *Reporter) Check(ctx context.Context, s *Schedule) []string {
	st := s.State.(*reporterState)
	fn := s.Env.Reporter()
	var v []string
	bad := func(format string, args ...any) { v = append(v, "reporter: "+fmt.Sprintf(format, args...)) }
	stand := s.Env.provider.Stripe()
	eventName := plans.Default().Definition(plans.FeatureEvents).Stripe.MeterEventName
	if c := stand.Counts(); c.EventsRecorded+c.Duplicates+c.Refused < c.MeterEventRequests {
		bad("Stripe refused %d meter events as malformed", c.MeterEventRequests-c.EventsRecorded-c.Duplicates-c.Refused)
	}
	if keys, _, err := fn.Reporter.Marks.Dirty(ctx, report.MaxKeysPerRun, 0); err != nil || len(keys) > 0 {
		bad("cycles are still marked at the end: %v (%v)", keys, err)
	}
	dead := 0
	missing := map[string]bool{} // accounts whose meter a DEAD row left short
	for _, ra := range st.accts {
		label := p.cycle(s, ra)
		k := report.Key{Account: ra.acct.ID, Feature: plans.FeatureEvents, Cycle: label}
		totals, err := fn.Usage.Read(ctx, ra.acct.ID, plans.FeatureEvents, label)
		if err != nil {
			bad("read the usage of %s: %v", ra.acct.ID, err)
			continue
		}
		billed := totals.Billed()
		state, err := fn.State.Get(ctx, k)
		if err != nil {
			bad("read the report state of %s: %v", ra.acct.ID, err)
			continue
		}
		if state.StripeSent != billed {
			bad("%s: lastSent is %d; the ledger billed %d", ra.acct.ID, state.StripeSent, billed)
		}
		rows, err := fn.Outbox.Cycle(ctx, ra.acct.ID, plans.FeatureEvents, label)
		if err != nil {
			bad("read the outbox of %s: %v", ra.acct.ID, err)
			continue
		}
		byID := map[string]outbox.Row{}
		for _, row := range rows {
			byID[row.Identifier()] = row
			switch row.Status {
			case outbox.Sent:
				if row.SentAtMs == 0 {
					bad("%s: row %s is SENT with no time it was sent", ra.acct.ID, row.Identifier())
				}
			case outbox.Dead:
				dead++
				sends, faulted := s.Env.provider.attempts(row.Identifier())
				if row.Attempts < outbox.MaxAttempts || faulted < row.Attempts || row.LastError == "" {
					bad("%s: row %s is DEAD after %d attempts (%d sends, %d faulted, last error %q): DEAD only when every one of %d sends met a fault",
						ra.acct.ID, row.Identifier(), row.Attempts, sends, faulted, row.LastError, outbox.MaxAttempts)
				}
			default:
				bad("%s: row %s ends %s (attempts %d, last error %q)", ra.acct.ID, row.Identifier(), row.Status, row.Attempts, row.LastError)
			}
		}
		applied := map[string]int{}
		var meter int64
		for _, e := range stand.Events() {
			if e.Customer != ra.acct.StripeCustomerID || e.EventName != eventName {
				continue
			}
			applied[e.Identifier]++
			if !e.Cancelled {
				meter += e.Value
			}
			row, ok := byID[e.Identifier]
			switch {
			case !ok:
				bad("%s: Stripe applied %s (value %d), which no outbox row names", ra.acct.ID, e.Identifier, e.Value)
			case row.Delta != e.Value:
				bad("%s: Stripe applied %s with value %d; its row's delta is %d", ra.acct.ID, e.Identifier, e.Value, row.Delta)
			}
		}
		for id, n := range applied {
			if n > 1 {
				bad("%s: Stripe applied identifier %s %d times", ra.acct.ID, id, n)
			}
		}
		for id, row := range byID {
			if row.Status == outbox.Sent && applied[id] == 0 {
				bad("%s: row %s is SENT and Stripe never applied it", ra.acct.ID, id)
			}
			if row.Status == outbox.Dead && applied[id] == 0 {
				missing[ra.acct.ID] = true
			}
		}
		if meter != billed && !missing[ra.acct.ID] {
			bad("%s: Stripe's meter holds %d; the ledger billed %d", ra.acct.ID, meter, billed)
		}
	}
	if got := s.Env.Metrics.Get(metrics.OutboxDead) - st.deadBefore; dead > 0 && got == 0 {
		bad("%d outbox rows are DEAD and the OutboxDead metric did not move", dead)
	}
	if len(v) > 0 {
		return v
	}
	return append(v, p.reconcile(ctx, s, st, missing)...)
}

// reconcile runs the reconciler on every account once the schedule is over: it must find each
// meter matching the ledger, or repair and confirm what DEAD rows left out; then, if the schedule
// drifts a meter, it must find the drift.
func (p *Reporter) reconcile(ctx context.Context, s *Schedule, st *reporterState, missing map[string]bool) []string {
	var v []string
	bad := func(format string, args ...any) { v = append(v, "reporter: "+fmt.Sprintf(format, args...)) }
	rec := s.Env.Reconciler().Reconciler
	// The reconciler's waits (a read-back, a recheck) do not wait: the schedule is quiet.
	ctx = retry.WithSleep(ctx, func(ctx context.Context, _ time.Duration) error { return ctx.Err() })
	// Leases a crashed run left have lapsed by the time anyone reconciles.
	s.Env.Clock.Advance(report.LeaseFor + time.Second)
	for _, ra := range st.accts {
		want := reconcile.Match
		if missing[ra.acct.ID] {
			want = reconcile.UnderBilled
		}
		check, res, err := p.stripeCheck(ctx, rec, ra)
		switch {
		case err != nil:
			bad("the reconciler failed on %s: %v", ra.acct.ID, err)
		case res.Rebuilt > 0:
			bad("the reconciler rebuilt %d counter rows of %s: the counters differed from the ledger", res.Rebuilt, ra.acct.ID)
		case check.Verdict != want || (want != reconcile.Match && !check.Confirmed):
			bad("the reconciler says %s on %s (ledger %d, sent %d, meter %v, confirmed %v); want %s", check.Verdict, ra.acct.ID,
				check.Ledger, check.Sent, deref(check.Meter), check.Confirmed, want)
		}
	}
	if st.drift == 0 || len(v) > 0 {
		return v
	}
	ra := st.accts[0]
	eventName := plans.Default().Definition(plans.FeatureEvents).Stripe.MeterEventName
	s.Count("meter-drift")
	s.Env.provider.Stripe().Drift(eventName, ra.acct.StripeCustomerID, st.drift, s.Env.Clock.Now())
	check, _, _ := p.stripeCheck(ctx, rec, ra)
	want := reconcile.OverBilled
	if st.drift < 0 {
		want = reconcile.UnderBilled
	}
	if check.Verdict != want {
		bad("a drift of %d on %s's meter: the reconciler says %s (ledger %d, meter %v); want %s", st.drift, ra.acct.ID,
			check.Verdict, check.Ledger, deref(check.Meter), want)
	}
	return v
}

// stripeCheck reconciles the account's cycle and returns its Stripe check.
func (p *Reporter) stripeCheck(ctx context.Context, rec *reconcile.Reconciler, ra *reportAccount) (reconcile.Check, reconcile.Result, error) {
	page, err := rec.Run(ctx, reconcile.Input{Account: ra.acct.ID, Cycle: ra.acct.CycleAt(startTime).Label()})
	for _, res := range page.Results {
		if res.Feature != plans.FeatureEvents {
			continue
		}
		for _, c := range res.Checks {
			if c.Provider == report.ProviderStripe {
				return c, res, err
			}
		}
	}
	return reconcile.Check{}, reconcile.Result{}, fmt.Errorf("no Stripe check of %s's events (%v)", ra.acct.ID, err)
}
