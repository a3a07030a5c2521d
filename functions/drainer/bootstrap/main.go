// Command bootstrap is the drainer function's Lambda binary: the Stripe outbox's drainer: it sends due meter events to Stripe, every minute.
// What it runs is composed in package drainer (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/drainer"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(drainer.Builder) }
