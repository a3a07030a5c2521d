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

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ferrymeter/ferry/internal/app"
)

func main() {
	a, err := app.FromEnv(context.Background(), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The schedule's payload carries nothing the sweep needs.
	lambda.Start(func(ctx context.Context, _ json.RawMessage) error {
		res, err := a.Holds.Sweep(ctx)
		a.Log.Info("sweep done", "found", res.Found, "expired", res.Expired, "skipped", res.Skipped,
			"failed", res.Failed, "truncated", res.Truncated)
		return err
	})
}
