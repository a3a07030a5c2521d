// Command ferry runs Ferry locally and operates it: `ferry dev` starts the whole stack on
// 127.0.0.1 with embedded emulators, `ferry bench` measures it, `ferry lab` reproduces the
// reference scenarios, `ferry inspect` and `ferry redrive` operate a stack, and `ferry usage`
// reads a meter's usage back. It is a thin CLI:
// each command parses its flags and calls the package that does the work (devstack, bench, lab,
// operate).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"dev":        {"run the whole stack on 127.0.0.1 (embedded emulators, no AWS account)", runDev},
	"bench":      {"measure Ferry: `ferry bench pipeline` (cost per event), `ferry bench holds` (admissions) or `ferry bench inbox` (webhooks)", runBench},
	"emulators":  {"serve the local emulators alone and print their endpoints (used by the benchmarks)", runEmulators},
	"harness":    {"run the deterministic fault harness: seeded schedules of faults, invariants after each", runHarness},
	"inspect":    {"show an event's ledger entry, archive object and analytics row (--account, --event), or count an account's (--account)", runInspect},
	"listen":     {"receive webhook notifications on 127.0.0.1, verify each (Standard Webhooks) and print it: `ferry listen -secret whsec_… [-count N] [-json]`", runListen},
	"lab":        {"reproduce a reference scenario against a running Ferry (ferry lab holds-five, holds-load, reconcile, webhooks-nine)", runLab},
	"redrive":    {"queue an UNINSERTABLE event again from the archive once its cause is fixed", runRedrive},
	"report":     {"run the reporter (and the Stripe outbox's drainer) now (--url)", runReport},
	"reconcile":  {"prove the providers' meters match the ledger, repair and store evidence (--url, --account, --cycle)", runReconcile},
	"evidence":   {"show the stored evidence of an account's cycle (--url, --account, --cycle)", runEvidence},
	"faultproxy": {"a fault-injecting proxy in front of a stack, for testing clients: `ferry faultproxy --seed 7 -- <command>`", runFaultProxy},
	"usage":      {"print a meter's usage by window, grouped and filtered on its dimensions (--url, --account, --meter, --window, --from, --to, --tz, --group-by, --filter)", runUsage},
	"webhooks":   {"sign and post a billing webhook: `ferry webhooks send kinde|stripe --customer <id> …`", runWebhooks},

	"webhook-endpoints": {"register and rotate the endpoints notifications go to, read their delivery logs, replay (create|list|rotate|deliveries|replay)", runWebhookEndpoints},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ferry:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		printUsage(stderr)
		return fmt.Errorf("unknown command %q", args[0])
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

func printUsage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: ferry <command> [flags]")
	fmt.Fprintln(w)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun `ferry <command> -h` for a command's flags.")
}
