package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// Options select what a run does.
type Options struct {
	// First is the first seed; the run covers First … First+Schedules-1.
	First     uint64
	Schedules int
	// Pipelines selects pipelines by name (default: all). A seed picks one of them:
	// the seed modulo their number, so a seed names the same schedule in any run with the same
	// selection.
	Pipelines []string
	// Ablate removes these guards at the wire in every schedule.
	Ablate []dynamo.Guard
	// StopAtFailure ends the run at the first failing schedule.
	StopAtFailure bool
	// Workers is how many schedules run at once, each worker on its own in-process emulators
	// (default 1). A seed's schedule is the same whatever the number; with more than one, the
	// order in which schedules end (and Progress sees them) is not.
	Workers int
	// Endpoints are the emulators to run on; none given takes those FERRY_*_ENDPOINT name.
	// DynamoDB and S3 left empty run in process (and are reset between schedules; on external
	// ones each schedule gets new resources); SQS left empty is started.
	Endpoints cloud.Endpoints
	Log       *slog.Logger
	// Progress, if set, is called after each schedule.
	Progress func(r Result)
}

// Report is what a run did.
type Report struct {
	Schedules  int
	Steps      int
	Failures   []Result
	Faults     map[string]int
	ByPipeline map[string]int
	Duration   time.Duration
}

// Selected returns the pipelines names select (all when names is empty).
func Selected(names []string) ([]Pipeline, error) {
	all := Pipelines()
	if len(names) == 0 {
		return all, nil
	}
	var out []Pipeline
	for _, n := range names {
		found := false
		for _, p := range all {
			if p.Name() == n {
				out = append(out, p)
				found = true
			}
		}
		if !found {
			var have []string
			for _, p := range all {
				have = append(have, p.Name())
			}
			return nil, fmt.Errorf("no pipeline %q (have %s)", n, strings.Join(have, ", "))
		}
	}
	return out, nil
}

// Run runs the schedules opts selects and reports them.
func Run(ctx context.Context, opts Options) (Report, error) {
	pipelines, err := Selected(opts.Pipelines)
	if err != nil {
		return Report{}, err
	}
	endpoints := opts.Endpoints
	if endpoints == (cloud.Endpoints{}) {
		endpoints = cloud.EndpointsFromEnv() // what FERRY_*_ENDPOINT name; the rest in process
	}
	if endpoints.SQS == "" {
		emu, err := devstack.StartEmulators(devstack.EmulatorOptions{External: cloud.Endpoints{
			DynamoDB: "-", S3: "-", // not started: only SQS is wanted
		}})
		if err != nil {
			return Report{}, err
		}
		defer emu.Stop()
		endpoints.SQS = emu.Endpoints.SQS
	}
	workers := max(1, opts.Workers)
	rep := Report{Faults: map[string]int{}, ByPipeline: map[string]int{}}
	start := time.Now()
	// Seeds are handed out in order; with one worker the run is one sequence of schedules, and
	// StopAtFailure stops at the first failing seed.
	seeds := make(chan uint64)
	var (
		mu      sync.Mutex
		stopped bool
		errs    []error
		wg      sync.WaitGroup
	)
	emit := func(res Result) {
		mu.Lock()
		defer mu.Unlock()
		rep.Schedules++
		rep.Steps += res.Steps
		rep.ByPipeline[res.Pipeline]++
		for k, n := range res.Faults {
			rep.Faults[k] += n
		}
		if opts.Progress != nil {
			opts.Progress(res)
		}
		if res.Failed() {
			rep.Failures = append(rep.Failures, res)
			if opts.StopAtFailure {
				stopped = true
			}
		}
	}
	halted := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return stopped
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runWorker(ctx, endpoints, opts, pipelines, seeds, emit, halted); err != nil {
				mu.Lock()
				errs = append(errs, err)
				stopped = true
				mu.Unlock()
			}
		}()
	}
	for i := range opts.Schedules {
		if halted() || ctx.Err() != nil {
			break
		}
		seeds <- opts.First + uint64(i)
	}
	close(seeds)
	wg.Wait()
	sort.Slice(rep.Failures, func(i, j int) bool { return rep.Failures[i].Seed < rep.Failures[j].Seed })
	if len(errs) > 0 {
		return rep, errors.Join(errs...)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// RunSeed runs one schedule by itself, on fresh resources: what `ferry harness --seed` does.
func RunSeed(ctx context.Context, opts Options, seed uint64) (Result, error) {
	opts.First, opts.Schedules, opts.StopAtFailure = seed, 1, false
	var res Result
	progress := opts.Progress
	opts.Progress = func(r Result) {
		res = r
		if progress != nil {
			progress(r)
		}
	}
	_, err := Run(ctx, opts)
	return res, err
}

// FaultKinds returns the fault kinds of a count, sorted.
func FaultKinds(faults map[string]int) []string {
	kinds := make([]string, 0, len(faults))
	for k := range faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

// Reproduce is the command that replays a schedule.
func Reproduce(r Result, ablate []dynamo.Guard) string {
	cmd := fmt.Sprintf("ferry harness --seed %d --pipeline %s", r.Seed, r.Pipeline)
	for _, g := range ablate {
		cmd += " --ablate " + g.Name
	}
	return cmd
}

// runWorker runs the schedules of the seeds it receives, one after another, on one Env over its
// own in-process emulators (DynamoDB and S3 left empty in endpoints). After each schedule, reset
// gives the emulators fresh state: minidyn copies a whole table for every transaction and scans
// it for every query, so a schedule must not meet the items of the ones before it, and each
// seed's schedule is then the same in any run as alone.
func runWorker(ctx context.Context, endpoints cloud.Endpoints, opts Options, pipelines []Pipeline, seeds <-chan uint64, emit func(Result), halted func() bool) error {
	endpoints, transport, ip := newInProcess(endpoints)
	var env *Env
	defer func() {
		if env != nil {
			env.Close()
		}
		for range seeds {
			// drain: the run is over for this worker
		}
	}()
	for seed := range seeds {
		if ctx.Err() != nil || halted() {
			return nil
		}
		if env == nil {
			var err error
			if env, err = newEnv(ctx, endpoints, transport, ip, opts.Log); err != nil {
				return err
			}
		}
		p := pipelines[seed%uint64(len(pipelines))]
		res := runSchedule(ctx, env, seed, p, opts.Ablate)
		if ctx.Err() != nil {
			return nil // the run was stopped mid-schedule: that schedule did not run to its end
		}
		reused := false
		if !res.Failed() {
			var err error
			reused, err = env.reset(ctx)
			if ctx.Err() != nil {
				return nil // stopped while resetting: the schedule ran to its end, and is not reported
			}
			if err != nil {
				res.Violations = append(res.Violations, "isolation: "+err.Error())
			}
		}
		if !reused {
			// A failed schedule may leave work behind (a message on a queue, an abandoned
			// actor's write): the next schedule starts on fresh resources.
			env.Close()
			env = nil
			ip.fresh()
		}
		emit(res)
	}
	return nil
}
