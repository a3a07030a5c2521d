package harness_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/devkit/harness"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// A failing seed printed by the harness reproduces exactly: found in a run of many schedules
// (under the double-charge defence removed), then run alone, twice, each time on fresh
// resources, it makes the same schedule — the same calls in the same order, the same faults —
// and breaks the same invariants.
func TestHarness_AFailingSeedReproducesExactly(t *testing.T) {
	if testenv.External() {
		t.Skip("the harness runs on the embedded emulators")
	}
	// The claim's first-writer condition: without it a unit bills again an event another unit
	// claimed.
	g, ok := instrument.GuardNamed("ledger.claim.first-writer")
	if !ok {
		t.Fatal("no guard ledger.claim.first-writer")
	}
	opts := harness.Options{Pipelines: []string{"events"}, Ablate: []dynamo.Guard{g}, Endpoints: emulators(t)}
	run := opts
	run.Schedules, run.StopAtFailure = 100, true
	rep, err := harness.Run(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) == 0 {
		t.Fatal("no schedule failed with the double-charge defence removed")
	}
	found := rep.Failures[0]
	t.Logf("seed %d failed: %v; reproduce: %s", found.Seed, found.Violations, harness.Reproduce(found, opts.Ablate))
	var replays []harness.Result
	for range 2 {
		res, err := harness.RunSeed(context.Background(), opts, found.Seed)
		if err != nil {
			t.Fatal(err)
		}
		replays = append(replays, res)
	}
	for i, r := range replays {
		if !r.Failed() {
			t.Fatalf("replay %d of seed %d kept every invariant", i+1, found.Seed)
		}
		if !reflect.DeepEqual(r.Violations, found.Violations) {
			t.Errorf("replay %d broke %v; the run broke %v", i+1, r.Violations, found.Violations)
		}
		if got, want := r.TraceText(), found.TraceText(); got != want {
			t.Errorf("replay %d's trace differs from the run's:\n%s", i+1, firstDifference(got, want))
		}
		if !reflect.DeepEqual(r.Faults, found.Faults) {
			t.Errorf("replay %d injected %v; the run injected %v", i+1, r.Faults, found.Faults)
		}
	}
	if len(found.Trace) < 10 {
		t.Errorf("the trace has %d steps; a schedule that breaks the defence has more", len(found.Trace))
	}
}

func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return "line " + al[i] + "\nwas  " + bl[i]
		}
	}
	return "one trace is a prefix of the other"
}

// A schedule does not depend on the ones before it on the same resources: each seed of a run,
// replayed alone on fresh resources, makes the same calls in the same order, meets the same
// faults and ends the same way (reset leaves it what fresh resources hold).
func TestHarness_ASeedRunsTheSameInARunAndAlone(t *testing.T) {
	var inRun []harness.Result
	opts := harness.Options{Endpoints: emulators(t)}
	run := opts
	run.Schedules = 12 // the last three: events-batch, reporter and inbox
	run.Progress = func(r harness.Result) { inRun = append(inRun, r) }
	if _, err := harness.Run(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	for _, want := range inRun[len(inRun)-3:] {
		got, err := harness.RunSeed(context.Background(), opts, want.Seed)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := got.TraceText(), want.TraceText(); g != w {
			t.Errorf("seed %d (%s) alone differs from the run:\n%s", want.Seed, want.Pipeline, firstDifference(g, w))
		}
		if !reflect.DeepEqual(got.Faults, want.Faults) || !reflect.DeepEqual(got.Violations, want.Violations) {
			t.Errorf("seed %d alone: faults %v, violations %v; in the run %v, %v", want.Seed, got.Faults, got.Violations, want.Faults, want.Violations)
		}
	}
}
