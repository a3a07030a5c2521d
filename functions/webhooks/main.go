// Command webhooks is the Lambda function behind POST /v1/webhooks/kinde and POST
// /v1/webhooks/stripe: verify the provider's signature, store the event with its receipt,
// nudge the inbox worker, and answer 200 only once the event is stored.
//
// Its composition is app.BuildWebhooks: the services of its entry in resources.Functions, from
// the resources that entry grants.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildWebhooks) }
