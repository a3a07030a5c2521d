// Package signer is a stand-in for Kinde's webhook signing: an RSA key pair whose public half it
// publishes as a JWKS (GET /.well-known/jwks, the path Kinde uses) and whose private half signs
// webhook tokens as Kinde does (RS256, a kid header, Content-Type application/jwt). ferry dev
// starts one on loopback when no FERRY_KINDE_WEBHOOK_JWKS_URL is configured; `ferry webhooks
// send kinde` and the tests sign through it. It signs whatever it is given, so it must never
// listen beyond loopback.
package kindesigner

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/ferrymeter/ferry/internal/operator/deliver"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// keyBits is the RSA key size (Kinde's keys are 2048-bit RSA).
const keyBits = 2048

// maxSignBytes bounds a claims document POSTed to /sign.
const maxSignBytes = 256 << 10

// JWKSPath is where the keys are published, as on a Kinde business domain.
const JWKSPath = "/.well-known/jwks"

// SignPath signs the claims POSTed to it and answers the token (application/jwt): the path the
// sending tools post to (deliver.SignPath).
const SignPath = deliver.SignPath

// Signer holds the signing keys. Rotate adds a key; only the newest signs, and all are
// published unless a test withholds one.
type Signer struct {
	mu      sync.Mutex
	keys    []key
	fetches int
}

// Fetches counts the JWKS documents served.
func (s *Signer) Fetches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

type key struct {
	kid       string
	private   *rsa.PrivateKey
	published bool
}

// New returns a signer with one fresh key.
func New() (*Signer, error) {
	s := &Signer{}
	if _, err := s.Rotate(true); err != nil {
		return nil, err
	}
	return s, nil
}

// Rotate makes a fresh key the signing key and returns its kid. An unpublished key signs but is
// not in the JWKS (until Publish), as a key Kinde just rotated to looks to a cached verifier.
func (s *Signer) Rotate(published bool) (string, error) {
	private, err := rsa.GenerateKey(rand.Reader, keyBits)
	if err != nil {
		return "", fmt.Errorf("generate a signing key: %w", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	kid := "ferry-dev-" + hex.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, key{kid: kid, private: private, published: published})
	return kid, nil
}

// Publish adds every key to the JWKS.
func (s *Signer) Publish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.keys {
		s.keys[i].published = true
	}
}

// KeyID is the signing key's kid.
func (s *Signer) KeyID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[len(s.keys)-1].kid
}

// PrivateKey is the signing key (tests forge tokens with it: other algorithms, HMAC with the
// public key, and so on).
func (s *Signer) PrivateKey() *rsa.PrivateKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[len(s.keys)-1].private
}

// JWKS is the published key set.
func (s *Signer) JWKS() ([]byte, error) {
	s.mu.Lock()
	keys := append([]key(nil), s.keys...)
	s.mu.Unlock()
	set := jwkset.NewMemoryStorage()
	for _, k := range keys {
		if !k.published {
			continue
		}
		jwk, err := jwkset.NewJWKFromKey(&k.private.PublicKey, jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: k.kid, ALG: jwkset.AlgRS256, USE: jwkset.UseSig},
		})
		if err != nil {
			return nil, fmt.Errorf("publish key %s: %w", k.kid, err)
		}
		if err := set.KeyWrite(context.Background(), jwk); err != nil {
			return nil, err
		}
	}
	return set.JSONPublic(context.Background())
}

// Sign signs claims as a Kinde webhook token: RS256 with the signing key's kid.
func (s *Signer) Sign(claims map[string]any) (string, error) {
	s.mu.Lock()
	k := s.keys[len(s.keys)-1]
	s.mu.Unlock()
	token := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims(claims))
	token.Header["kid"] = k.kid
	return token.SignedString(k.private)
}

// Handler serves GET /.well-known/jwks and POST /sign.
func (s *Signer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+JWKSPath, func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		s.fetches++
		s.mu.Unlock()
		body, err := s.JWKS()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("POST "+SignPath, func(w http.ResponseWriter, r *http.Request) {
		var claims map[string]any
		body, err := io.ReadAll(io.LimitReader(r.Body, maxSignBytes+1))
		if err != nil || len(body) > maxSignBytes || json.Unmarshal(body, &claims) != nil || claims == nil {
			http.Error(w, "POST a JSON object of claims (at most 256 KiB)", http.StatusBadRequest)
			return
		}
		token, err := s.Sign(claims)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/jwt")
		_, _ = io.WriteString(w, token)
	})
	return mux
}
