package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ferrymeter/ferry/internal/devkit/bench"
	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/operator/lab"
	"github.com/ferrymeter/ferry/internal/operator/operate"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: ferry bench <holds|pipeline|inbox|query|alerts> [flags]")
	}
	fs := flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	switch args[0] {
	case "pipeline":
		o := bench.DefaultPipeline
		fs.IntVar(&o.Events, "events", o.Events, fmt.Sprintf("distinct events (at most %d)", bench.MaxEvents))
		fs.Float64Var(&o.Duplicates, "duplicates", o.Duplicates, "share of events delivered a second time (0–1)")
		fs.StringVar(&o.Plan, "plan", o.Plan, "the account's plan: free (capped transaction), plus (sharded counter) or internal")
		fs.IntVar(&o.Pollers, "pollers", o.Pollers, "concurrent queue pollers (Lambda's concurrent batches)")
		fs.Uint64Var(&o.Seed, "seed", o.Seed, "random seed for which events are duplicated")
		columns := fs.String("columns", "", "comma-separated columns to run (all when empty; naive always runs)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *columns != "" {
			o.Columns = strings.Split(*columns, ",")
		}
		return bench.Pipeline(ctx, o, stdout, stderr)
	case "holds":
		o := bench.DefaultHolds
		fs.IntVar(&o.Ops, "ops", o.Ops, "admissions on each side")
		fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "admissions in flight at once")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return bench.Holds(ctx, o, stdout, stderr)
	case "inbox":
		o := bench.DefaultInbox
		fs.IntVar(&o.Accounts, "accounts", o.Accounts, "accounts, each sent one payment and one plan change")
		fs.IntVar(&o.Copies, "copies", o.Copies, "extra deliveries of each payment (the provider's retries)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return bench.Inbox(ctx, o, stdout, stderr)
	case "query":
		o := bench.DefaultQuery
		fs.IntVar(&o.Events, "events", o.Events, "events in the account's month")
		fs.IntVar(&o.Repeats, "repeats", o.Repeats, "runs of each query (the latency is their median)")
		fs.Uint64Var(&o.Seed, "seed", o.Seed, "random seed for each event's minute, group and value")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return bench.Query(ctx, o, stdout, stderr)
	case "alerts":
		o := bench.DefaultAlerts
		fs.IntVar(&o.Events, "events", o.Events, "events each worker column sends")
		fs.IntVar(&o.Notifications, "notifications", o.Notifications, "notifications each batched notifier column delivers")
		fs.IntVar(&o.Alone, "alone", o.Alone, "notifications delivered one at a time")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return bench.Alerts(ctx, o, stdout, stderr)
	}
	return fmt.Errorf("unknown benchmark %q (have holds, pipeline, inbox, query, alerts)", args[0])
}

func runEmulators(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(bench.EmulatorsCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return bench.ServeEmulators(ctx, stdout)
}

func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stdout, "usage: ferry lab <name> [--url URL] [flags]")
		fmt.Fprintln(stdout)
		for _, l := range lab.Labs {
			fmt.Fprintf(stdout, "  %-13s %s\n", l.Name, l.Summary)
		}
		fmt.Fprintln(stdout, "\nThe operator key comes from FERRY_ADMIN_KEY (default dev-admin-key).")
		return nil
	}
	fs := flag.NewFlagSet("lab "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://"+envOr(EnvAddr, devstack.DefaultAddr), "Ferry's base URL: a running ferry dev or a deployed stack")
	cfg := func() lab.Config {
		return lab.Config{BaseURL: *url, OperatorKey: envOr(resources.EnvAdminKey, devstack.DefaultAdminKey), Progress: stderr}
	}
	var res lab.Result
	var err error
	switch args[0] {
	case "holds-five":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		res, err = lab.HoldsFive(ctx, cfg())
	case "holds-load":
		p := lab.DefaultLoad
		fs.IntVar(&p.Jobs, "jobs", p.Jobs, "jobs to run")
		fs.Int64Var(&p.Estimate, "estimate", p.Estimate, "tokens each job holds and uses")
		fs.Int64Var(&p.Limit, "limit", p.Limit, "the account's tokens limit")
		fs.IntVar(&p.Concurrency, "concurrency", p.Concurrency, "jobs in flight at once")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		res, err = lab.HoldsLoad(ctx, cfg(), p)
	case "reconcile":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		res, err = lab.Reconcile(ctx, cfg())
	case "webhooks-nine":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		res, err = lab.WebhooksNine(ctx, cfg())
	default:
		return fmt.Errorf("unknown lab %q (try ferry lab --help)", args[0])
	}
	if err != nil {
		return err
	}
	res.Print(stdout)
	return res.Err()
}

// operatorFlags are the flags every operator command shares.
func operatorFlags(name string, args []string, stderr io.Writer) (envFile, account, eventID string, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&envFile, "env-file", "", "read resource names and endpoints from this file (ferry dev writes "+operate.DevEnvFile+"); default: the environment, as in a deployed function")
	fs.StringVar(&account, "account", "", "the account id")
	fs.StringVar(&eventID, "event", "", "the event id")
	if err := fs.Parse(args); err != nil {
		return "", "", "", err
	}
	if account == "" || eventID == "" && name != "inspect" {
		return "", "", "", errors.New("--account and --event are required")
	}
	return envFile, account, eventID, nil
}

// runInspect prints what Ferry holds about one event: its ledger entry, whether its payload is
// archived and whether its analytics row exists. Without --event it summarizes the account: its
// ledger by status, its archived payloads, and the events where the two disagree.
func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	envFile, account, eventID, err := operatorFlags("inspect", args, stderr)
	if err != nil {
		return err
	}
	s, err := operate.FromEnv(ctx, envFile)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if eventID == "" {
		sum, err := s.Summarize(ctx, account)
		if err != nil {
			return err
		}
		return enc.Encode(sum)
	}
	out, err := s.Inspect(ctx, account, eventID)
	if err != nil {
		return err
	}
	return enc.Encode(out)
}

// runRedrive re-drives an UNINSERTABLE event from the archive once its cause is fixed.
func runRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	envFile, account, eventID, err := operatorFlags("redrive", args, stderr)
	if err != nil {
		return err
	}
	s, err := operate.FromEnv(ctx, envFile)
	if err != nil {
		return err
	}
	before, err := s.Redrive(ctx, account, eventID)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s was %s; queued again from the archive. The worker stores and marks it without billing it again.\n", eventID, before)
	return nil
}

// joinLines is a small helper for banners.
func joinLines(lines ...string) string { return strings.Join(lines, "\n") + "\n" }
