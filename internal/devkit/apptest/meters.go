package apptest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	kindestandin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	stripestandin "github.com/ferrymeter/ferry/internal/devkit/standin/stripe"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
	"github.com/ferrymeter/ferry/internal/platform/resources"
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
	// Settings report usage to them.
	Settings compose.Settings
}

// NewStandIns serves a Kinde and a Stripe stand-in (knowing the catalog's Stripe meters) for
// the life of the test, and the configuration that reports to them.
func NewStandIns(t testing.TB, catalog plans.Catalog) *StandIns {
	t.Helper()
	s := &StandIns{Kinde: kindestandin.New(StandInKindeClientID, StandInKindeClientSecret)}
	s.Stripe = stripestandin.New(StandInStripeKey, stripestandin.Meters(catalog))
	ks, ss := httptest.NewServer(s.Kinde), httptest.NewServer(s.Stripe)
	t.Cleanup(ks.Close)
	t.Cleanup(ss.Close)
	s.Settings = compose.Settings{
		resources.EnvReportKinde: "true", resources.EnvKindeDomain: ks.URL,
		resources.EnvKindeClientID: StandInKindeClientID, resources.EnvKindeClientSecret: StandInKindeClientSecret,
		resources.EnvStripeAPIKey: StandInStripeKey, resources.EnvStripeAPIBase: ss.URL,
	}
	return s
}

// KindeClient is a Kinde client of the stand-in's over hc (a test's own timeout, say).
func (s *StandIns) KindeClient(t testing.TB, hc *http.Client) *kinde.Client {
	t.Helper()
	client, err := kinde.New(kinde.Config{
		Domain: s.Settings.Get(resources.EnvKindeDomain), ClientID: StandInKindeClientID,
		ClientSecret: StandInKindeClientSecret, HTTPClient: hc,
	})
	if err != nil {
		t.Fatal(err)
	}
	return client
}
