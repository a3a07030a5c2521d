// Command inbox is the inbox worker's Lambda function: for each nudge from the inbox queue it
// claims the stored billing event under a lease and applies its effect and its mark in one
// transaction, reporting messages whose work stopped as partial batch failures.
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
	lambda.Start(a.Inbox.Worker.HandleSQS)
}
