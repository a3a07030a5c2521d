package kinde_test

import (
	"testing"

	"github.com/ferrymeter/ferry/internal/devkit/providertest"
	kindewebhook "github.com/ferrymeter/ferry/internal/webhooks/kinde"
)

// Every Kinde fixture reads as its golden line says: the reader finds each field wherever a
// delivery has been seen to carry it.
func TestRead_Fixtures(t *testing.T) {
	providertest.ReadFixtures(t, "kinde", kindewebhook.Read)
}
