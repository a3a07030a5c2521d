// Command ingest is the Lambda function behind POST /v1/events and POST /v1/events/batch:
// authenticate, run the advisory gate, answer 202 once SQS has the event.
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
	lambda.Start(httpapi.NewLambdaHandler(a.API.Handler(resources.FunctionIngest)))
}
