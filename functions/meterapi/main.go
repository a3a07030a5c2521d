// Command meterapi is the Lambda function behind the operator routes of reporting and
// reconciliation: POST /v1/usage/corrections, POST /v1/report, POST /v1/reconcile,
// GET /v1/reconcile/evidence and GET /v1/reconcile/review.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/httpapi"
	"github.com/ferrymeter/ferry/internal/resources"
)

func main() {
	a, err := app.FromEnv(context.Background(), true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lambda.Start(httpapi.NewLambdaHandler(a.API.Handler(resources.FunctionMeterAPI)))
}
