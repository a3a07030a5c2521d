// Command bootstrap is the meterapi function's Lambda binary: the operator routes of reporting and reconciliation.
// What it runs is composed in package meterapi (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/meterapi"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(meterapi.Builder) }
