// Command reporter is the reporter Lambda function. Every minute (an EventBridge schedule) it
// reports up to 100 changed cycles to the providers — Kinde absolute totals, Stripe deltas
// through the transactional outbox — and then reconciles the cycles whose provider meter changed
// (the reconciler's marks). A cycle it could not report stays marked for the next run; the run
// fails only when Ferry's own state could not be read or written, which the function's Errors
// alarm reports.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ferrymeter/ferry/internal/app"
)

func main() {
	a, err := app.FromEnv(context.Background(), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The schedule's payload carries nothing the run needs.
	lambda.Start(func(ctx context.Context, _ json.RawMessage) error {
		res, err := a.Meters.Reporter.Run(ctx)
		a.Log.Info("report done", "found", res.Found, "reported", res.Reported, "unchanged", res.Unchanged,
			"review", res.Review, "retrying", res.Retrying, "failed", res.Failed, "truncated", res.Truncated)
		results, merr := a.Meters.Reconciler.RunMarked(ctx)
		if len(results) > 0 {
			a.Log.Info("marked cycles reconciled", "cycles", len(results))
		}
		return errors.Join(err, merr)
	})
}
