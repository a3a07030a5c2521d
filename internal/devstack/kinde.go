package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/limits"
	"github.com/ferrymeter/ferry/internal/plans"
	"github.com/ferrymeter/ferry/internal/provider/kinde"
	"github.com/ferrymeter/ferry/internal/provider/kinde/standin"
	"github.com/ferrymeter/ferry/internal/resources"
)

// Credentials of the Kinde stand-in ferry dev starts when FERRY_LIMITS_SOURCE=kinde names no
// FERRY_KINDE_DOMAIN. They are not secrets: the stand-in listens on loopback only.
const (
	standInClientID     = "ferry-dev"
	standInClientSecret = "ferry-dev-secret"
)

// LimitsFromEnv is where ferry dev's functions read limits: the source FERRY_LIMITS_SOURCE
// selects. With kinde and no FERRY_KINDE_DOMAIN, a Kinde stand-in starts on loopback for the life
// of the process, granting every customer the default plan's limits; steer it with
// PUT /standin/mode {"mode": "ok"|"fail"|"ratelimit"} and PUT /standin/entitlements/{customer}.
func LimitsFromEnv(ctx context.Context, catalog plans.Catalog, log *slog.Logger) (app.LimitsConfig, error) {
	if os.Getenv(resources.EnvLimitsSource) != limits.SourceKinde || os.Getenv(resources.EnvKindeDomain) != "" {
		return app.LimitsConfigFromEnv(ctx)
	}
	url, err := startKindeStandIn(catalog)
	if err != nil {
		return app.LimitsConfig{}, err
	}
	log.Info("Kinde stand-in running", "url", url, "fail", "curl -X PUT "+url+`/standin/mode -d '{"mode":"fail"}'`)
	return app.LimitsConfig{
		Source: limits.SourceKinde,
		Kinde:  kinde.Config{Domain: url, ClientID: standInClientID, ClientSecret: standInClientSecret},
	}, nil
}

// startKindeStandIn serves a stand-in on a free loopback port for the life of the process.
func startKindeStandIn(catalog plans.Catalog) (string, error) {
	stand := standin.New(standInClientID, standInClientSecret)
	plan, _ := catalog.Plan(catalog.Default)
	var ents []kinde.Entitlement
	for feature, f := range plan.Features {
		var limitMax *int64
		if !f.Limit.Unlimited {
			limitMax = &f.Limit.Max
		}
		ents = append(ents, standin.Limit(feature, limitMax))
	}
	stand.SetDefault(ents...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("start the Kinde stand-in: %w", err)
	}
	srv := NewServer(stand)
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), nil
}
