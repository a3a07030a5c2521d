// Command reconciler is the nightly reconciler Lambda function (an EventBridge schedule). It
// pages through every account, 50 a page, 5 at a time, proves each reported cycle's meter
// against the ledger, repairs it from the ledger and stores the evidence. It stops cleanly
// before its timeout; the run fails when a cycle could not be compared or a repair was not
// confirmed, which the function's Errors alarm and the reconciler's own alarms report.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/reconcile"
)

func main() {
	a, err := app.FromEnv(context.Background(), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lambda.Start(func(ctx context.Context, _ json.RawMessage) error {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(10 * time.Minute)
		}
		pages, accounts := 0, 0
		done, err := a.Meters.Reconciler.RunAll(ctx, deadline, func(p reconcile.Page) {
			pages++
			accounts += p.Accounts
			a.Log.Info("reconcile page done", "page", pages, "accounts", accounts, "cycles", len(p.Results))
		})
		a.Log.Info("reconcile run done", "complete", done, "pages", pages, "accounts", accounts)
		return err
	})
}
