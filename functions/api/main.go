// Command api is the Lambda function behind the HTTP API's account, event-status and usage
// routes (and every path no other function serves).
//
// Its composition is app.BuildAPI: the services of its entry in resources.Functions, from the
// resources that entry grants.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildAPI) }
