// Package send delivers one Ferry alert to one platform endpoint as a signed webhook, following
// the Standard Webhooks specification (https://www.standardwebhooks.com/). It is the delivery
// half of Ferry's outgoing notifications: deciding what to send, storing it, and scheduling
// retries belong to the caller; this package makes one attempt and says what happened.
//
// # Signing
//
// A delivery is a POST of the message's JSON body with three headers: webhook-id (the message's
// id), webhook-timestamp (its time, in unix seconds) and webhook-signature. The signature is
// computed by the Standard Webhooks reference library, never by hand: one "v1,<base64>" entry
// per endpoint secret, separated by spaces. During a secret rotation an endpoint has two secrets,
// newest first, and a receiver that holds either one verifies the delivery.
//
// The message carries its own id and timestamp, fixed by the caller: the id once per
// notification, so a retry sends the same webhook-id and a receiver can drop the duplicate. This
// package never invents an id and never reads the clock.
//
// # Where Ferry may connect
//
// An endpoint URL is written by a platform, so a delivery is a request that a stranger aims.
// Without care it could reach Ferry's own network: the instance metadata service at
// 169.254.169.254, a private address in the VPC, or a loopback port. Two checks stand in the way:
//
//   - CheckURL, at registration and again before every send, refuses anything but https (loopback
//     http only under a Policy that allows it, as `ferry dev` does), user information, fragments,
//     overlong or malformed URLs, and IP-literal hosts in a forbidden range. It never resolves
//     names: a name that is harmless today can resolve elsewhere tomorrow.
//   - The sender's dialer checks every address it is about to connect to, after DNS resolution
//     and before the connection is opened (net.Dialer.Control). That is the check that counts:
//     it covers a hostname that resolves to a forbidden address (DNS rebinding) as well as a
//     literal, and an IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
//
// The forbidden ranges are listed in forbiddenRanges. The sender also ignores proxy settings
// from the environment and never follows a redirect: a redirect would be a second URL that no
// check has seen, so a 3xx answer is a failed delivery.
//
// # Outcome and retries
//
// Send returns an Outcome: the HTTP status (0 when there was no answer), the first
// MaxAnswerBytes of the answer's body for the delivery log, whether the endpoint accepted the
// message (a 2xx status), whether trying again later can succeed, and the error.
//
// Every answer other than 2xx is retryable, 4xx included, as Standard Webhooks senders do. The
// body is Ferry's own well-formed JSON, so a 4xx almost always says the receiver is not ready
// rather than that the message is wrong: a route not deployed yet (404), a secret rotation
// half done (401, 400), a deploy in progress. Those are fixed on the receiver's side while the
// caller's retries, which are bounded, are still running. The status stays in the Outcome, so a
// caller can still act on one (disable an endpoint that keeps answering 410, say). Timeouts,
// refused or reset connections, DNS and TLS failures are retryable for the same reason.
//
// Not retryable are the failures that repeat identically on every attempt because they happen
// before anything is sent: an invalid URL, a forbidden address, an invalid secret, an invalid
// message. Those need a person (or a fixed caller), not another try.
package send
