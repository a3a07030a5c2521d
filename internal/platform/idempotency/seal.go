package idempotency

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// Labels that keep the record address and the sealing key apart: both are derived from the
// client's key, and knowing one must not give the other.
const (
	recordIDLabel = "ferry-idempotency-record-v1"
	sealKeyLabel  = "ferry-idempotency-answer-v1"
	sealKeyBytes  = 32 // AES-256
)

// RecordID addresses the record of (scope, route, key). It is a hash, so the table never holds
// the client's key, which is also what seals the stored answer.
func RecordID(scope, route, key string) string {
	h := sha256.New()
	writeField(h, recordIDLabel)
	writeField(h, scope)
	writeField(h, route)
	writeField(h, key)
	return hex.EncodeToString(h.Sum(nil))
}

// sealer encrypts and decrypts one record's stored answer.
type sealer struct {
	aead     cipher.AEAD
	recordID string
}

func newSealer(scope, route, key string) (sealer, error) {
	info := sealKeyLabel + "\x00" + scope + "\x00" + route
	k, err := hkdf.Key(sha256.New, []byte(key), nil, info, sealKeyBytes)
	if err != nil {
		return sealer{}, fmt.Errorf("derive the answer key: %w", err)
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return sealer{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return sealer{}, err
	}
	return sealer{aead: aead, recordID: RecordID(scope, route, key)}, nil
}

// seal encrypts body as nonce || ciphertext, bound to the record it is stored in.
func (s sealer) seal(body []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(body)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, body, []byte(s.recordID)), nil
}

// errSealBroken: a stored answer does not decrypt (corrupted, or moved to another record).
var errSealBroken = errors.New("the stored answer does not decrypt")

func (s sealer) open(sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return nil, errSealBroken
	}
	body, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(s.recordID))
	if err != nil {
		return nil, errSealBroken
	}
	return body, nil
}
