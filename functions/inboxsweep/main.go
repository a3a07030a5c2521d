// Command inboxsweep is the inbox sweep's Lambda function. Every minute (an EventBridge
// schedule) it nudges the worker for every billing event that is due — stored but never
// nudged, failed and past its backoff, or processing past its lease — so that a lost nudge or a
// worker that died strands nothing. A run that cannot nudge fails, which the function's Errors
// alarm reports; the next run tries again.
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
		res, err := a.Inbox.Worker.Sweep(ctx)
		a.Log.Info("inbox sweep done", "found", res.Found, "nudged", res.Nudged)
		return err
	})
}
