// Package ferry is the Go client of Ferry's HTTP API: usage events metered exactly once, holds on
// a limit for long jobs, and the reads and operator routes around them.
//
// The request and response types (types.gen.go) are generated from api/openapi.yaml; the layer
// below them is what makes the last hop to Ferry safe to retry:
//
//   - every event gets its id once (given by the caller or minted by the client) and keeps it on
//     every retry, so Ferry counts it once however often it is sent;
//   - every mutating call mints one Idempotency-Key and sends it on each of its retries;
//   - retries are bounded and exponential with jitter, on network errors, timeouts, 429 (after
//     Retry-After or RateLimit-Reset), 5xx (a 502 outcome-unknown included) and a request still
//     in flight under its own key; never on another 4xx;
//   - the Batcher sends events in batches of up to 100 in the background, holds a bounded buffer,
//     and on Flush or Close sends everything or names exactly the ids it could not;
//   - RunUnderHold reserves part of a limit, runs a job, charges what it reports and settles the
//     hold whatever happens: an error, a panic or a cancelled context;
//   - every problem document becomes an error of its kind (*LimitReachedError,
//     *AccountInactiveError, …), and a kind this version does not know a *Problem;
//   - the operator registers webhook endpoints for Ferry's notifications (CreateWebhookEndpoint
//     and the calls beside it), and a receiver checks each delivery with a WebhookVerifier,
//     whose VerifyMessage returns the typed NotificationMessage.
//
// A Client has no global state and is safe for concurrent use.
package ferry

// Version is the client's version: the version of the API description it was generated from.
const Version = "0.1.0"
