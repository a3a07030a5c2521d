// Command worker is the SQS worker Lambda function: it bills each queued event exactly once and
// stores it, reporting failed messages as partial batch failures.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ferrymeter/ferry/internal/app"
)

func main() {
	a, err := app.FromEnv(context.Background(), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lambda.Start(a.Worker.HandleSQS)
}
