// Command sweeper is the sweeper Lambda function. Every minute (an EventBridge schedule) it
// settles, as EXPIRED and at the usage they recorded, the RUNNING holds whose lease ran out, so
// that a worker that died does not keep its capacity held. Its run fails when a lapsed hold
// could not be settled, which the function's Errors alarm reports; the next run retries it.
//
// Its composition is app.BuildSweeper: the services of its entry in resources.Functions, from the
// resources that entry grants.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildSweeper) }
