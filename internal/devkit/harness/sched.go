package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/testclock"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// Limits of one schedule.
const (
	// stuckAfter is how long the scheduler waits for a running actor to reach its next call or
	// end before it calls the schedule stuck: actors never wait on anything but the scheduler,
	// so this only ends a harness defect.
	stuckAfter = time.Minute
	// stepTick is how far the clock moves at every step, so that every write gets its own
	// instant (Ferry reads the clock once per unit of work).
	stepTick = time.Millisecond
)

// Actor is one logical thread of the system under test: a worker handling one delivery, a job
// calling the holds, a client sending one keyed request, a sweeper run. Its calls to DynamoDB,
// S3 and SQS park until the scheduler releases them one at a time, so that actors that run
// "concurrently" interleave at call granularity in an order the seed alone decides. An actor
// must not start goroutines that call AWS at the same time (the sweeper runs one shard at a time
// in the harness).
type Actor struct {
	// ID numbers actors in the order they were spawned, from 1.
	ID int
	// Name says what the actor is ("worker evt_03").
	Name string
	// Function is the Ferry function whose code the actor runs ("worker").
	Function string
	// Rand is the actor's own stream, derived from the seed and its id; only the actor's
	// goroutine uses it.
	Rand *rand.Rand

	sched  *Scheduler
	run    func(ctx context.Context) error
	done   func(err error)
	resume chan Fault
	call   Call
	// dead: the actor's process was killed. Its code still unwinds, but every call it makes
	// fails at once without reaching anything.
	dead bool
	err  error
}

// Dead reports whether the actor's process was killed.
func (a *Actor) Dead() bool {
	a.sched.mu.Lock()
	defer a.sched.mu.Unlock()
	return a.dead
}

// Kill kills the actor's process from inside it (a crash at a step boundary).
func (a *Actor) Kill() {
	a.sched.mu.Lock()
	defer a.sched.mu.Unlock()
	a.dead = true
}

type actorKey struct{}

// ActorFrom returns the actor whose context ctx is, if any.
func ActorFrom(ctx context.Context) *Actor {
	a, _ := ctx.Value(actorKey{}).(*Actor)
	return a
}

// Call is one call an actor makes, as the scheduler sees it.
type Call struct {
	Service string // DynamoDB, S3, SQS
	Op      string
	// Table is the logical resource the call is on (table, bucket or queue).
	Table string
	// Write: the call changes state.
	Write bool
}

func (c Call) String() string {
	if c.Table == "" {
		return c.Service + " " + c.Op
	}
	return c.Service + " " + c.Op + " " + c.Table
}

// Step is one entry of a schedule's trace.
type Step struct {
	N     int
	Actor string
	What  string
}

func (s Step) String() string { return fmt.Sprintf("%4d %-28s %s", s.N, s.Actor, s.What) }

type actorEvent struct {
	a      *Actor
	parked bool
	err    error
}

// Scheduler owns every interleaving of one schedule. It starts actors, waits until each is
// parked at a call or done, then releases exactly one parked call — which one, and what fault it
// meets, drawn from its own seeded stream — and so on until no actor is left. Nothing else
// decides an order: the schedule is a function of the seed.
type Scheduler struct {
	seed   uint64
	rng    *rand.Rand
	clock  *testclock.Clock
	base   context.Context
	events chan actorEvent
	// decide draws the fault for a released call (nil: none).
	decide func(a *Actor, c Call) Fault
	// beforeStep runs before each release, in the scheduler's goroutine: the environment's
	// moves (a lease running out, the sweeper starting).
	beforeStep func()
	// idle runs when no actor is left; it may spawn more (redeliveries, a final sweep).
	idle func() bool
	// owner is the schedule the scheduler runs.
	owner *Schedule
	// quiet: faults are over.
	quiet bool

	mu      sync.Mutex
	actors  []*Actor
	running int
	parked  []*Actor
	done    []actorEvent
	steps   int
	limit   int
	trace   []Step
}

