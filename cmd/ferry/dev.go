package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/devstack"
	"github.com/ferrymeter/ferry/internal/inbox/inboxfault"
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
	// The apply-crash injector is local instrumentation: the lab kills one apply with it.
	crash := inboxfault.New()
	var webhooks devWebhooks
	stack, err := devstack.Start(ctx, devstack.StackOptions{
		Addr: *addr, AdminKey: adminKey, Prefix: *prefix, External: cloud.EndpointsFromEnv(), Log: log,
		Clients: cloud.Options{DynamoDB: []func(*dynamodb.Options){crash.Option}},
		Extend: func(a *app.App, s *devstack.Stack) error {
			if err := extendHolds(a, s); err != nil {
				return err
			}
			var err error
			webhooks, err = extendInbox(a, s, crash)
			return err
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
	lines := []string{
		"Ferry is running on " + stack.URL,
		"  operator key: " + adminKey + "   (Authorization: Bearer " + adminKey + ")",
		"  health:       " + stack.URL + "/healthz",
	}
	lines = append(lines, inboxBanner(webhooks, stack.URL)...)
	lines = append(lines,
		"  DynamoDB "+e.DynamoDB+"   S3 "+e.S3+"   SQS "+e.SQS,
		"  operator commands: go run ./cmd/ferry inspect --env-file "+devEnvFile+" --account <id> --event <id>",
		"Press Ctrl-C to stop.",
	)
	fmt.Fprint(stdout, joinLines(lines...))
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping…")
	return nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
