package ferry

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
)

// lowerBase32 spells ids in lower-case RFC 4648 base32 without padding.
var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewEventID mints an event id: "evt_" and 128 random bits. The Client and the Batcher mint one
// for an event without an id, once; a caller that retries on its own should mint it first and
// keep it.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it aborts the program instead).
	return "evt_" + lowerBase32.EncodeToString(b[:])
}

// newIdempotencyKey mints a random UUID (version 4) for one logical mutating call.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
