// Command webhooks is the Lambda function behind POST /v1/webhooks/kinde and POST
// /v1/webhooks/stripe: verify the provider's signature, store the event with its receipt,
// nudge the inbox worker, and answer 200 only once the event is stored.
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
	lambda.Start(httpapi.NewLambdaHandler(a.API.Handler(resources.FunctionWebhooks)))
}
