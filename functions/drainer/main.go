// Command drainer is the Stripe outbox's drainer Lambda function. Every minute (an EventBridge
// schedule) it claims the due outbox rows, sends each as a meter event under its row's
// identifier, backs off after a failure and dead-letters a row after its last try (OutboxDead,
// with an alarm). The run fails only when a row's claim or outcome could not be written; the row
// is due again once its claim lapses.
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
	lambda.Start(func(ctx context.Context, _ json.RawMessage) error {
		res, err := a.Meters.Drainer.Run(ctx)
		a.Log.Info("drain done", "due", res.Due, "sent", res.Sent, "retrying", res.Retrying, "dead", res.Dead,
			"review", res.Review, "skipped", res.Skipped, "failed", res.Failed)
		return err
	})
}
