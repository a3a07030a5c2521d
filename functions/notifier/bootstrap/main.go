// Command bootstrap is the notifier function's Lambda binary: every minute it fans new
// notifications out to the webhook endpoints that want them and delivers them, signed.
// What it runs is composed in package notifier (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/notifier"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(notifier.Builder) }
