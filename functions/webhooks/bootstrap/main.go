// Command bootstrap is the webhooks function's Lambda binary: the webhook routes: it verifies Kinde's and Stripe's deliveries, stores them and nudges the inbox worker.
// What it runs is composed in package webhooks (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/webhooks"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(webhooks.Builder) }
