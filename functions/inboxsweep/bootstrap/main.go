// Command bootstrap is the inboxsweep function's Lambda binary: the inbox's sweep: every minute it nudges the worker for each due or lease-expired billing event.
// What it runs is composed in package inboxsweep (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/inboxsweep"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(inboxsweep.Builder) }
