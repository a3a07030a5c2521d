// Command bootstrap is the worker function's Lambda binary: the SQS worker: it bills each queued event exactly once and stores it, reporting failed messages as partial batch failures.
// What it runs is composed in package worker (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/worker"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(worker.Builder) }
