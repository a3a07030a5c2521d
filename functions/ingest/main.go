// Command ingest is the Lambda function behind POST /v1/events and POST /v1/events/batch:
// authenticate, run the advisory gate, answer 202 once SQS has the event.
//
// Its composition is app.BuildIngest: the services of its entry in resources.Functions, from the
// resources that entry grants.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildIngest) }
