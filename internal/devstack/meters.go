package devstack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/plans"
	"github.com/ferrymeter/ferry/internal/provider/kinde"
	kindestandin "github.com/ferrymeter/ferry/internal/provider/kinde/standin"
	"github.com/ferrymeter/ferry/internal/provider/stripe"
	stripestandin "github.com/ferrymeter/ferry/internal/provider/stripe/standin"
	"github.com/ferrymeter/ferry/internal/resources"
)

// The API key of the Stripe stand-in ferry dev starts when no provider is configured. It is not
// a secret: the stand-in listens on loopback only.
const standInStripeKey = "sk_test_ferry_dev"

// Paths under which ferry dev also serves the meter stand-ins on its own address, so that a
// lab given only --url can steer them (faults, drift) and read them.
const (
	KindeStandInPath  = "/standin/kinde"
	StripeStandInPath = "/standin/stripe"
)

// MeterStandIns are the provider stand-ins ferry dev runs for reporting.
type MeterStandIns struct {
	Kinde  *kindestandin.Server
	Stripe *stripestandin.Server
	URLs   []string
}

// MetersFromEnv returns where ferry dev reports usage: the providers the environment configures
// (FERRY_REPORT_KINDE, FERRY_STRIPE_API_KEY…), or, when it configures none, a Kinde and a
// Stripe stand-in on loopback for the life of the process, each speaking its provider's
// documented wire format (nil stand-ins when the environment configures a provider).
func MetersFromEnv(ctx context.Context, catalog plans.Catalog) (app.MetersConfig, *MeterStandIns, error) {
	if os.Getenv(resources.EnvReportKinde) != "" || os.Getenv(resources.EnvStripeAPIKey) != "" ||
		os.Getenv(resources.EnvStripeAPIBase) != "" || os.Getenv(resources.EnvStripeAPIKeySecretARN) != "" {
		cfg, err := app.MetersConfigFromEnv(ctx)
		return cfg, nil, err
	}
	s := &MeterStandIns{Kinde: kindestandin.New(standInClientID, standInClientSecret)}
	meters := map[string]string{}
	for _, f := range catalog.Features() {
		if d := catalog.Definition(f); d.Stripe != nil {
			meters[d.Stripe.MeterID] = d.Stripe.MeterEventName
		}
	}
	s.Stripe = stripestandin.New(standInStripeKey, meters)
	kindeURL, err := serveLoopback(s.Kinde)
	if err != nil {
		return app.MetersConfig{}, nil, err
	}
	stripeURL, err := serveLoopback(s.Stripe)
	if err != nil {
		return app.MetersConfig{}, nil, err
	}
	s.URLs = []string{"Kinde " + kindeURL, "Stripe " + stripeURL}
	return app.MetersConfig{
		Kinde:  &kinde.Config{Domain: kindeURL, ClientID: standInClientID, ClientSecret: standInClientSecret},
		Stripe: &stripe.Config{APIKey: standInStripeKey, APIBase: stripeURL},
	}, s, nil
}

// Mount serves the stand-ins on the stack's own address too.
func (m *MeterStandIns) Mount(s *Stack) {
	if m == nil {
		return
	}
	s.Routes.Handle(KindeStandInPath+"/", http.StripPrefix(KindeStandInPath, m.Kinde))
	s.Routes.Handle(StripeStandInPath+"/", http.StripPrefix(StripeStandInPath, m.Stripe))
}

// serveLoopback serves h on a free loopback port for the life of the process.
func serveLoopback(h http.Handler) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("start a stand-in: %w", err)
	}
	srv := NewServer(h)
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), nil
}

// CatalogFromEnv is the catalog ferry dev runs: FERRY_PLANS when set, as the functions read it.
func CatalogFromEnv() (plans.Catalog, error) {
	raw := os.Getenv(resources.EnvPlans)
	if raw == "" {
		return plans.Default(), nil
	}
	c, err := plans.Parse([]byte(raw))
	if err != nil {
		return plans.Catalog{}, fmt.Errorf("%s: %w", resources.EnvPlans, err)
	}
	return c, nil
}
