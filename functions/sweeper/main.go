// Command sweeper is the sweeper Lambda function. Every minute (an EventBridge schedule) it
// settles, as EXPIRED and at the usage they recorded, the RUNNING holds whose lease ran out, so
// that a worker that died does not keep its capacity held. Its run fails when a lapsed hold
// could not be settled, which the function's Errors alarm reports; the next run retries it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/metrics"
)

func main() {
	ctx := context.Background()
	log := app.NewLogger(os.Stderr)
	cfg, err := app.ConfigFromEnv(ctx, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sweeper: configuration:", err)
		os.Exit(1)
	}
	clients, err := cloud.New(ctx, cloud.EndpointsFromEnv(), cloud.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sweeper: clients:", err)
		os.Exit(1)
	}
	a := app.New(cfg, clients, log, metrics.NewEMF(os.Stdout, time.Now), time.Now)
	// The schedule's payload carries nothing the sweep needs.
	lambda.Start(func(ctx context.Context, _ json.RawMessage) error {
		res, err := a.Holds.Sweep(ctx)
		log.Info("sweep done", "found", res.Found, "expired", res.Expired, "skipped", res.Skipped,
			"failed", res.Failed, "truncated", res.Truncated)
		return err
	})
}
