package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// Pipeline is one of Ferry's pipelines under the harness: it sets up a schedule's work, reacts to
// its actors ending (redeliveries, retries), and checks its invariants once the schedule is
// over. Adding a pipeline is writing these three and appending it to Pipelines.
type Pipeline interface {
	// Name is what --pipeline selects ("events").
	Name() string
	// Start sets up one schedule (accounts, requests, messages) and spawns its first actors.
	Start(ctx context.Context, s *Schedule) error
	// Idle runs when no actor is left. It spawns what finishes the schedule (a redelivery, a
	// retry, a last sweep), and reports whether it spawned anything.
	Idle(ctx context.Context, s *Schedule) bool
	// Check reads durable state once the schedule is over and reports every invariant broken.
	Check(ctx context.Context, s *Schedule) []string
}

// Pipelines are the pipelines the harness runs, in order. A schedule runs one, drawn from its
// seed among those selected.
func Pipelines() []Pipeline {
	return []Pipeline{&Events{}, &Holds{}, &Idempotency{}, &Events{Packed: true}, &Reporter{}, &Inbox{}}
}

// Limits of a schedule.
const (
	// stepLimit bounds the calls of one schedule; a schedule that has not ended by then has
	// work that never finishes (a liveness failure).
	stepLimit = 4_000
	// faultSteps is how many calls may meet faults; after them the schedule runs clean, as
	// a system does once an outage ends, and every piece of work must finish.
	faultSteps = 250
)

// faultRates are the per-call fault probabilities a schedule draws from: some schedules run
// clean, most meet a few faults, some many.
var faultRates = []float64{0, 0.04, 0.08, 0.15, 0.25}

// Schedule is one run of one pipeline under one seed.
type Schedule struct {
	*Scheduler
	Seed     uint64
	Env      *Env
	Pipeline Pipeline
	// Rand is the setup stream: the pipeline's Start, Idle and environment moves use it, in
	// the scheduler's goroutine only.
	Rand *rand.Rand
	// FaultRate is the chance that a call meets a fault while faults are on.
	FaultRate float64
	// ConflictRate is, in addition, the chance that a transaction meets a conflicting one: some
	// schedules are a storm of conflicts on the rows they share.
	ConflictRate float64
	// State is the pipeline's own state for this schedule.
	State any

	ablation *instrument.Ablation

	mu         sync.Mutex
	violations []string
	faults     map[string]int
	observers  []func(a *Actor, c Call, params any, committed bool)
}

// Quiet reports whether faults are over: the schedule now runs clean to its end. They end after
// faultSteps calls, or once every actor is done, whichever comes first.
func (s *Schedule) Quiet() bool {
	s.Scheduler.mu.Lock()
	defer s.Scheduler.mu.Unlock()
	return s.quiet || s.steps >= faultSteps
}

// Violate records a broken invariant.
func (s *Schedule) Violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// Count records one injected fault of the environment (a duplicate delivery, a crash between
// two steps, a lease running out).
func (s *Schedule) Count(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[kind]++
}

// Observe registers a function that sees every call an actor sent, and whether it committed.
func (s *Schedule) Observe(f func(a *Actor, c Call, params any, committed bool)) {
	s.observers = append(s.observers, f)
}

func (s *Schedule) observe(a *Actor, c Call, params any, committed bool) {
	for _, f := range s.observers {
		f(a, c, params, committed)
	}
}

func (s *Schedule) countFault(f Fault, c Call) {
	if f == None {
		return
	}
	kind := f.String()
	if f == ServiceError {
		kind = strings.ToLower(c.Service) + "-error"
	}
	s.Count(kind)
}

// check holds a call to the design before it is sent: every condition clause is in the guard
// table, every read the design calls strongly consistent is, and the ablated guard (if any) is
// removed.
func (s *Schedule) check(a *Actor, w *wire, params any) {
	for _, u := range instrument.Unlisted(params, w.tables) {
		s.Violate("a condition clause no guard of the table names: %s (add it to its adapter's Guards)", u)
	}
	for _, r := range instrument.Reads(params, w.tables) {
		if msg := instrument.StaleRead(a.Function, r); msg != "" {
			s.Violate("%s", msg)
		}
	}
	if s.ablation != nil {
		s.ablation.Apply(params)
	}
}

