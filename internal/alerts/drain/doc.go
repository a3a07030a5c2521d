// Package drain is the notifier's work: it fans each new notification out to the webhook
// endpoints that want it, and delivers every delivery, signed, until the endpoint accepts it or
// the tries run out. Package notify writes the notifications (once, in the transaction that
// decides them), package endpoints keeps the endpoints, package send makes one attempt; this
// package decides what to attempt, when, and what each outcome leaves behind.
//
// # Fan-out
//
// A NEW notification carries the due index's attributes, so the notifier finds it there. For
// every endpoint that wants it (endpoints.Endpoint.Wants: enabled, its kinds, its accounts) the
// notifier puts a delivery item beside it, "delivery#<endpoint>" in the notification's
// partition, conditional on its absence: PENDING, due now, listed in the endpoint's delivery log.
// Then it marks the notification FANNED, with the endpoints it went to, and takes it off the due
// index, conditional on it still being NEW.
//
// A notifier that dies between the puts and the mark leaves the notification NEW: the next run
// fans it out again, its puts find the deliveries already there and change nothing (a DELIVERED
// delivery is never reset), and it writes the mark. The fan-out happens once per notification,
// with the endpoints registered at that moment: an endpoint registered later is not sent
// notifications decided before it, and one removed later keeps its deliveries in the log.
//
// # Delivery
//
// A delivery is claimed before it is sent: a conditional write on the revision the notifier
// read moves it to SENDING until a deadline (ClaimFor), so two notifiers never send one attempt
// twice, and one that died mid-send leaves a claim that lapses and is taken over. Every later
// write of the delivery (the outcome, a replay) is conditioned on the revision it was decided on
// in the same way, so a notifier whose claim was taken over cannot overwrite what the new owner
// wrote.
//
// Every attempt to every endpoint sends the same message: webhook-id is the notification's id
// and the body is the notification's stored body, byte for byte. The webhook-timestamp is the
// attempt's own time: receivers refuse a timestamp more than five minutes from their clock, and
// retries run for hours. A receiver that dedupes on webhook-id sees a retry, a takeover after a
// crash and a replay as the same message.
//
// # Retries
//
// A failed attempt that can succeed later (package send decides: any answer but 2xx, a timeout,
// a refused connection) backs off with full jitter: the wait is drawn uniformly from zero to a
// window that starts at BackoffBase (30 s) and doubles after each failure up to BackoffCap
// (1 h). The windows after failures 1 to 9 are 30 s, 1, 2, 4, 8, 16, 32, 60 and 60 minutes, so
// the MaxAttempts (10) tries span at most 3 h 3.5 min of waiting (about half that on average),
// plus up to one schedule period (NotifierEvery, a minute) per wait, since a delivery is picked
// up by the first run after it is due: a receiver that is down for an afternoon loses nothing,
// and one down longer is what the DEAD alarm and replay are for. The jitter spreads the retries of many deliveries that failed together
// (an endpoint that was down) instead of sending them back in one burst.
//
// After the last try, or at once for a failure that would repeat identically (an invalid URL,
// a forbidden address, no valid secret), the delivery is DEAD, counted by the alarmed metric
// NotificationsDead. An operator reads the endpoint's delivery log (Store.Log) and replays it
// (Store.Replay): PENDING again, due now, with a fresh set of attempts, under the same webhook-id.
// Replay also sends a DELIVERED delivery again, which is what it is for; it refuses only one that
// is being sent under a live claim.
//
// A delivery whose endpoint was removed or disabled after the fan-out is DEAD without an attempt,
// with the reason in its log; it is not counted as an alarm, since the operator did it.
//
// # Retention
//
// A notification once fanned out, and a delivery once DELIVERED or DEAD, carry the table's TTL
// attribute: they expire Retention (30 days) later. A replay needs the notification's body, so a
// delivery whose notification has expired cannot be replayed (ErrNoDelivery).
//
// # Bounds
//
// One run fans out at most MaxFanOutsPerRun notifications and attempts at most
// MaxDeliveriesPerRun deliveries, SendConcurrency at a time, and claims nothing once the run
// nears its end (the context's deadline less StopMargin, or RunBudget without a deadline): what
// is left is due at the next run.
package drain
