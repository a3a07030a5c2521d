package apptest

import (
	"net/http/httptest"
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/app"
	kindestandin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	stripestandin "github.com/ferrymeter/ferry/internal/devkit/standin/stripe"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
	"github.com/ferrymeter/ferry/internal/platform/stripe"
)

// Credentials of the stand-ins a harness reports to.
const (
	StandInKindeClientID     = "ferry-test"
	StandInKindeClientSecret = "ferry-test-secret"
	StandInStripeKey         = "sk_test_ferry"
)

// StandIns are a Kinde and a Stripe stand-in served for one test.
type StandIns struct {
	Kinde  *kindestandin.Server
	Stripe *stripestandin.Server
	Meters app.MetersConfig
}

// NewStandIns serves a Kinde and a Stripe stand-in (knowing the catalog's Stripe meters) for
// the life of the test, and the configuration that reports to them.
func NewStandIns(t testing.TB, catalog plans.Catalog) *StandIns {
	t.Helper()
	s := &StandIns{Kinde: kindestandin.New(StandInKindeClientID, StandInKindeClientSecret)}
	meters := map[string]string{}
	for _, f := range catalog.Features() {
		if d := catalog.Definition(f); d.Stripe != nil {
			meters[d.Stripe.MeterID] = d.Stripe.MeterEventName
		}
	}
	s.Stripe = stripestandin.New(StandInStripeKey, meters)
	ks, ss := httptest.NewServer(s.Kinde), httptest.NewServer(s.Stripe)
	t.Cleanup(ks.Close)
	t.Cleanup(ss.Close)
	s.Meters = app.MetersConfig{
		Kinde:  &kinde.Config{Domain: ks.URL, ClientID: StandInKindeClientID, ClientSecret: StandInKindeClientSecret},
		Stripe: &stripe.Config{APIKey: StandInStripeKey, APIBase: ss.URL},
	}
	return s
}
