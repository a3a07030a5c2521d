// Command bootstrap is the api function's Lambda binary: the HTTP API's account, event-status, usage and billing-event routes, the operator console and its labs (and every path no other function serves).
// What it runs is composed in package api (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/api"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(api.Builder) }
