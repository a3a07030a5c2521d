// Command inboxsweep runs every minute (an EventBridge schedule) and nudges the inbox worker for
// every stored billing event that is due (a retry whose backoff has passed, an event whose nudge
// was lost) or whose worker's lease has expired, so that nothing stored is stranded.
//
// Its composition is app.BuildInboxSweep: the services of its entry in resources.Functions, from
// the resources that entry grants.
package main

import "github.com/ferrymeter/ferry/internal/app"

func main() { app.Run(app.BuildInboxSweep) }
