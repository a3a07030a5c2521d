// Package webhook verifies Kinde's webhook deliveries and reads what they say.
//
// A delivery's body is a JWT (Content-Type application/jwt) signed with one of the keys Kinde
// publishes at https://<business domain>/.well-known/jwks. Verify accepts RS256 only, against
// keys fetched with a maintained JWKS client (github.com/MicahParks/keyfunc/v3 over
// github.com/golang-jwt/jwt/v5): cached, refreshed every hour, and fetched again at most once
// every UnknownKeyRefreshEvery when a token names a key the cache does not hold. A token whose
// `timestamp` is older than ReplayWindow is refused: the window is longer than Kinde's 36 hour
// retry horizon, so every genuine retry is accepted and a token captured and replayed later is
// not (the inbox's dedupe table defends against the provider's own retries; this defends
// against someone else's).
//
// Interpret reads a stored payload tolerantly: Kinde does not document its billing payloads,
// so every field is looked for in each place a delivery seen live, or Kinde's own components,
// put it — in this one file, with a fixture per shape under testdata/.
package kinde

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	provider "github.com/ferrymeter/ferry/internal/platform/endpoint"
	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// Limits of verification, with their units.
const (
	// ReplayWindow is how old a token's timestamp may be: twice Kinde's 36 hour retry horizon.
	ReplayWindow = 72 * time.Hour
	// MaxClockSkew is how far in the future a token's timestamp (or iat, nbf) may be, and how
	// far past its exp it is still accepted: clocks differ.
	MaxClockSkew = 5 * time.Minute
	// UnknownKeyRefreshEvery bounds the fetches a token naming an unknown key causes: one per
	// interval per process, however many such tokens arrive.
	UnknownKeyRefreshEvery = 30 * time.Second
	// RefreshEvery is how often the cached keys are fetched again (rotated keys appear).
	RefreshEvery = time.Hour
	// fetchTimeout bounds one JWKS fetch.
	fetchTimeout = 5 * time.Second
	// maxJWKSBytes bounds a JWKS document.
	maxJWKSBytes = 64 << 10
	// Algorithm is the only signature algorithm accepted.
	Algorithm = "RS256"
)

// UnverifiableError is a delivery that cannot be verified: it is answered 401 and nothing is
// stored. Reason says why, for the answer's detail and the log.
type UnverifiableError struct{ Reason string }

func (e *UnverifiableError) Error() string { return "unverifiable Kinde delivery: " + e.Reason }

// Kind implements problem.Error.
func (e *UnverifiableError) Kind() problem.Kind { return problem.SignatureInvalid }

// Public implements problem.Describer.
func (e *UnverifiableError) Public() problem.Public {
	return problem.Public{Detail: "The delivery was not stored: " + e.Reason + "."}
}

// AmbiguousClaimsError is a correctly signed token whose claims are not strict JSON (a member
// named twice, invalid UTF-8, an escaped lone surrogate): readers could take it two ways, so it is
// answered 400 and nothing is stored.
type AmbiguousClaimsError struct{ Reason string }

func (e *AmbiguousClaimsError) Error() string {
	return "Kinde token with ambiguous claims: " + e.Reason
}

// Kind implements problem.Error.
func (e *AmbiguousClaimsError) Kind() problem.Kind { return problem.Invalid }

// Public implements problem.Describer.
func (e *AmbiguousClaimsError) Public() problem.Public {
	return problem.Public{Detail: "The delivery was not stored: the token's claims are not strict JSON (" + e.Reason + ")."}
}

// NotAnEventError is a correctly signed, current token that is not a Kinde event Ferry can store:
// it has no usable event_id (the dedupe key) or no type. The signature verified, so this is not
// a 401: it is answered 400, as Stripe's route answers a signed event without an id, and nothing
// is stored.
type NotAnEventError struct{ Reason string }

func (e *NotAnEventError) Error() string { return "Kinde token that is not an event: " + e.Reason }

// Kind implements problem.Error.
func (e *NotAnEventError) Kind() problem.Kind { return problem.Invalid }

// Public implements problem.Describer.
func (e *NotAnEventError) Public() problem.Public {
	return problem.Public{Detail: "The delivery was not stored: it is not a Kinde event Ferry stores (" + e.Reason + ")."}
}

