// Package webhook verifies Stripe's webhook deliveries and reads what they say.
//
// Verification is stripe-go's own (github.com/stripe/stripe-go/v85/webhook): the
// Stripe-Signature header's v1 HMAC-SHA256 of "t.body" under the endpoint's signing secret,
// with the timestamp no older than Tolerance (300 s, Stripe's default). One deliberate
// departure from stripe-go's defaults: an event whose api_version differs from the version
// stripe-go is pinned to is accepted (ConstructEventOptions.IgnoreAPIVersionMismatch). The
// endpoint's version is chosen in Stripe's dashboard, not by Ferry; refusing such events would
// make Stripe retry each one for three days and then give up on it, losing billing changes.
// Ferry never deserializes the event's object into stripe-go's version-specific types: it reads
// the few fields it needs (the customer, price ids, the status) from the raw JSON, in every place
// the API versions put them (read.go), and stores the api_version with the event.
package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// Limits of verification, with their units.
const (
	// Tolerance is how old a signature's timestamp may be (stripe-go checks it).
	Tolerance = webhook.DefaultTolerance
	// MaxClockSkew is how far in the future a signature's timestamp may be: clocks differ. It is
	// Kinde's bound for a token's timestamp, so both providers' deliveries are dated alike.
	// stripe-go checks only the past (time.Since(t) > Tolerance), so a signature dated days
	// ahead would otherwise pass, and stay "fresh" for as long as its date lies ahead.
	MaxClockSkew = 5 * time.Minute
)

// UnverifiableError is a delivery whose signature does not verify: answered 401, nothing stored.
type UnverifiableError struct{ Reason string }

func (e *UnverifiableError) Error() string { return "unverifiable Stripe delivery: " + e.Reason }

// Kind implements problem.Error.
func (e *UnverifiableError) Kind() problem.Kind { return problem.SignatureInvalid }

// Public implements problem.Describer.
func (e *UnverifiableError) Public() problem.Public {
	return problem.Public{Detail: "The delivery was not stored: " + e.Reason + "."}
}

// NotAnEventError is a correctly signed body that is not a Stripe event Ferry can store (a thin
// event notification, or an event without an id): answered 400, nothing stored. Reason is in
// Ferry's words, for the answer; Cause, if any, is the parser's, for the log only.
type NotAnEventError struct {
	Reason string
	Cause  error
}

func (e *NotAnEventError) Error() string {
	if e.Cause != nil {
		return "not a Stripe event: " + e.Reason + ": " + e.Cause.Error()
	}
	return "not a Stripe event: " + e.Reason
}

// Unwrap returns the parser's error.
func (e *NotAnEventError) Unwrap() error { return e.Cause }

// Kind implements problem.Error.
func (e *NotAnEventError) Kind() problem.Kind { return problem.Invalid }

// Public implements problem.Describer.
func (e *NotAnEventError) Public() problem.Public {
	return problem.Public{Detail: "The delivery was not stored: it is not a Stripe event Ferry stores (" + e.Reason + ")."}
}

// Verifier verifies deliveries to one Stripe endpoint.
type Verifier struct {
	// Secret is the endpoint's signing secret (whsec_…).
	Secret string
	// Now is the clock a signature's timestamp is judged by (default time.Now, the clock
	// stripe-go judges the past by).
	Now func() time.Time
}

// Verified is a verified event: the fields the inbox stores it by, and the body as signed.
type Verified struct {
	EventID    string
	Type       string
	Created    inbox.EventTime
	APIVersion string
	Payload    []byte
}

// Verify checks a delivery's signature and reads the event.
func (v Verifier) Verify(body []byte, signature string) (Verified, error) {
	if v.Secret == "" {
		return Verified{}, errors.New("no Stripe signing secret is configured")
	}
	ev, err := webhook.ConstructEventWithOptions(body, signature, v.Secret, webhook.ConstructEventOptions{
		Tolerance: Tolerance, IgnoreAPIVersionMismatch: true,
	})
	switch {
	case errors.Is(err, webhook.ErrNotSigned):
		return Verified{}, &UnverifiableError{Reason: "there is no Stripe-Signature header"}
	case errors.Is(err, webhook.ErrInvalidHeader):
		return Verified{}, &UnverifiableError{Reason: "the Stripe-Signature header is malformed"}
	case errors.Is(err, webhook.ErrTooOld):
		return Verified{}, &UnverifiableError{Reason: fmt.Sprintf("the signature's timestamp is more than %s old", Tolerance)}
	case errors.Is(err, webhook.ErrNoValidSignature):
		return Verified{}, &UnverifiableError{Reason: "no v1 signature in the Stripe-Signature header verifies"}
	}
	// The signature verified, so its timestamp is Stripe's: one dated ahead of the clock by more
	// than clocks differ is refused, as a Kinde token's is.
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if signatureTime(signature).Sub(now()) > MaxClockSkew {
		return Verified{}, &UnverifiableError{Reason: "the signature's timestamp is in the future"}
	}
	if err != nil {
		// The signature verified (stripe-go checks it first); the body is not an event. The
		// parser's message names Go types and offsets: it goes to the log, never the answer.
		if cerr := jsonbody.Check(body); cerr != nil {
			return Verified{}, &NotAnEventError{Reason: cerr.Error(), Cause: err}
		}
		return Verified{}, &NotAnEventError{Reason: "the body does not read as a Stripe event object (an id, a type and a created time in seconds)", Cause: err}
	}
	// The body is stored as signed and read again by the worker: it must read one way only.
	if err := jsonbody.Check(body); err != nil {
		return Verified{}, &NotAnEventError{Reason: err.Error()}
	}
	if !inbox.ValidEventID(ev.ID) || ev.Type == "" {
		return Verified{}, &NotAnEventError{Reason: "the event has no usable id or type"}
	}
	out := Verified{EventID: ev.ID, Type: string(ev.Type), APIVersion: ev.APIVersion, Payload: body}
	if t, err := inbox.UnixSeconds(ev.Created); err == nil {
		out.Created = t
	}
	return out, nil
}

// signatureTime reads the timestamp of a Stripe-Signature header as stripe-go reads it when it
// verifies the signature (webhook.parseSignatureHeader, which is not exported): comma-separated
// key=value pairs, the last t= wins, in seconds. It is called only for a header whose signature
// verified, which stripe-go could read: this is the exact timestamp the verified HMAC covers.
func signatureTime(header string) time.Time {
	var at time.Time
	for _, pair := range strings.Split(header, ",") {
		if k, v, _ := strings.Cut(pair, "="); k == "t" {
			secs, _ := strconv.ParseInt(v, 10, 64)
			at = time.Unix(secs, 0)
		}
	}
	return at
}

// Sign returns the Stripe-Signature header Stripe would send for body under secret at t: the
// stand-in side of Verify, for ferry dev, `ferry webhooks send stripe` and the tests.
func Sign(body []byte, secret string, t time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: t}).Header
}

// envelope is the part of an event every reader needs.
type envelope struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Created    int64  `json:"created"`
	APIVersion string `json:"api_version"`
	Data       struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}
