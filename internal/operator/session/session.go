// Package session keeps the operator console's sessions. Signing in exchanges the operator key
// for a session: a random token, sent back only as an HttpOnly cookie, and a CSRF token that the
// page keeps in memory and sends with every request that changes something. The store keeps the
// SHA-256 of the session token, never the token (nor the operator key), with an absolute expiry
// the code checks on every read; signing out deletes the item, so a copied cookie stops working
// at once in every container.
package session

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Limits of a session.
const (
	// Lifetime is how long a session lasts from sign-in, whatever it does meanwhile: short, since
	// it carries the operator's every right.
	Lifetime = time.Hour
	// tokenBytes is the entropy of a session token and of a CSRF token.
	tokenBytes = 32
	// tokenPrefix marks a session token, so that one is never mistaken for an API key in a log.
	tokenPrefix = "fs_"
)

// Cookie names. A secure cookie takes the __Host- prefix: the browser then accepts it only from
// this host, over HTTPS, with Path=/ and no Domain, so no other host can set or shadow it. On a
// loopback http:// stack (ferry dev) the browser would drop a Secure cookie, so it is sent
// without Secure and without the prefix.
const (
	SecureCookieName   = "__Host-ferry-session"
	LoopbackCookieName = "ferry-session"
)

// HeaderCSRF carries the session's CSRF token on every request that changes something.
const HeaderCSRF = "X-CSRF-Token"

// Session is one signed-in console session, as the store keeps it.
type Session struct {
	// Hash is the hex SHA-256 of the session token: the store's key.
	Hash string
	// CSRF is the token every state-changing request of the session must carry.
	CSRF        string
	CreatedAtMs int64
	ExpiresAtMs int64
}

// Expired reports whether the session has ended by nowMs.
func (s Session) Expired(nowMs int64) bool { return nowMs >= s.ExpiresAtMs }

// CSRFMatches reports, in constant time, whether token is the session's CSRF token.
func (s Session) CSRFMatches(token string) bool {
	return s.CSRF != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.CSRF)) == 1
}

// Store keeps sessions by the hash of their token.
type Store interface {
	// Put stores a new session; a hash already stored is an error (it never happens with 256
	// random bits, and must not silently replace a session).
	Put(ctx context.Context, s Session) error
	// Get reads a session, strongly consistent; ErrNoSession when there is none.
	Get(ctx context.Context, hash string) (Session, error)
	// Delete removes a session; deleting one that is gone is not an error.
	Delete(ctx context.Context, hash string) error
}

// ErrNoSession: the token names no live session (never issued, signed out, or expired).
var ErrNoSession = problem.New(problem.Unauthenticated, "no such console session",
	"The console session has ended (signed out or expired): sign in again with the operator key.")

// Service creates, checks and ends sessions.
type Service struct {
	Store Store
	Now   func() time.Time
	// Lifetime overrides Lifetime (tests).
	Lifetime time.Duration
}

// Create starts a session and returns its token (for the cookie alone) and the session.
func (s *Service) Create(ctx context.Context) (string, Session, error) {
	token, err := random()
	if err != nil {
		return "", Session{}, err
	}
	token = tokenPrefix + token
	csrf, err := random()
	if err != nil {
		return "", Session{}, err
	}
	now := s.Now().UnixMilli()
	life := s.Lifetime
	if life == 0 {
		life = Lifetime
	}
	sess := Session{Hash: Hash(token), CSRF: csrf, CreatedAtMs: now, ExpiresAtMs: now + life.Milliseconds()}
	if err := s.Store.Put(ctx, sess); err != nil {
		return "", Session{}, fmt.Errorf("store the session: %w", err)
	}
	return token, sess, nil
}

// Verify returns the live session a token names, or ErrNoSession. A token that does not have the
// shape Create gives is refused before anything is read.
func (s *Service) Verify(ctx context.Context, token string) (Session, error) {
	if !ValidToken(token) {
		return Session{}, ErrNoSession
	}
	sess, err := s.Store.Get(ctx, Hash(token))
	if err != nil {
		return Session{}, err
	}
	// The table's TTL deletes an expired item eventually, hours later perhaps: the expiry is
	// the session's own, checked here.
	if sess.Expired(s.Now().UnixMilli()) {
		return Session{}, ErrNoSession
	}
	return sess, nil
}

// End deletes the session a token names.
func (s *Service) End(ctx context.Context, token string) error {
	if !ValidToken(token) {
		return nil
	}
	return s.Store.Delete(ctx, Hash(token))
}

// Hash is the store's key of a token: its SHA-256, in hex.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ValidToken reports whether token has the shape of a session token.
func ValidToken(token string) bool {
	raw, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	return err == nil && len(b) == tokenBytes
}

func random() (string, error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Cookie is how a session's token travels: HttpOnly (no script reads it), SameSite=Strict (no
// other site's page sends it), Path=/ (the console's pages and the API it calls), for as long as
// the session lasts; Secure, under the __Host- prefix, unless the stack serves loopback http.
type Cookie struct {
	// Insecure drops Secure and the __Host- prefix: only for a stack on a loopback address.
	Insecure bool
}

// Name is the cookie's name.
func (c Cookie) Name() string {
	if c.Insecure {
		return LoopbackCookieName
	}
	return SecureCookieName
}

// For is the cookie that carries a session's token.
func (c Cookie) For(token string, sess Session, now time.Time) *http.Cookie {
	maxAge := int(time.Duration(sess.ExpiresAtMs-now.UnixMilli()) * time.Millisecond / time.Second)
	return &http.Cookie{
		Name: c.Name(), Value: token, Path: "/", MaxAge: max(maxAge, 1),
		HttpOnly: true, Secure: !c.Insecure, SameSite: http.SameSiteStrictMode,
	}
}

// Cleared is the cookie that makes the browser drop the session's cookie.
func (c Cookie) Cleared() *http.Cookie {
	return &http.Cookie{
		Name: c.Name(), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: !c.Insecure, SameSite: http.SameSiteStrictMode,
	}
}

// Token reads the session token from a request's cookie; ok is false when there is none.
func (c Cookie) Token(r *http.Request) (string, bool) {
	ck, err := r.Cookie(c.Name())
	if err != nil || ck.Value == "" {
		return "", false
	}
	return ck.Value, true
}

// IsNoSession reports whether err says the token names no live session.
func IsNoSession(err error) bool { return errors.Is(err, ErrNoSession) }