// ErrKeysUnavailable: Kinde's keys could not be fetched at all, so no delivery can be verified
// now. It is answered 503: Ferry's failure, which Kinde's retries cover.
var ErrKeysUnavailable = problem.New(problem.Unavailable, "the Kinde signing keys cannot be fetched",
	"Kinde's signing keys cannot be fetched, so the delivery cannot be verified now; nothing was stored.")

// Config configures a Verifier.
type Config struct {
	// JWKSURL is where the keys are published; http:// only for loopback hosts.
	JWKSURL string
	// HTTPClient fetches the keys (default: one with a timeout).
	HTTPClient *http.Client
	// Now is the clock tokens are judged by.
	Now func() time.Time
}

// JWKSURLFor is the default key URL of a Kinde business domain ("acme.kinde.com" or
// "https://acme.kinde.com").
func JWKSURLFor(domain string) string {
	domain = strings.TrimSuffix(strings.TrimSpace(domain), "/")
	if !strings.Contains(domain, "://") {
		domain = "https://" + domain
	}
	return domain + "/.well-known/jwks"
}

// CheckURL refuses a key URL that is not https, except http to a loopback host (a local
// signer): keys fetched in the clear could be swapped by anyone on the path.
func CheckURL(raw string) error { return provider.CheckEndpoint("the Kinde JWKS URL", raw) }

// Verifier verifies Kinde webhook tokens.
type Verifier struct {
	keys   keyfunc.Keyfunc
	parser *jwt.Parser
	now    func() time.Time
	cancel context.CancelFunc
}

// New builds a Verifier and fetches the keys once; a fetch that fails is not an error here (the
// next delivery fetches again), a URL that cannot be used is.
func New(cfg Config) (*Verifier, error) {
	if err := CheckURL(cfg.JWKSURL); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: fetchTimeout}
	}
	limited := *client
	limited.Transport = limitedTransport{next: transportOf(client)}
	ctx, cancel := context.WithCancel(context.Background())
	noError := true
	keys, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:                    &limited,
		HTTPTimeout:               fetchTimeout,
		NoErrorReturnFirstHTTPReq: &noError,
		RefreshInterval:           RefreshEvery,
		RefreshUnknownKID:         rate.NewLimiter(rate.Every(UnknownKeyRefreshEvery), 1),
		// This bounds both the wait for the limiter and the refetch itself (the client runs the
		// refetch under the same deadline). The limiter refuses at once when its next token is
		// further away than this, so a token naming an unknown key while the limiter is spent
		// is refused rather than held, except within the last few seconds of the interval.
		RateLimitWaitMax:        fetchTimeout,
		RefreshErrorHandlerFunc: func(string) func(context.Context, error) { return func(context.Context, error) {} },
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("the Kinde JWKS at %s: %w", cfg.JWKSURL, err)
	}
	return &Verifier{
		keys: keys, now: now, cancel: cancel,
		parser: jwt.NewParser(jwt.WithValidMethods([]string{Algorithm}), jwt.WithLeeway(MaxClockSkew),
			jwt.WithIssuedAt(), jwt.WithTimeFunc(now)),
	}, nil
}

// Close stops the background refresh.
func (v *Verifier) Close() { v.cancel() }

func transportOf(c *http.Client) http.RoundTripper {
	if c.Transport != nil {
		return c.Transport
	}
	return http.DefaultTransport
}

// limitedTransport cuts a JWKS answer at maxJWKSBytes, so a hostile or broken endpoint cannot
// make the verifier read without bound.
type limitedTransport struct{ next http.RoundTripper }

func (t limitedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.LimitReader(resp.Body, maxJWKSBytes), resp.Body}
	return resp, nil
}

// claims are the token's claims Verify needs; the whole payload is kept as it was signed.
type claims struct {
	jwt.RegisteredClaims
	Type           string `json:"type"`
	EventID        string `json:"event_id"`
	Timestamp      string `json:"timestamp"`
	EventTimestamp string `json:"event_timestamp"`
}

// Verified is a verified token: the fields the inbox stores it by and the signed payload.
type Verified struct {
	EventID string
	Type    string
	// SentAt is the token's timestamp (when Kinde sent it); OccurredAt the event time that
	// orders it (event_timestamp, else timestamp), unknown if it cannot be read exactly.
	SentAt     inbox.EventTime
	OccurredAt inbox.EventTime
	// Payload is the token's claims, byte for byte as signed.
	Payload []byte
	KeyID   string
}

