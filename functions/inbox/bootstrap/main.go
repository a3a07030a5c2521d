// Command bootstrap is the inbox function's Lambda binary: the webhook inbox's worker: it claims a stored billing event and applies its effect with its mark in one transaction.
// What it runs is composed in package inbox (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/inbox"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(inbox.Builder) }
