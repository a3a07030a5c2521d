package harness

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Limits of a holds schedule.
const (
	holdsLimit   = 10_000
	maxJobs      = 5
	maxChargers  = 3
	maxSteps     = 3
	maxRequests  = 4 // a client's attempts at one request
	maxSweeps    = 3 // last sweeps once faults are over
	holdsRate    = 3 // new holds per minute per account, low enough that schedules meet it
	jumpChance   = 60
	sweeperOneIn = 40
	// holdsFeature is the feature the jobs hold.
	holdsFeature = "tokens"
)

// holdAmounts are what jobs hold: amounts that fill the limit exactly, one over, one under, so
// that the capacity rule is tested at its edge.
var holdAmounts = []int64{1, 2_499, 2_500, 2_501, 4_999, 5_000, 5_001, 7_500, 10_000, 10_001}

// Holds is the usage holds pipeline with its sweeper: jobs reserve, charge in concurrent steps
// (a step repeated, a job duplicated), settle (twice at once, sometimes at a final usage of their
// own), or vanish and leave their lease to run out; the clock jumps past leases, the sweeper
// races late workers and settlements, and every write meets the faults of the wire.
//
// Invariants, per account: the budget row's used + held = committed, never over the limit;
// held = what the RUNNING holds hold and used = what the final holds charged; a hold's usage is
// the sum of its steps and never over its amount; every settlement answered to a client is the
// one stored (a hold is never both SETTLED and EXPIRED); every charge answered is stored; no
// window admits more holds than the rate; a refusal never refuses a job that fit; the sweeper
// expires only holds whose lease ran out; at the end no hold is left RUNNING.
type Holds struct{}

// Name implements Pipeline.
func (*Holds) Name() string { return "holds" }

type holdJob struct {
	key      string
	amount   int64
	used     *int64 // a final usage the job settles at, if it names one
	abandon  bool
	holdID   string
	admitted bool
	// chargers still running.
	chargers int
	started  bool
	// settling: the settlement is spawned (at the end, or racing the chargers).
	settling bool
}

type holdsState struct {
	acct     accounts.Account
	jobs     []*holdJob
	settles  map[string][]holds.Settlement // answers clients received, by hold
	charges  map[string]holds.Step         // by hold id + "/" + step key
	refusals []holds.RefusedError
	sweeps   int
	// lastSweeps counts the sweeps run once faults were over.
	lastSweeps int
}

// Start implements Pipeline.
func (p *Holds) Start(ctx context.Context, s *Schedule) error {
	r := s.Rand
	st := &holdsState{settles: map[string][]holds.Settlement{}, charges: map[string]holds.Step{}}
	s.State = st
	acct, _, err := s.Env.API().Accounts.Create(ctx, accounts.CreateInput{
		ID: fmt.Sprintf("acct_h%d", s.Seed), Plan: "free", Status: accounts.Active,
		Limits: map[string]plans.Limit{holdsFeature: plans.Max(holdsLimit)},
	})
	if err != nil {
		return fmt.Errorf("create account: %w", err)
	}
	st.acct = acct
	svc := s.Env.Holds().Holds
	svc.RatePerMinute = holdsRate
	n := 2 + r.IntN(maxJobs-1)
	s.Note("holds: %d jobs, limit %d, fault rate %.2f", n, holdsLimit, s.FaultRate)
	for i := range n {
		j := &holdJob{key: fmt.Sprintf("job_%d", i), amount: holdAmounts[r.IntN(len(holdAmounts))], abandon: r.IntN(4) == 0}
		j.holdID = holds.ID(acct.ID, j.key)
		if r.IntN(3) == 0 {
			u := int64(r.IntN(int(j.amount) + 2))
			j.used = &u
		}
		st.jobs = append(st.jobs, j)
		p.reserve(s, st, j)
		if r.IntN(4) == 0 {
			s.Count("duplicate-request")
			p.reserve(s, st, j) // the same job started twice
		}
	}
	// The environment: the clock jumps past every lease now and then, and the sweeper runs,
	// racing the jobs' charges and settlements.
	s.beforeStep = leaseJumpsAndSweeps(s, jumpChance, holds.LeaseDuration, sweeperOneIn, "sweeper-race", func() { p.sweep(s, st) })
	return nil
}