// Verify checks a token: well formed, RS256, signed by a key of the JWKS, within its exp and
// nbf if it has them, and a timestamp no older than ReplayWindow and not more than MaxClockSkew
// in the future (else *UnverifiableError, 401); then claims that are strict JSON with an event
// id and a type (else *AmbiguousClaimsError or *NotAnEventError, 400).
func (v *Verifier) Verify(ctx context.Context, body []byte) (Verified, error) {
	raw := strings.TrimSpace(string(body))
	if raw == "" {
		return Verified{}, &UnverifiableError{Reason: "the body is empty; Kinde sends a JWT"}
	}
	var c claims
	token, err := v.parser.ParseWithClaims(raw, &c, v.keys.KeyfuncCtx(ctx))
	if err != nil {
		return Verified{}, v.explain(ctx, err)
	}
	parts := strings.Split(token.Raw, ".")
	payload, err := v.parser.DecodeSegment(parts[1])
	if err != nil {
		return Verified{}, &UnverifiableError{Reason: "the token's payload cannot be decoded"}
	}
	// The claims are stored as signed and read again by the worker: they must read one way only.
	if err := jsonbody.Check(payload); err != nil {
		return Verified{}, &AmbiguousClaimsError{Reason: err.Error()}
	}
	kid, _ := token.Header["kid"].(string)
	// The token's age is part of verifying it (a replay is refused as unverifiable, 401); what
	// it says is judged only once it verified (400, as for a Stripe event).
	sent, err := inbox.ParseTime(c.Timestamp)
	if err != nil {
		return Verified{}, &UnverifiableError{Reason: "the token's timestamp claim cannot be read, so its age cannot be checked: " + err.Error()}
	}
	now := v.now()
	switch age := now.Sub(sent.Time()); {
	case age > ReplayWindow:
		return Verified{}, &UnverifiableError{Reason: fmt.Sprintf("the token was sent %s ago; tokens older than %s are refused as replays", age.Truncate(time.Minute), ReplayWindow)}
	case -age > MaxClockSkew:
		return Verified{}, &UnverifiableError{Reason: "the token's timestamp is in the future"}
	}
	if !inbox.ValidEventID(c.EventID) {
		return Verified{}, &NotAnEventError{Reason: "the token has no usable event_id claim"}
	}
	if c.Type == "" {
		return Verified{}, &NotAnEventError{Reason: "the token has no type claim"}
	}
	out := Verified{EventID: c.EventID, Type: c.Type, SentAt: sent, Payload: payload, KeyID: kid}
	if t, ok := occurredAt(c.EventTimestamp, sent); ok {
		out.OccurredAt = t
	}
	return out, nil
}

// occurredAt is the event time: event_timestamp when present (read exactly, or not at all:
// never replaced by another time), else the sending timestamp.
func occurredAt(eventTimestamp string, sent inbox.EventTime) (inbox.EventTime, bool) {
	if eventTimestamp == "" {
		return sent, true
	}
	t, err := inbox.ParseTime(eventTimestamp)
	return t, err == nil
}

// explain turns a parse failure into the reason a delivery is refused.
func (v *Verifier) explain(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return &UnverifiableError{Reason: "the body is not a well-formed JWT"}
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if strings.Contains(err.Error(), "signing method") {
			return &UnverifiableError{Reason: "the token is not signed with " + Algorithm + ", the only algorithm accepted"}
		}
		return &UnverifiableError{Reason: "the token's signature does not verify"}
	case errors.Is(err, jwt.ErrTokenExpired):
		return &UnverifiableError{Reason: "the token has expired"}
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return &UnverifiableError{Reason: "the token is not valid yet"}
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		if errors.Is(err, jwkset.ErrKeyNotFound) || errors.Is(err, keyfunc.ErrKeyfunc) {
			if keys, kerr := v.keys.Storage().KeyReadAll(ctx); kerr == nil && len(keys) == 0 {
				return fmt.Errorf("%w: %v", ErrKeysUnavailable, err)
			}
			return &UnverifiableError{Reason: "the token is signed with a key Kinde does not publish"}
		}
		return &UnverifiableError{Reason: "the token cannot be verified"}
	}
	return &UnverifiableError{Reason: "the token is not valid"}
}