func newScheduler(base context.Context, seed uint64, clock *testclock.Clock, stepLimit int) *Scheduler {
	return &Scheduler{
		seed: seed, rng: rand.New(rand.NewPCG(seed, streamScheduler)), clock: clock, base: base,
		events: make(chan actorEvent, 64), limit: stepLimit,
	}
}

// Streams of the seed: each logical actor derives its own, and none is shared between
// goroutines.
const (
	streamScheduler = 0x5c4ed
	streamSetup     = 0x5e7a9
	streamActors    = 0xac7025
)

// Spawn starts an actor. done, if set, runs in the scheduler's goroutine once the actor's
// function returned (with its error), in the order of the actors' ids.
func (s *Scheduler) Spawn(name, function string, run func(ctx context.Context) error, done func(err error)) *Actor {
	s.mu.Lock()
	id := len(s.actors) + 1
	a := &Actor{
		ID: id, Name: name, Function: function, Rand: rand.New(rand.NewPCG(s.seed, streamActors+uint64(id))),
		sched: s, run: run, done: done, resume: make(chan Fault, 1),
	}
	s.actors = append(s.actors, a)
	s.running++
	s.trace = append(s.trace, Step{N: s.steps, Actor: "-", What: fmt.Sprintf("spawn #%d %s", id, name)})
	s.mu.Unlock()
	ctx := context.WithValue(s.base, actorKey{}, a)
	// Backoffs do not wait: time is the scheduler's, and other actors move while one backs off
	// only if the scheduler says so.
	ctx = retry.WithSleep(ctx, func(ctx context.Context, _ time.Duration) error { return ctx.Err() })
	go func() {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("actor %s panicked: %v", a.Name, p)
				}
			}()
			return a.run(ctx)
		}()
		s.events <- actorEvent{a: a, err: err}
	}()
	return a
}

// Note adds an environment event to the trace.
func (s *Scheduler) Note(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trace = append(s.trace, Step{N: s.steps, Actor: "-", What: fmt.Sprintf(format, args...)})
}

// Rand is the scheduler's stream, for the environment's moves (beforeStep, idle). Only the
// scheduler's goroutine may use it.
func (s *Scheduler) Rand() *rand.Rand { return s.rng }

// Steps is how many calls have been released so far.
func (s *Scheduler) Steps() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steps
}

// park is what an actor's call does: wait for the scheduler to release it, and learn the fault
// it meets.
func (s *Scheduler) park(a *Actor, c Call) Fault {
	s.mu.Lock()
	dead := a.dead
	s.mu.Unlock()
	if dead {
		return Dead
	}
	a.call = c
	s.events <- actorEvent{a: a, parked: true}
	return <-a.resume
}

// errStepLimit ends a schedule that did not finish within its bound of steps.
var errStepLimit = errors.New("the schedule did not finish within its step limit")

// Run runs the schedule until no actor is left and idle spawns none. It returns an error for a
// schedule that did not end (a liveness failure) or a harness defect.
func (s *Scheduler) Run() error {
	for {
		if err := s.settle(); err != nil {
			return err
		}
		if len(s.parked) == 0 {
			if s.idle != nil && s.idle() {
				continue
			}
			return nil
		}
		if s.steps >= s.limit {
			s.abandon()
			return fmt.Errorf("%w (%d steps)", errStepLimit, s.limit)
		}
		if s.beforeStep != nil {
			s.beforeStep()
		}
		sort.Slice(s.parked, func(i, j int) bool { return s.parked[i].ID < s.parked[j].ID })
		i := s.rng.IntN(len(s.parked))
		a := s.parked[i]
		s.parked = append(s.parked[:i], s.parked[i+1:]...)
		fault := None
		if s.decide != nil {
			fault = s.decide(a, a.call)
		}
		s.mu.Lock()
		s.steps++
		what := a.call.String()
		if fault != None {
			what += "  !" + fault.String()
		}
		s.trace = append(s.trace, Step{N: s.steps, Actor: fmt.Sprintf("#%d %s", a.ID, a.Name), What: what})
		if fault.Kills() {
			a.dead = true
		}
		s.running++
		s.mu.Unlock()
		s.clock.Advance(stepTick)
		a.resume <- fault
	}
}

