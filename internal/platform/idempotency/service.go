package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// Store errors. The adapter translates DynamoDB's conditional-check failures into these.
var (
	// ErrClaimed: the claim was not written because a record exists (or, for a takeover, the
	// record is no longer the one that was read).
	ErrClaimed = errors.New("the idempotency key is already claimed")
	// ErrClaimLost: the claim being completed or released is no longer this owner's (its lease
	// expired and another request took it over).
	ErrClaimLost = errors.New("the idempotency claim was lost")
	// ErrNotFound: no record.
	ErrNotFound = errors.New("no idempotency record")
)

// Store keeps records. Every write is conditional; none is decided by a read.
type Store interface {
	// Claim inserts rec if no record has its ID (ErrClaimed otherwise).
	Claim(ctx context.Context, rec Record) error
	// TakeOver replaces old by rec if old is still stored unchanged and still expired at
	// rec's claim time (ErrClaimed otherwise).
	TakeOver(ctx context.Context, old, rec Record) error
	// Get reads a record, strongly consistent (ErrNotFound if none).
	Get(ctx context.Context, id string) (Record, error)
	// Complete stores the answer in rec's claim if it is still in flight under rec.Token
	// (ErrClaimLost otherwise).
	Complete(ctx context.Context, rec Record) error
	// Release deletes rec's claim if it is still in flight under rec.Token (ErrClaimLost
	// otherwise).
	Release(ctx context.Context, rec Record) error
}

// maxClaimAttempts bounds the claim loop. Each lap means another request changed the record
// between our write and our read (a release, a takeover); two laps are already rare, and none
// waits: the next lap acts on what the last read found.
const maxClaimAttempts = 4

// Service runs the contract over a Store.
type Service struct {
	Store Store
	// Now is the clock; it is read once per claim attempt and once per completion.
	Now func() time.Time
}

// Request is one keyed request.
type Request struct {
	Scope       string
	Route       string
	Key         string
	Fingerprint string
	// Retention is how long the route keeps its answers for replay (its entry in the route
	// table); zero means DefaultRetention.
	Retention time.Duration
}

// retention is how long the request's answer is kept.
func (r Request) retention() time.Duration {
	if r.Retention > 0 {
		return r.Retention
	}
	return DefaultRetention
}

// Outcome is what Begin decided. For Run, Claim must be finished with Finish; for Replay,
// Response is the stored answer. Wait and Mismatch come back as ErrInFlight and ErrKeyReused.
type Outcome struct {
	Decision Decision
	Response Response
	Claim    *Claim
}

// Claim is a won claim of a key.
type Claim struct {
	record    Record
	sealer    sealer
	retention time.Duration
}

// Begin claims the request's key, or says why the request must not run. The claim is the first
// write: until it has succeeded nothing else may happen.
func (s *Service) Begin(ctx context.Context, req Request) (Outcome, error) {
	seal, err := newSealer(req.Scope, req.Route, req.Key)
	if err != nil {
		return Outcome{}, err
	}
	id := RecordID(req.Scope, req.Route, req.Key)
	var expired *Record // the record to take over; nil: insert
	out, err := retry.Do(ctx, retry.Contended.WithTries(maxClaimAttempts), func(ctx context.Context, _ retry.Lap) (Outcome, error) {
		now := s.Now()
		token, err := newToken()
		if err != nil {
			return Outcome{}, err
		}
		claim := Record{
			ID: id, Scope: req.Scope, Route: req.Route, Fingerprint: req.Fingerprint, State: InFlight,
			Token: token, ClaimedAtMs: now.UnixMilli(), LeaseExpiresAtMs: now.Add(Lease).UnixMilli(),
			ExpiresAt: expiresAt(now, req.retention()),
		}
		if expired == nil {
			err = s.Store.Claim(ctx, claim)
		} else {
			err = s.Store.TakeOver(ctx, *expired, claim)
		}
		if err == nil {
			return Outcome{Decision: Run, Claim: &Claim{record: claim, sealer: seal, retention: req.retention()}}, nil
		}
		if !errors.Is(err, ErrClaimed) {
			return Outcome{}, fmt.Errorf("%w: claim: %v", ErrUnavailable, err)
		}
		current, err := s.Store.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			expired = nil // released since our write: claim afresh, at once
			return Outcome{}, retry.Reread(err)
		}
		if err != nil {
			return Outcome{}, fmt.Errorf("%w: read: %v", ErrUnavailable, err)
		}
		switch d := Decide(&current, req.Fingerprint, now); d {
		case Replay:
			body, err := seal.open(current.SealedBody)
			if err != nil {
				return Outcome{}, fmt.Errorf("replay record %s: %w", id, err)
			}
			return Outcome{Decision: Replay, Response: Response{Status: current.Status, Header: current.Header, Body: body}}, nil
		case Wait:
			return Outcome{Decision: Wait}, ErrInFlight
		case Mismatch:
			return Outcome{Decision: Mismatch}, ErrKeyReused
		case TakeOver:
			expired = &current // take the expired record over, at once
			return Outcome{}, retry.Reread(errExpired)
		default:
			return Outcome{}, fmt.Errorf("idempotency: decision %s for a stored record", d) // a programmer error
		}
	})
	if errors.Is(err, retry.ErrExhausted) {
		return Outcome{}, fmt.Errorf("%w: the record of this key kept changing under %d attempts", ErrUnavailable, maxClaimAttempts)
	}
	return out, err
}

// errExpired is a claim that met an expired record, which the next lap takes over.
var errExpired = errors.New("the key's record is expired")

// Finish ends a claim with the request's answer: an answer Retain keeps is stored for replay;
// any other releases the key so a retry runs. It reports whether the answer was stored. An error
// leaves the claim in flight until its lease ends; the answer itself is still good to send.
func (s *Service) Finish(ctx context.Context, c *Claim, resp Response) (bool, error) {
	if !Retain(resp.Status) || len(resp.Body) > MaxStoredBodyBytes {
		if err := s.Store.Release(ctx, c.record); err != nil {
			return false, fmt.Errorf("release record %s: %w", c.record.ID, err)
		}
		return false, nil
	}
	sealed, err := c.sealer.seal(resp.Body)
	if err != nil {
		return false, err
	}
	now := s.Now()
	rec := c.record
	rec.State = Completed
	rec.CompletedAtMs = now.UnixMilli()
	rec.ExpiresAt = expiresAt(now, c.retention)
	rec.Status, rec.Header, rec.SealedBody = resp.Status, resp.Header, sealed
	if err := s.Store.Complete(ctx, rec); err != nil {
		return false, fmt.Errorf("complete record %s: %w", rec.ID, err)
	}
	return true, nil
}

// expiresAt is the end of a retention in epoch seconds, rounded up so a record never expires
// early.
func expiresAt(now time.Time, retention time.Duration) int64 {
	end := now.Add(retention)
	sec := end.Unix()
	if end.Nanosecond() > 0 {
		sec++
	}
	return sec
}

// newToken names one claim.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("claim token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