// Result is what one schedule did.
type Result struct {
	Seed       uint64
	Pipeline   string
	FaultRate  float64
	Steps      int
	Violations []string
	// Faults counts the faults injected, by kind.
	Faults map[string]int
	Trace  []Step
	// Stripped counts the writes the ablated guard was removed from.
	Stripped int
}

// Failed reports whether the schedule broke an invariant.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

// TraceText is the trace, one step a line.
func (r Result) TraceText() string {
	var b strings.Builder
	for _, st := range r.Trace {
		b.WriteString(st.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// startTime is where every schedule's clock starts: mid-cycle, so that no lease or window
// crosses a month unless a schedule moves it there.
var startTime = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

// runSchedule runs one schedule of p on env.
func runSchedule(ctx context.Context, env *Env, seed uint64, p Pipeline, ablate []dynamo.Guard) Result {
	env.Clock.Set(startTime)
	s := &Schedule{
		Scheduler: newScheduler(ctx, seed, env.Clock, stepLimit),
		Seed:      seed, Env: env, Pipeline: p,
		Rand:   rand.New(rand.NewPCG(seed, streamSetup)),
		faults: map[string]int{},
	}
	s.Scheduler.owner = s
	s.FaultRate = faultRates[s.Rand.IntN(len(faultRates))]
	if s.Rand.IntN(4) == 0 {
		s.ConflictRate = 0.3
	}
	if len(ablate) > 0 {
		s.ablation = instrument.NewAblation(env.Names, ablate...)
	}
	s.decide = func(_ *Actor, c Call) Fault {
		if s.Quiet() {
			return None
		}
		if s.ConflictRate > 0 && c.Op == "TransactWriteItems" && s.rng.Float64() < s.ConflictRate {
			return TxnConflict
		}
		if s.FaultRate == 0 || s.rng.Float64() >= s.FaultRate {
			return None
		}
		kinds := faultsFor(c)
		if len(kinds) == 0 {
			return None
		}
		return kinds[s.rng.IntN(len(kinds))]
	}
	s.idle = func() bool {
		s.Scheduler.mu.Lock()
		if !s.quiet {
			s.quiet = true
			s.trace = append(s.trace, Step{N: s.steps, Actor: "-", What: "faults end"})
		}
		s.Scheduler.mu.Unlock()
		return p.Idle(ctx, s)
	}
	env.markRefused()
	if err := p.Start(ctx, s); err != nil {
		s.Violate("setting up the schedule failed: %v", err)
	} else if err := s.Run(); err != nil {
		s.Violate("%v", err)
	}
	if len(s.violations) == 0 || !strings.Contains(strings.Join(s.violations, "\n"), errStepLimit.Error()) {
		for _, v := range p.Check(ctx, s) {
			s.Violate("%s", v)
		}
	}
	for _, r := range env.refusedSince() {
		s.Violate("IAM: %s", r)
	}
	res := Result{
		Seed: seed, Pipeline: p.Name(), FaultRate: s.FaultRate, Steps: s.Steps(),
		Violations: dedupe(s.violations), Faults: s.faults, Trace: s.Trace(),
	}
	if s.ablation != nil {
		for _, n := range s.ablation.Stripped() {
			res.Stripped += n
		}
	}
	return res
}

func dedupe(vs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range vs {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// takeAll takes every message there is off a queue, and returns their bodies in a stable order.
func takeAll(ctx context.Context, s *Schedule, queue string) []string {
	url := s.Env.Names.QueueURL(queue)
	var bodies []string
	for {
		out, err := s.Env.Admin.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: receiveBatch, VisibilityTimeout: receiveHold,
		})
		if err != nil {
			s.Violate("harness: receive from the %s queue: %v", queue, err)
			return bodies
		}
		if len(out.Messages) == 0 {
			break
		}
		var entries []sqstypes.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
			entries = append(entries, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
		}
		if _, err := s.Env.Admin.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			s.Violate("harness: delete from the %s queue: %v", queue, err)
		}
	}
	sort.Strings(bodies)
	return bodies
}
