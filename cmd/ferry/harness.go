package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/ferrymeter/ferry/internal/devkit/harness"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// listFlag is a flag that may be given more than once (or as a comma-separated list).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// harnessGCPercent is the garbage collector's target while the harness runs.
const harnessGCPercent = 400

// runHarness runs the deterministic fault harness: many seeded schedules with a progress bar,
// or one seed, replayed exactly, with its trace.
func runHarness(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("harness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	schedules := fs.Int("schedules", 1_000, "how many schedules to run")
	first := fs.Uint64("first", 0, "the first seed of the run")
	seed := fs.Int64("seed", -1, "run this one seed and print its trace (a failing seed the harness printed reproduces exactly)")
	stop := fs.Bool("stop", false, "stop at the first failing schedule")
	workers := fs.Int("workers", 1, "schedules run at once, each worker on its own in-process emulators (a seed's schedule is the same for any number)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof reads it)")
	trace := fs.Bool("trace", false, "print the trace of every failing schedule")
	listGuards := fs.Bool("guards", false, "list the guards --ablate can remove, and exit")
	var pipelines, ablate listFlag
	var have []string
	for _, p := range harness.Pipelines() {
		have = append(have, p.Name())
	}
	fs.Var(&pipelines, "pipeline", "run only this pipeline (repeat or comma-separate; have "+strings.Join(have, ", ")+")")
	fs.Var(&ablate, "ablate", "remove this guard at the wire in every schedule (see --guards)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listGuards {
		for _, g := range instrument.Guards() {
			fmt.Fprintf(stdout, "%-40s %s on %s: %s\n    %s\n", g.Name, g.Kind, g.Table, g.Clause, g.Keeps)
		}
		return nil
	}
	var guards []dynamo.Guard
	for _, name := range ablate {
		g, ok := instrument.GuardNamed(name)
		if !ok {
			return fmt.Errorf("no guard %q (ferry harness --guards lists them)", name)
		}
		guards = append(guards, g)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// A schedule allocates a great deal and keeps little (every request and answer is built and
	// parsed twice, by the SDK and by the emulator): collecting less often costs memory the run
	// has, and a fifth of its time less.
	debug.SetGCPercent(harnessGCPercent)
	opts := harness.Options{Pipelines: pipelines, Ablate: guards, StopAtFailure: *stop, Workers: *workers}
	if *seed >= 0 {
		res, err := harness.RunSeed(ctx, opts, uint64(*seed))
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, res.TraceText())
		printResult(stdout, res, guards)
		if res.Failed() {
			return errors.New("the schedule broke invariants")
		}
		return nil
	}
	bar := progressbar.NewOptions(*schedules,
		progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("schedules"),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("schedules"),
		progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	failed := 0
	opts.First, opts.Schedules = *first, *schedules
	opts.Progress = func(r harness.Result) {
		if r.Failed() {
			failed++
			bar.Describe(fmt.Sprintf("schedules (%d failing)", failed))
		}
		_ = bar.Add(1)
	}
	rep, err := harness.Run(ctx, opts)
	_ = bar.Finish()
	if err != nil {
		return err
	}
	printReport(stdout, rep, guards)
	for i, f := range rep.Failures {
		if i == 10 {
			fmt.Fprintf(stdout, "… and %d more failing schedules\n", len(rep.Failures)-i)
			break
		}
		if *trace {
			fmt.Fprint(stdout, f.TraceText())
		}
		printResult(stdout, f, guards)
	}
	if len(rep.Failures) > 0 {
		return fmt.Errorf("%d of %d schedules broke invariants", len(rep.Failures), rep.Schedules)
	}
	return nil
}

func printReport(w io.Writer, rep harness.Report, ablate []dynamo.Guard) {
	fmt.Fprintf(w, "schedules:   %d (%s) in %s, %.1f schedules/s, %d calls scheduled\n", rep.Schedules,
		pipelineCounts(rep.ByPipeline), rep.Duration.Round(time.Millisecond), float64(rep.Schedules)/rep.Duration.Seconds(), rep.Steps)
	total := 0
	for _, n := range rep.Faults {
		total += n
	}
	fmt.Fprintf(w, "faults:      %d injected\n", total)
	for _, k := range harness.FaultKinds(rep.Faults) {
		fmt.Fprintf(w, "  %-24s %d\n", k, rep.Faults[k])
	}
	if len(ablate) > 0 {
		var names []string
		for _, g := range ablate {
			names = append(names, g.Name)
		}
		fmt.Fprintf(w, "ablated:     %s\n", strings.Join(names, ", "))
	}
	fmt.Fprintf(w, "violations:  %d schedules\n", len(rep.Failures))
}

func pipelineCounts(by map[string]int) string {
	var parts []string
	for _, k := range harness.FaultKinds(by) {
		parts = append(parts, fmt.Sprintf("%s %d", k, by[k]))
	}
	return strings.Join(parts, ", ")
}

func printResult(w io.Writer, r harness.Result, ablate []dynamo.Guard) {
	verdict := "kept every invariant"
	if r.Failed() {
		verdict = fmt.Sprintf("broke %d invariants", len(r.Violations))
	}
	fmt.Fprintf(w, "seed %d (%s, fault rate %.2f, %d calls): %s\n", r.Seed, r.Pipeline, r.FaultRate, r.Steps, verdict)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  - %s\n", v)
	}
	if r.Failed() {
		fmt.Fprintf(w, "  reproduce: %s\n", harness.Reproduce(r, ablate))
	}
}
