package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
)

// bench is one benchmark program. Benchmarks are programs, never timed tests: they report
// ratios measured side by side in one run and the figures that do not depend on the machine.
type bench struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// benches are the benchmarks by name.
var benches = map[string]bench{
	"pipeline": {"the event pipeline: request units, round trips, CPU per event, cost", func(context.Context, []string, io.Writer, io.Writer) error {
		return errors.New("bench pipeline: not in this build")
	}},
	"holds": {"usage holds vs a plain check: admissions/s, latency, request units, the hot-row ceiling", runBenchHolds},
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		names := make([]string, 0, len(benches))
		for n := range benches {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintln(stdout, "usage: ferry bench <name> [flags]")
		fmt.Fprintln(stdout)
		for _, n := range names {
			fmt.Fprintf(stdout, "  %-9s %s\n", n, benches[n].summary)
		}
		return nil
	}
	b, ok := benches[args[0]]
	if !ok {
		return fmt.Errorf("unknown benchmark %q (try ferry bench --help)", args[0])
	}
	return b.run(ctx, args[1:], stdout, stderr)
}
