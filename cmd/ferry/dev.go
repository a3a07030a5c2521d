package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/devstack"
	"github.com/ferrymeter/ferry/internal/resources"
)

// EnvAddr names the environment variable for ferry dev's listen address.
const EnvAddr = "FERRY_ADDR"

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", envOr(EnvAddr, devstack.DefaultAddr), "listen address (env "+EnvAddr+")")
	prefix := fs.String("prefix", devstack.DefaultPrefix, "name prefix of the stack's tables, bucket and queues")
	if err := fs.Parse(args); err != nil {
		return err
	}
	adminKey := envOr(resources.EnvAdminKey, devstack.DefaultAdminKey)
	log := app.NewLogger(stderr)
	catalog, err := devCatalog()
	if err != nil {
		return err
	}
	meters, standIns, err := devMeters(ctx, catalog)
	if err != nil {
		return err
	}
	stack, err := devstack.Start(ctx, devstack.StackOptions{
		Addr: *addr, AdminKey: adminKey, Prefix: *prefix, External: cloud.EndpointsFromEnv(), Log: log,
		Catalog: &catalog, Meters: meters,
		Extend: func(a *app.App, s *devstack.Stack) error {
			standIns.mount(s)
			return extendDevStack(a, s)
		},
	})
	if err != nil {
		return err
	}
	defer stack.Close()
	e := stack.Emulators.Endpoints
	if err := writeDevEnv(devEnvFile, e, stack.Names); err != nil {
		return err
	}
	defer os.Remove(devEnvFile)
	fmt.Fprint(stdout, joinLines(
		"Ferry is running on "+stack.URL,
		"  operator key: "+adminKey+"   (Authorization: Bearer "+adminKey+")",
		"  health:       "+stack.URL+"/healthz",
		"  DynamoDB "+e.DynamoDB+"   S3 "+e.S3+"   SQS "+e.SQS,
		"  operator commands: go run ./cmd/ferry inspect --env-file "+devEnvFile+" --account <id> --event <id>",
		"  reporting: "+reportingBanner(standIns, stack.URL),
		"Press Ctrl-C to stop.",
	))
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping…")
	return nil
}

// extendDevStack is where capabilities add their routes, middleware and schedules to ferry dev.
func extendDevStack(a *app.App, s *devstack.Stack) error {
	return extendHolds(a, s)
}

// reportingBanner says where ferry dev reports usage.
func reportingBanner(m *meterStandIns, url string) string {
	if m == nil {
		return "to the providers the environment configures"
	}
	return fmt.Sprintf("to stand-ins (%s; also at %s%s/ and %s%s/)", strings.Join(m.urls, ", "), url, devKindeStandInPath, url, devStripeStandInPath)
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
