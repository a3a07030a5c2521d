// Command holds is the usage holds' Lambda function: it serves POST /v1/holds, GET
// /v1/holds/{id}, POST /v1/holds/{id}/charges and POST /v1/holds/{id}/settle behind API Gateway
// (HTTP API, payload v2). Its limit source comes from FERRY_LIMITS_SOURCE (plan or kinde).
//
// Its composition is app.BuildHolds: the services of its entry in resources.Functions, from the
// resources that entry grants.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildHolds) }
