package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Limits and durations of the contract.
const (
	// MaxKeyLength is the longest Idempotency-Key accepted, in characters (keys are ASCII, so
	// also in bytes).
	MaxKeyLength = 255
	// Lease is how long a claim belongs to the request that wrote it. It is longer than the
	// timeout of every function that serves a mutating route (a test holds it to that): Lambda
	// stops a function at its timeout, so a claim older than the lease has no living owner.
	Lease = 30 * time.Second
	// DefaultRetention is how long an answer is kept for replay unless its route says otherwise.
	// It is at least the 24 hours clients are used to from payment APIs.
	DefaultRetention = 24 * time.Hour
	// EventRetention is the retention of the event routes. Clients buffer usage and replay a
	// flush after their own outages, which can last days; the record is small, and a late retry
	// that still finds it gets the same answer instead of a fresh run.
	EventRetention = 7 * 24 * time.Hour
	// RetryAfterInFlight is what a repeat is asked to wait while the first request runs: most
	// requests finish in well under a second.
	RetryAfterInFlight = time.Second
	// MaxStoredBodyBytes bounds an answer kept for replay, well inside DynamoDB's 400 KB item.
	// Ferry's answers are far smaller; a larger one is not stored (the claim is released).
	MaxStoredBodyBytes = 256 << 10
)

// Errors of the contract, each with its kind; the HTTP layer maps them to problem documents.
var (
	// ErrInFlight: a request with this key is still running; retry after RetryAfterInFlight.
	ErrInFlight = problem.New(problem.InFlight, "a request with this idempotency key is still in flight",
		"A request with this Idempotency-Key is still being processed; retry after it completes.")
	// ErrKeyReused: the key was used with a different request.
	ErrKeyReused = problem.New(problem.IdempotencyKeyReused, "the idempotency key was used with a different request",
		"This Idempotency-Key was used with a different request (method, path or body); send a new key for a new request.")
	// ErrUnavailable: the key could not be claimed or read; nothing ran.
	ErrUnavailable = problem.New(problem.Unavailable, "the idempotency store is unavailable",
		"The Idempotency-Key could not be checked, so nothing was done; retry it.")
)

// InvalidKey refuses an Idempotency-Key header for reason.
func InvalidKey(reason string) error {
	return problem.Input("invalid Idempotency-Key: " + reason + ".")
}

// ValidateKey accepts 1 to MaxKeyLength printable ASCII characters (space to tilde) but the
// comma, which is what an HTTP header carries unchanged through every proxy. A comma is refused
// because HTTP joins a header sent twice with commas (API Gateway's payload v2 does), so a key
// holding one cannot be told from two keys.
func ValidateKey(key string) error {
	if key == "" {
		return InvalidKey("it is empty")
	}
	if len(key) > MaxKeyLength {
		return InvalidKey(fmt.Sprintf("it is %d characters; the limit is %d", len(key), MaxKeyLength))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return InvalidKey("it must contain printable ASCII characters only")
		}
		if key[i] == ',' {
			return InvalidKey("it must not contain a comma")
		}
	}
	return nil
}

// Fingerprint identifies a request for comparing repeats: method, path, query and body. A JSON
// body is re-encoded canonically first (object members sorted, insignificant whitespace removed,
// numbers as written), so a client that re-serialises the same document is not refused.
// headers are the header fields that carry the request's content, as "name: value" lines in
// a fixed order (a binary-mode CloudEvent's ce-* attributes and Content-Type); a request
// without them fingerprints as before.
func Fingerprint(method, path, rawQuery string, body []byte, headers ...string) string {
	h := sha256.New()
	writeField(h, "ferry-idempotency-fingerprint-v1")
	writeField(h, method)
	writeField(h, path)
	writeField(h, rawQuery)
	writeField(h, string(canonicalBody(body)))
	for _, line := range headers {
		writeField(h, line)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// canonicalBody re-encodes a JSON body canonically; anything else — a body the strict decoder
// refuses included — is used as it is, so that no two different bodies are ever taken for one.
func canonicalBody(body []byte) []byte {
	if jsonbody.Check(body) != nil {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return body
	}
	// encoding/json writes map keys sorted and json.Number as its literal.
	canonical, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return canonical
}

// writeField writes a length-prefixed field, so that no two field lists hash alike.
func writeField(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// State is where a record is in its life.
type State string

// States.
const (
	// InFlight: claimed; the owner is running the request.
	InFlight State = "IN_FLIGHT"
	// Completed: the answer is stored and is replayed to repeats.
	Completed State = "COMPLETED"
)

// Response is an answer as it is replayed: status, the headers that matter, and the exact body.
type Response struct {
	Status int
	Header map[string]string
	Body   []byte
}

// Record is the stored claim of one key.
type Record struct {
	// ID addresses the record: a hash of (scope, route, key).
	ID string
	// Scope is the caller ("operator", "account:<id>") and Route the route template
	// ("POST /v1/events"); both are kept readable for operators.
	Scope string
	Route string
	// Fingerprint of the request that claimed the key.
	Fingerprint string
	State       State
	// Token identifies one claim: the owner completes or releases only its own claim.
	Token            string
	ClaimedAtMs      int64
	LeaseExpiresAtMs int64
	// ExpiresAt (epoch seconds) ends the retention; DynamoDB's TTL deletes the record some time
	// after it, and until then it reads as absent.
	ExpiresAt     int64
	CompletedAtMs int64
	// Status, Header and SealedBody are the stored answer (Completed only).
	Status     int
	Header     map[string]string
	SealedBody []byte
}

// Decision is what to do with a request whose key already has a record.
type Decision int

// Decisions.
const (
	// Run: no record; the request may claim the key and run.
	Run Decision = iota + 1
	// Replay: the answer is stored; send it again and run nothing.
	Replay
	// Wait: the first request is still running; the repeat must retry later (409).
	Wait
	// Mismatch: the key belongs to a different request (422).
	Mismatch
	// TakeOver: the record is expired (its owner died, or its retention passed); the request
	// may replace it with its own claim and run.
	TakeOver
)

func (d Decision) String() string {
	switch d {
	case Run:
		return "run"
	case Replay:
		return "replay"
	case Wait:
		return "wait"
	case Mismatch:
		return "mismatch"
	case TakeOver:
		return "take-over"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Decide is the whole contract for a request that meets a stored record (nil: none). Past its
// retention a record no longer exists for anyone. Otherwise the key belongs to the request that
// claimed it: a different request is refused even while the claim is expired, because the
// first request's retry must still find its key. A completed record is replayed; a claim is
// waited for until its lease ends, and then taken over.
func Decide(current *Record, fingerprint string, now time.Time) Decision {
	switch {
	case current == nil:
		return Run
	case now.Unix() >= current.ExpiresAt:
		return TakeOver
	case current.Fingerprint != fingerprint:
		return Mismatch
	case current.State == Completed:
		return Replay
	case now.UnixMilli() < current.LeaseExpiresAtMs:
		return Wait
	default:
		return TakeOver
	}
}

// Retain reports whether an answer is stored for replay. A 5xx means the work did not happen (or
// not all of it): the claim is released so a retry runs. A 429 asks the client to come back
// later, so it is not an answer to the request either. Every other answer, a 4xx included, is
// the request's answer and is replayed.
func Retain(status int) bool {
	return status < http.StatusInternalServerError && status != http.StatusTooManyRequests
}
