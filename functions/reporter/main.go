// Command reporter is the reporter Lambda function. Every minute (an EventBridge schedule) it
// reports up to 100 changed cycles to the providers — Kinde absolute totals, Stripe deltas
// through the transactional outbox — and then reconciles the cycles whose provider meter changed
// (the reconciler's marks). A cycle it could not report stays marked for the next run; the run
// fails only when Ferry's own state could not be read or written, which the function's Errors
// alarm reports.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildReporter) }
