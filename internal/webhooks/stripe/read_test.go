package stripe_test

import (
	"testing"

	"github.com/ferrymeter/ferry/internal/devkit/providertest"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// Every Stripe fixture reads as its golden line says: the reader finds each field wherever a
// delivery has been seen to carry it.
func TestRead_Fixtures(t *testing.T) {
	providertest.ReadFixtures(t, "stripe", stripewebhook.Read)
}
