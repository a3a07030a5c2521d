package webhook_test

import (
	"testing"

	kindewebhook "github.com/ferrymeter/ferry/internal/provider/kinde/webhook"
	"github.com/ferrymeter/ferry/internal/provider/providertest"
)

// Every Kinde fixture reads as its golden line says: the reader finds each field wherever a
// delivery has been seen to carry it.
func TestRead_Fixtures(t *testing.T) {
	providertest.ReadFixtures(t, "kinde", kindewebhook.Read)
}
