package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/operator/operate"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// EnvAddr names the environment variable for ferry dev's listen address (and the labs' and the
// walkthrough's default target).
const EnvAddr = "FERRY_ADDR"

// runDev runs the local stack until a signal ends it: SIGINT (Ctrl-C) and SIGTERM (main
// handles those), or SIGHUP (a closed terminal). Each stops it cleanly — the emulators with it —
// and exits 0. A signal it cannot handle (SIGKILL) still takes the SQS emulator with it: see
// devstack.StartEmulators.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stopSignals()
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", envOr(EnvAddr, devstack.DefaultAddr), "listen address (env "+EnvAddr+")")
	prefix := fs.String("prefix", devstack.DefaultPrefix, "name prefix of the stack's tables, bucket and queues")
	if err := fs.Parse(args); err != nil {
		return err
	}
	operatorKey := envOr(resources.EnvAdminKey, devstack.DefaultAdminKey)
	log := compose.NewLogger(stderr)
	// The catalog FERRY_PLANS names, as the functions read it.
	catalog, err := devstack.CatalogFromEnv()
	if err != nil {
		return err
	}
	// The functions read the settings the environment gives, as in AWS, with stand-ins for the
	// providers it names none of.
	env := compose.SettingsFromEnv()
	settings, standIns, err := devstack.ProviderStandIns(env, catalog, log)
	if err != nil {
		return err
	}
	// The webhook tooling: a local Kinde signer and a dev Stripe secret unless the environment
	// names real ones, and the apply-crash injector the webhooks lab kills one apply with.
	webhooks, err := devstack.NewInboxDev(env, log)
	if err != nil {
		return err
	}
	defer webhooks.Close()
	opts := devstack.StackOptions{
		Addr: *addr, OperatorKey: operatorKey, Prefix: *prefix, External: cloud.EndpointsFromEnv(), Log: log,
		Catalog: &catalog, Settings: settings,
	}
	webhooks.Apply(&opts)
	stack, err := devstack.Start(ctx, opts)
	if err != nil {
		return err
	}
	standIns.Mount(stack)
	defer stack.Close()
	webhooks.Serve(stack)
	e := stack.Emulators.Endpoints
	if err := operate.WriteDevEnv(operate.DevEnvFile, e, stack.Names); err != nil {
		return err
	}
	defer os.Remove(operate.DevEnvFile)
	lines := []string{
		"Ferry is running on " + stack.URL,
		"  operator key: " + operatorKey + "   (Authorization: Bearer " + operatorKey + ")",
		"  health:       " + stack.URL + "/healthz",
	}
	lines = append(lines, webhooks.Banner(stack.URL)...)
	fmt.Fprint(stdout, joinLines(append(lines,
		"  DynamoDB "+e.DynamoDB+"   S3 "+e.S3+"   SQS "+e.SQS,
		"  operator commands: go run ./cmd/ferry inspect --env-file "+operate.DevEnvFile+" --account <id> --event <id>",
		"  reporting: "+reportingBanner(standIns, stack.URL),
		"Press Ctrl-C to stop.",
	)...))
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping…")
	return nil
}

// reportingBanner says where ferry dev reports usage.
func reportingBanner(m *devstack.MeterStandIns, url string) string {
	if m == nil {
		return "to the providers the environment configures"
	}
	return fmt.Sprintf("to stand-ins (%s; also at %s%s/ and %s%s/)", strings.Join(m.URLs, ", "),
		url, devstack.KindeStandInPath, url, devstack.StripeStandInPath)
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
