// Command holds is the usage holds' Lambda function: it serves POST /v1/holds, GET
// /v1/holds/{id}, POST /v1/holds/{id}/charges and POST /v1/holds/{id}/settle behind API Gateway
// (HTTP API, payload v2). Its limit source comes from FERRY_LIMITS_SOURCE (plan or kinde).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/httpapi"
	"github.com/ferrymeter/ferry/internal/metrics"
	"github.com/ferrymeter/ferry/internal/resources"
)

func main() {
	ctx := context.Background()
	log := app.NewLogger(os.Stderr)
	cfg, err := app.ConfigFromEnv(ctx, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holds: configuration:", err)
		os.Exit(1)
	}
	if cfg.Limits, err = app.LimitsConfigFromEnv(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "holds: configuration:", err)
		os.Exit(1)
	}
	clients, err := cloud.New(ctx, cloud.EndpointsFromEnv(), cloud.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "holds: clients:", err)
		os.Exit(1)
	}
	a := app.New(cfg, clients, log, metrics.NewEMF(os.Stdout, time.Now), time.Now)
	lambda.Start(httpapi.NewLambdaHandler(a.API.Handler(resources.FunctionHolds)))
}
