// Command api is the Lambda function behind the HTTP API's account, event-status and usage
// routes (and every path no other function serves).
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
	lambda.Start(httpapi.NewLambdaHandler(a.API.Handler(resources.FunctionAPI)))
}