// attempts runs one client request up to maxRequests times while it fails with an error worth
// retrying (the same keys each time); each attempt is an invocation of the holds function.
func attempts(ctx context.Context, s *Schedule, function string, f func(ctx context.Context) error) error {
	var err error
	for range maxRequests {
		err = f(s.Invoke(ctx, function))
		if err == nil || final(err) || ActorFrom(ctx).Dead() {
			return err
		}
	}
	return err
}

// final reports the answers a client does not retry: a refusal, a rate limit, a hold that is no
// longer running, a key reused.
func final(err error) bool {
	var refused *holds.RefusedError
	var rate *holds.RateLimitedError
	var notRunning *holds.NotRunningError
	var reused *holds.KeyReusedError
	return errors.As(err, &refused) || errors.As(err, &rate) || errors.As(err, &notRunning) || errors.As(err, &reused)
}

func (p *Holds) reserve(s *Schedule, st *holdsState, j *holdJob) {
	svc := s.Env.Holds().Holds
	s.Spawn("reserve "+j.key, resources.FunctionHolds, func(ctx context.Context) error {
		return attempts(ctx, s, resources.FunctionHolds, func(ctx context.Context) error {
			h, _, err := svc.Reserve(ctx, st.acct, holds.ReserveInput{Key: j.key, Feature: holdsFeature, Amount: j.amount})
			var refused *holds.RefusedError
			if errors.As(err, &refused) {
				st.refusals = append(st.refusals, *refused)
			}
			if err == nil {
				if h.ID != j.holdID {
					s.Violate("holds: %s was given hold %s; its key names %s", j.key, h.ID, j.holdID)
				}
				j.admitted = true
			}
			return err
		})
	}, func(error) {
		if j.admitted && !j.started {
			j.started = true
			p.charge(s, st, j)
		}
	})
}

