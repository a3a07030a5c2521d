package devstack

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	kindestandin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	stripestandin "github.com/ferrymeter/ferry/internal/devkit/standin/stripe"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
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

// ProviderStandIns are the settings ferry dev gives its functions for the providers: env (the
// process's FERRY_* variables), and, for what env configures none of, stand-ins on loopback for
// the life of the process, each speaking its provider's documented wire format. Without
// FERRY_KINDE_DOMAIN one Kinde stand-in serves both the entitlements (when FERRY_LIMITS_SOURCE=kinde:
// every customer is granted the default plan's limits; steer it with PUT /standin/mode
// {"mode": "ok"|"fail"|"ratelimit"} and PUT /standin/entitlements/{customer}) and the meters;
// without any reporting setting (FERRY_REPORT_KINDE, FERRY_STRIPE_API_KEY…) usage is reported to
// that Kinde stand-in and to a Stripe one. The stand-ins are nil when env configures the
// providers.
func ProviderStandIns(env compose.Settings, catalog plans.Catalog, log *slog.Logger) (compose.Settings, *MeterStandIns, error) {
	out := env.With(nil)
	reports := env.Get(resources.EnvReportKinde) != "" || env.Get(resources.EnvStripeAPIKey) != "" ||
		env.Get(resources.EnvStripeAPIBase) != "" || env.Get(resources.EnvStripeAPIKeySecretARN) != ""
	kindeLimits := env.Get(resources.EnvLimitsSource) == limits.SourceKinde
	if env.Get(resources.EnvKindeDomain) != "" || (reports && !kindeLimits) {
		return out, nil, nil
	}
	s := &MeterStandIns{Kinde: kindestandin.New(standInClientID, standInClientSecret)}
	kindeURL, err := serveLoopback(s.Kinde)
	if err != nil {
		return nil, nil, err
	}
	out[resources.EnvKindeDomain] = kindeURL
	out[resources.EnvKindeClientID] = standInClientID
	out[resources.EnvKindeClientSecret] = standInClientSecret
	s.URLs = append(s.URLs, "Kinde "+kindeURL)
	if kindeLimits {
		grantDefaultPlan(s.Kinde, catalog)
		log.Info("Kinde stand-in serving entitlements", "url", kindeURL, "fail", "curl -X PUT "+kindeURL+`/standin/mode -d '{"mode":"fail"}'`)
	}
	if !reports {
		meters := map[string]string{}
		for _, f := range catalog.Features() {
			if d := catalog.Definition(f); d.Stripe != nil {
				meters[d.Stripe.MeterID] = d.Stripe.MeterEventName
			}
		}
		s.Stripe = stripestandin.New(standInStripeKey, meters)
		stripeURL, err := serveLoopback(s.Stripe)
		if err != nil {
			return nil, nil, err
		}
		out[resources.EnvReportKinde] = "true"
		out[resources.EnvStripeAPIKey] = standInStripeKey
		out[resources.EnvStripeAPIBase] = stripeURL
		s.URLs = append(s.URLs, "Stripe "+stripeURL)
	}
	return out, s, nil
}

// Mount serves the stand-ins on the stack's own address too.
func (m *MeterStandIns) Mount(s *Stack) {
	if m == nil {
		return
	}
	s.Routes.Handle(KindeStandInPath+"/", http.StripPrefix(KindeStandInPath, m.Kinde))
	if m.Stripe != nil {
		s.Routes.Handle(StripeStandInPath+"/", http.StripPrefix(StripeStandInPath, m.Stripe))
	}
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
