// Command worker is the SQS worker Lambda function: it bills each queued event exactly once and
// stores it, reporting failed messages as partial batch failures.
//
// Its composition is app.BuildWorker: the services of its entry in resources.Functions, from the
// resources that entry grants.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildWorker) }
