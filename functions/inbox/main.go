// Command inbox is the webhook inbox's worker: nudged through the inbox queue (by the webhooks
// function on every new event, by the sweep, and by itself for a retry's backoff), it claims a
// stored billing event under a 30 s lease and applies its effect to the account together with
// the event's APPLIED mark in one DynamoDB transaction, or records why it is IGNORED.
//
// Its composition is app.BuildInbox: the services of its entry in resources.Functions, from the
// resources that entry grants.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildInbox) }
