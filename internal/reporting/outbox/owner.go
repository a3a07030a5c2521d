package outbox

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// ownerRandomBytes is the randomness in the name of a process that was given none: 48 bits, so
// that two containers running at once do not pick one name.
const ownerRandomBytes = 6

// LeaseOwner names a process in the leases it takes: the drainer in an outbox row's claim, the
// reporter and the reconciler in a cycle's report lease (package report). It sits here, beside
// the row claim, because every reporting package that takes a lease imports this one, while
// package report, which holds the cycle lease, imports outbox and so cannot be imported by it.
// The zero value is ready to use.
type LeaseOwner struct {
	once sync.Once
	name string
}

// Name is the owner's name: given when it is not empty, otherwise role and random hex digits
// ("drainer-3f9a0c…"). It is fixed at the first call, so every lease one process takes carries
// the same name.
func (o *LeaseOwner) Name(given, role string) string {
	o.once.Do(func() {
		o.name = given
		if o.name == "" {
			var b [ownerRandomBytes]byte
			_, _ = rand.Read(b[:])
			o.name = role + "-" + hex.EncodeToString(b[:])
		}
	})
	return o.name
}
