// Command reconciler is the nightly reconciler Lambda function (an EventBridge schedule). It
// pages through every account, 50 a page, 5 at a time, proves each reported cycle's meter
// against the ledger, repairs it from the ledger and stores the evidence. It stops cleanly
// before its timeout; the run fails when a cycle could not be compared or a repair was not
// confirmed, which the function's Errors alarm and the reconciler's own alarms report.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildReconciler) }