// settle waits until every running actor is parked or done, then hands the done ones to their
// callbacks in id order (callbacks may spawn actors, which settle waits for in turn).
func (s *Scheduler) settle() error {
	for {
		for s.running > 0 {
			select {
			case ev := <-s.events:
				s.mu.Lock()
				s.running--
				s.mu.Unlock()
				if ev.parked {
					s.parked = append(s.parked, ev.a)
				} else {
					s.done = append(s.done, ev)
				}
			case <-time.After(stuckAfter):
				return fmt.Errorf("an actor ran for %s without calling anything or ending: %s", stuckAfter, s.runningNames())
			}
		}
		if len(s.done) == 0 {
			return nil
		}
		done := s.done
		s.done = nil
		sort.Slice(done, func(i, j int) bool { return done[i].a.ID < done[j].a.ID })
		for _, ev := range done {
			ev.a.err = ev.err
			// The trace says only how an actor ended: error texts carry resource names that
			// differ between runs.
			status := "ok"
			if ev.err != nil {
				status = "error"
			}
			if ev.a.Dead() {
				status = "killed"
			}
			s.Note("end #%d %s: %s", ev.a.ID, ev.a.Name, status)
			if ev.a.done != nil {
				ev.a.done(ev.err)
			}
		}
	}
}

// abandon kills every parked actor and lets them unwind, so that no goroutine outlives the
// schedule.
func (s *Scheduler) abandon() {
	for len(s.parked) > 0 || s.running > 0 {
		for _, a := range s.parked {
			s.mu.Lock()
			a.dead = true
			s.running++
			s.mu.Unlock()
			a.resume <- Dead
		}
		s.parked = nil
		for s.running > 0 {
			ev := <-s.events
			s.mu.Lock()
			s.running--
			s.mu.Unlock()
			if ev.parked {
				s.parked = append(s.parked, ev.a)
			}
		}
	}
}

func (s *Scheduler) runningNames() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for _, a := range s.actors {
		if a.err == nil {
			names = append(names, a.Name)
		}
	}
	return strings.Join(names, ", ")
}

// Trace is the schedule's trace, one step a line.
func (s *Scheduler) Trace() []Step {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Step(nil), s.trace...)
}

// invocation is one run of a function on behalf of an actor: a Lambda invocation. Lambda stops a
// function at its timeout, so once the schedule's clock passes the deadline, every call the
// invocation makes fails, as if the process had been stopped there.
type invocation struct {
	function string
	deadline time.Time
	stopped  bool
	// paused: the process froze and came back after its deadline (a long pause, a host
	// that lost its clock); nothing stopped it, and it goes on as if no time had passed.
	paused bool
}

type invocationKey struct{}

func invocationFrom(ctx context.Context) *invocation {
	inv, _ := ctx.Value(invocationKey{}).(*invocation)
	return inv
}

// Invoke starts an invocation of function under ctx, with the function's timeout from its entry.
func (s *Schedule) Invoke(ctx context.Context, function string) context.Context {
	timeout := time.Minute
	if fn, ok := s.Env.functions[function]; ok && fn.Entry.Timeout > 0 {
		timeout = fn.Entry.Timeout
	}
	return context.WithValue(ctx, invocationKey{}, &invocation{function: function, deadline: s.Env.Clock.Now().Add(timeout)})
}

// Pause makes the invocation under ctx one that outlives its deadline: a process paused past its
// lease, which the fencing in the conditions (tokens, revisions) must keep from doing harm.
func (s *Schedule) Pause(ctx context.Context) {
	if inv := invocationFrom(ctx); inv != nil {
		inv.paused = true
		s.Count("process-pause")
	}
}

// timedOut reports whether the call's invocation has been stopped at its timeout.
func (s *Schedule) timedOut(a *Actor, ctx context.Context) bool {
	inv := invocationFrom(ctx)
	if inv == nil || inv.paused {
		return false
	}
	if !inv.stopped && s.Env.Clock.Now().After(inv.deadline) {
		inv.stopped = true
		s.Count("function-timeout")
		s.Note("#%d %s: %s stopped at its timeout", a.ID, a.Name, inv.function)
	}
	return inv.stopped
}
