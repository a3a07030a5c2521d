package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/archive"
	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/resources"
	"github.com/ferrymeter/ferry/internal/worker"
)

// devEnvFile is where ferry dev writes the environment operator commands need to reach it.
const devEnvFile = "_dev.env"

// operatorFlags are the flags every operator command shares.
func operatorFlags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	envFile := fs.String("env-file", "", "read resource names and endpoints from this file (ferry dev writes "+devEnvFile+"); default: the environment, as in a deployed function")
	return fs, envFile
}

// operatorApp composes the app the way a function does, after loading an env file if given.
func operatorApp(ctx context.Context, envFile string) (*app.App, error) {
	if envFile != "" {
		if err := loadEnvFile(envFile); err != nil {
			return nil, err
		}
	}
	return app.FromEnv(ctx, false)
}

// loadEnvFile sets KEY=VALUE lines (an optional "export " prefix, # comments) that are not
// already set in the environment.
func loadEnvFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export "))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return fmt.Errorf("%s: not KEY=VALUE: %q", path, line)
		}
		if _, set := os.LookupEnv(k); !set {
			os.Setenv(k, strings.Trim(v, `"'`))
		}
	}
	return sc.Err()
}

// writeDevEnv writes the environment operator commands need to reach a local stack.
func writeDevEnv(path string, endpoints cloud.Endpoints, names resources.Names) error {
	env := names.Env()
	env[cloud.EnvDynamoDBEndpoint] = endpoints.DynamoDB
	env[cloud.EnvS3Endpoint] = endpoints.S3
	env[cloud.EnvSQSEndpoint] = endpoints.SQS
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by ferry dev: how operator commands reach this local stack.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%s\n", k, env[k])
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

func accountAndEvent(fs *flag.FlagSet, args []string) (string, string, error) {
	account := fs.String("account", "", "the account id")
	eventID := fs.String("event", "", "the event id")
	if err := fs.Parse(args); err != nil {
		return "", "", err
	}
	if *account == "" || *eventID == "" {
		return "", "", errors.New("--account and --event are required")
	}
	return *account, *eventID, nil
}

// runInspect prints what Ferry holds about one event: its ledger entry, whether its payload is
// archived and whether its analytics row exists.
func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, envFile := operatorFlags("inspect", stderr)
	account, eventID, err := accountAndEvent(fs, args)
	if err != nil {
		return err
	}
	a, err := operatorApp(ctx, *envFile)
	if err != nil {
		return err
	}
	e, err := a.Ledger.Get(ctx, account, eventID)
	if err != nil {
		return err
	}
	key := archive.Key(account, eventID, e.RowInsertedAtMs)
	_, archErr := a.Archive.Get(ctx, key)
	row, err := a.Analytics.Exists(ctx, account, eventID, e.RowInsertedAtMs)
	if err != nil {
		return err
	}
	out := map[string]any{"ledger": e, "archiveKey": key, "archived": archErr == nil, "analyticsRow": row}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// runRedrive re-drives an UNINSERTABLE event from the archive once its cause is fixed.
func runRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, envFile := operatorFlags("redrive", stderr)
	account, eventID, err := accountAndEvent(fs, args)
	if err != nil {
		return err
	}
	a, err := operatorApp(ctx, *envFile)
	if err != nil {
		return err
	}
	r := &worker.Redrive{Ledger: a.Ledger, Archive: a.Archive, Queue: a.Ingest.Queue, NowMs: func() int64 { return a.Now().UnixMilli() }}
	before, err := r.Run(ctx, account, eventID)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s was %s; queued again from the archive. The worker stores and marks it without billing it again.\n", eventID, before)
	return nil
}
