// Command holds is the usage holds' Lambda function: it serves POST /v1/holds, GET
// /v1/holds/{id}, POST /v1/holds/{id}/charges and POST /v1/holds/{id}/settle behind API Gateway
// (HTTP API, payload v2). Its limit source comes from FERRY_LIMITS_SOURCE (plan or kinde).
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
	a, err := app.FromEnv(context.Background(), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lambda.Start(httpapi.NewLambdaHandler(a.API.Handler(resources.FunctionHolds)))
}
