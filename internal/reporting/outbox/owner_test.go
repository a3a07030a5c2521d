package outbox

import (
	"regexp"
	"testing"
)

func TestLeaseOwner_KeepsTheGivenName(t *testing.T) {
	var o LeaseOwner
	if got := o.Name("drainer-two", "drainer"); got != "drainer-two" {
		t.Errorf("Name = %q, want the given name", got)
	}
}

// A process that was given no name picks one at its first lease and keeps it for every lease
// after; two processes pick two names.
func TestLeaseOwner_PicksOneRandomNamePerProcess(t *testing.T) {
	var a, b LeaseOwner
	first := a.Name("", "reporter")
	if !regexp.MustCompile(`^reporter-[0-9a-f]{12}$`).MatchString(first) {
		t.Fatalf("Name = %q, want reporter- and 12 hex digits", first)
	}
	if again := a.Name("", "reporter"); again != first {
		t.Errorf("second Name = %q, want the first one %q", again, first)
	}
	if other := b.Name("", "reporter"); other == first {
		t.Errorf("two owners both named %q", other)
	}
}
