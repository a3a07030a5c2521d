// Command meterapi is the Lambda function behind the operator routes of reporting and
// reconciliation: POST /v1/usage/corrections, POST /v1/report, POST /v1/reconcile,
// GET /v1/reconcile/evidence and GET /v1/reconcile/review.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildMeterAPI) }
