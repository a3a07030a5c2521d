package harness

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/devstack"
	"github.com/ferrymeter/ferry/internal/dynamo"
)

// DefaultBatch is how many schedules share one set of fresh resources: the emulator's cost grows
// with a table's size, so tables are replaced before they grow.
const DefaultBatch = 8

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
	// Batch is how many schedules share one set of resources (default DefaultBatch).
	Batch int
	// Endpoints are the emulators to run on; empty starts them (or uses FERRY_*_ENDPOINT).
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
	if endpoints.DynamoDB == "" {
		emu, err := devstack.StartEmulators(devstack.EmulatorOptions{External: cloud.EndpointsFromEnv()})
		if err != nil {
			return Report{}, err
		}
		defer emu.Stop()
		endpoints = emu.Endpoints
	}
	batch := opts.Batch
	if batch <= 0 {
		batch = DefaultBatch
	}
	rep := Report{Faults: map[string]int{}, ByPipeline: map[string]int{}}
	start := time.Now()
	var env *Env
	used := 0
	defer func() {
		if env != nil {
			env.Close()
		}
	}()
	for i := range opts.Schedules {
		if ctx.Err() != nil {
			break
		}
		if env == nil || used >= batch {
			if env != nil {
				env.Close()
			}
			if env, err = NewEnv(ctx, endpoints, opts.Log); err != nil {
				return rep, err
			}
			used = 0
		}
		seed := opts.First + uint64(i)
		p := pipelines[seed%uint64(len(pipelines))]
		res := runSchedule(ctx, env, seed, p, opts.Ablate)
		if ctx.Err() != nil {
			break // the run was stopped mid-schedule: that schedule did not run to its end
		}
		used++
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
			// A failed schedule may leave work behind that a later one on the same tables
			// would meet: the next schedule starts on fresh ones.
			used = batch
			if opts.StopAtFailure {
				break
			}
		}
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
