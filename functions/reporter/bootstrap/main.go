// Command bootstrap is the reporter function's Lambda binary: the reporter: every minute it reports changed cycles to the providers and reconciles the cycles marked for it.
// What it runs is composed in package reporter (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/reporter"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(reporter.Builder) }
