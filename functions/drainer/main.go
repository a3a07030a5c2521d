// Command drainer is the Stripe outbox's drainer Lambda function. Every minute (an EventBridge
// schedule) it claims the due outbox rows, sends each as a meter event under its row's
// identifier, backs off after a failure and dead-letters a row after its last try (OutboxDead,
// with an alarm). The run fails only when a row's claim or outcome could not be written; the row
// is due again once its claim lapses.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildDrainer) }