// charge spawns the job's chargers: one to maxChargers concurrent workers, each charging its own
// steps (one of them sometimes repeating a step key).
func (p *Holds) charge(s *Schedule, st *holdsState, j *holdJob) {
	svc := s.Env.Holds().Holds
	n := 1 + s.Rand.IntN(maxChargers)
	j.chargers = n
	for c := range n {
		steps := 1 + s.Rand.IntN(maxSteps)
		amounts := make([]int64, steps)
		for i := range amounts {
			amounts[i] = int64(s.Rand.IntN(int(j.amount)/2 + 2))
		}
		repeat := s.Rand.IntN(4) == 0
		s.Spawn(fmt.Sprintf("charge %s w%d", j.key, c), resources.FunctionHolds, func(ctx context.Context) error {
			for i, amount := range amounts {
				key := fmt.Sprintf("w%d-s%d", c, i)
				for range 1 + btoi(repeat && i == 0) {
					var got holds.Step
					err := attempts(ctx, s, resources.FunctionHolds, func(ctx context.Context) error {
						var err error
						got, err = svc.Charge(ctx, st.acct, holds.ChargeInput{HoldID: j.holdID, Key: key, Amount: amount})
						return err
					})
					var notRunning *holds.NotRunningError
					switch {
					case errors.As(err, &notRunning):
						return nil // a late worker: its hold is settled, and it stops
					case err != nil:
						return err
					}
					if prior, ok := st.charges[j.holdID+"/"+key]; ok && prior.Charged != got.Charged {
						s.Violate("holds: step %s of %s answered %d, then %d", key, j.key, prior.Charged, got.Charged)
					}
					st.charges[j.holdID+"/"+key] = got
					if got.Capped {
						return nil // the job must stop
					}
				}
			}
			return nil
		}, func(error) {
			j.chargers--
			if j.chargers == 0 && !j.settling {
				p.settle(s, st, j)
			}
		})
	}
	if s.Rand.IntN(3) == 0 {
		s.Count("settle-racing-charges")
		p.settle(s, st, j) // the job settles while its last steps are still in flight
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// settle ends the job: once, or twice at once; or never (its worker vanished, and its lease will
// run out).
func (p *Holds) settle(s *Schedule, st *holdsState, j *holdJob) {
	j.settling = true
	if j.abandon {
		s.Count("abandoned-job")
		return
	}
	svc := s.Env.Holds().Holds
	n := 1 + btoi(s.Rand.IntN(3) == 0)
	for i := range n {
		s.Spawn(fmt.Sprintf("settle %s #%d", j.key, i), resources.FunctionHolds, func(ctx context.Context) error {
			return attempts(ctx, s, resources.FunctionHolds, func(ctx context.Context) error {
				got, err := svc.Settle(ctx, st.acct, holds.SettleInput{HoldID: j.holdID, Used: j.used})
				if err == nil {
					st.settles[j.holdID] = append(st.settles[j.holdID], got)
				}
				return err
			})
		}, nil)
	}
}

func (p *Holds) sweep(s *Schedule, st *holdsState) {
	svc := s.Env.Sweeper().Holds
	st.sweeps++
	s.Spawn(fmt.Sprintf("sweeper %d", st.sweeps), resources.FunctionSweeper, func(ctx context.Context) error {
		_, err := svc.Sweep(s.Invoke(ctx, resources.FunctionSweeper))
		return err
	}, nil)
}

// Idle implements Pipeline: once faults are over and the jobs are done, the clock moves past
// every lease and the sweeper settles what was left running.
func (p *Holds) Idle(ctx context.Context, s *Schedule) bool {
	st := s.State.(*holdsState)
	if !s.Quiet() || st.lastSweeps >= maxSweeps {
		return false
	}
	running := false
	for _, j := range st.jobs {
		if h, err := s.Env.Holds().Holds.Store.Get(ctx, st.acct.ID, j.holdID); err == nil && h.Status == holds.Running {
			running = true
		}
	}
	if !running {
		return false
	}
	st.lastSweeps++
	s.Env.Clock.Advance(holds.LeaseDuration + time.Second)
	s.Note("clock +%s (the last sweep)", holds.LeaseDuration+time.Second)
	p.sweep(s, st)
	return true
}

// Check implements Pipeline.
func (p *Holds) Check(ctx context.Context, s *Schedule) []string {
	st := s.State.(*holdsState)
	fn := s.Env.Holds()
	var v []string
	bad := func(format string, args ...any) { v = append(v, "holds: "+fmt.Sprintf(format, args...)) }
	var running, charged int64
	cycles := map[string]bool{}
	windows := map[int64]int{}
	for _, j := range st.jobs {
		h, err := fn.Holds.Store.Get(ctx, st.acct.ID, j.holdID)
		if errors.Is(err, holds.ErrNotFound) {
			if j.admitted {
				bad("%s was admitted and its hold %s does not exist", j.key, j.holdID)
			}
			continue
		}
		if err != nil {
			bad("read %s: %v", j.holdID, err)
			continue
		}
		cycles[h.Cycle] = true
		windows[h.CreatedAtMs/time.Minute.Milliseconds()]++
		steps, err := p.steps(ctx, s, st.acct.ID, j.holdID)
		if err != nil {
			bad("read the steps of %s: %v", j.key, err)
			continue
		}
		for key, got := range st.charges {
			if len(key) > len(j.holdID) && key[:len(j.holdID)] == j.holdID {
				if stored, ok := steps[key[len(j.holdID)+1:]]; !ok || stored != got.Charged {
					bad("step %s was answered with %d charged and stored as %d (stored %v)", key[len(j.holdID)+1:], got.Charged, stored, ok)
				}
			}
		}
		var sum int64
		for _, c := range steps {
			sum += c
		}
		if h.Used > h.Amount && (h.Status == holds.Running || j.used == nil) {
			bad("%s recorded %d against a hold of %d", j.key, h.Used, h.Amount)
		}
		wantUsed := sum
		if h.Status == holds.Settled && j.used != nil {
			wantUsed = *j.used
		}
		if h.Used != wantUsed {
			bad("%s (%s) has used %d; its steps charged %d (final usage asked: %v)", j.key, h.Status, h.Used, sum, deref(j.used))
		}
		switch h.Status {
		case holds.Running:
			running += h.Amount
			bad("%s is left RUNNING", j.key)
		case holds.Settled, holds.Expired:
			charged += h.Charged
			// The sweeper expires only a lease that ran out: the final hold keeps the lease it
			// was settled under, so an expiry before it is a live job's hold taken from it.
			if h.Status == holds.Expired && h.SettledAtMs < h.LeaseExpiresAtMs {
				bad("%s was EXPIRED at %s while its lease ran to %s: a live job's hold was expired", j.key,
					time.UnixMilli(h.SettledAtMs).UTC().Format(time.TimeOnly), time.UnixMilli(h.LeaseExpiresAtMs).UTC().Format(time.TimeOnly))
			}
			if want := min(h.Used, h.Amount); h.Charged != max(0, want) || h.Charged+h.Released != h.Amount {
				bad("%s settled at used %d of %d: charged %d, released %d", j.key, h.Used, h.Amount, h.Charged, h.Released)
			}
		default:
			bad("%s has status %q", j.key, h.Status)
		}
		for _, got := range st.settles[j.holdID] {
			if got != h.Settlement() {
				bad("a settle of %s answered %+v; the hold stores %+v", j.key, got, h.Settlement())
			}
		}
	}
	for w, n := range windows {
		if n > holdsRate {
			bad("%d holds were admitted in the minute starting %s; the rate is %d", n, time.UnixMilli(w*time.Minute.Milliseconds()).UTC().Format(time.TimeOnly), holdsRate)
		}
	}
	for _, r := range st.refusals {
		if r.Needed <= r.Remaining {
			bad("a job of %d was refused with %d remaining", r.Needed, r.Remaining)
		}
	}
	var used, held, committed int64
	for c := range cycles {
		b, err := fn.Usage.ReadBudget(ctx, st.acct.ID, holdsFeature, c, true)
		if err != nil {
			bad("read the budget: %v", err)
			return v
		}
		used, held, committed = used+b.Used, held+b.Held, committed+b.Committed
	}
	if used+held != committed {
		bad("the budget has used %d + held %d, and committed %d", used, held, committed)
	}
	if held != running {
		bad("the budget holds %d; the running holds hold %d", held, running)
	}
	if used != charged {
		bad("the budget has used %d; the settled holds charged %d", used, charged)
	}
	if committed > holdsLimit || used > holdsLimit {
		bad("the budget committed %d (used %d), past the limit %d", committed, used, holdsLimit)
	}
	return v
}

func deref(p *int64) any {
	if p == nil {
		return "none"
	}
	return *p
}

// steps reads what each of a hold's steps charged, by step key.
func (p *Holds) steps(ctx context.Context, s *Schedule, accountID, holdID string) (map[string]int64, error) {
	out, err := s.Env.Admin.DynamoDB.Query(ctx, &dynamodb.QueryInput{
		TableName:                aws.String(s.Env.Names.Table(resources.TableHolds)),
		KeyConditionExpression:   aws.String("#pk = :pk AND begins_with(#sk, :step)"),
		ExpressionAttributeNames: map[string]string{"#pk": "pk", "#sk": "sk"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": dynamo.S(accountID + "#" + holdID), ":step": dynamo.S("step#"),
		},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	if out.LastEvaluatedKey != nil {
		return nil, errors.New("more steps than one page")
	}
	steps := map[string]int64{}
	keys := make([]string, 0, len(out.Items))
	for _, it := range out.Items {
		key := dynamo.Str(it, "stepKey")
		keys = append(keys, key)
		steps[key] = dynamo.Int(it, "charged")
	}
	sort.Strings(keys)
	return steps, nil
}
