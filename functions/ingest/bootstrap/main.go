// Command bootstrap is the ingest function's Lambda binary: the event routes: it accepts events, runs the advisory gate and queues them.
// What it runs is composed in package ingest (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/ingest"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(ingest.Builder) }
