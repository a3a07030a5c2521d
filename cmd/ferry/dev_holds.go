package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/devstack"
	"github.com/ferrymeter/ferry/internal/limits"
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

// extendHolds makes ferry dev read limits from the source FERRY_LIMITS_SOURCE selects. With kinde and no FERRY_KINDE_DOMAIN, a Kinde
// stand-in starts on loopback, granting every customer the default plan's limits; steer it with
// PUT /standin/mode {"mode": "ok"|"fail"|"ratelimit"} and PUT /standin/entitlements/{customer}.
func extendHolds(a *app.App, s *devstack.Stack) error {
	if os.Getenv(resources.EnvLimitsSource) != limits.SourceKinde {
		return nil
	}
	var kc kinde.Config
	if os.Getenv(resources.EnvKindeDomain) == "" {
		url, err := startKindeStandIn(a)
		if err != nil {
			return err
		}
		kc = kinde.Config{Domain: url, ClientID: standInClientID, ClientSecret: standInClientSecret}
		a.Log.Info("Kinde stand-in running", "url", url,
			"fail", "curl -X PUT "+url+`/standin/mode -d '{"mode":"fail"}'`)
	} else {
		cfg, err := app.LimitsConfigFromEnv(context.Background())
		if err != nil {
			return err
		}
		kc = cfg.Kinde
	}
	client, err := kinde.New(kc)
	if err != nil {
		return err
	}
	a.Limits = &limits.Cached{Fetch: client, Metrics: a.Metrics, Log: a.Log, Now: a.Now}
	a.Holds.Limits = a.Limits
	a.API.SetLimits(a.Limits)
	return nil
}

// startKindeStandIn serves a stand-in on a free loopback port for the life of the process.
func startKindeStandIn(a *app.App) (string, error) {
	stand := standin.New(standInClientID, standInClientSecret)
	plan, _ := a.Config.Catalog.Plan(a.Config.Catalog.Default)
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
	srv := &http.Server{Handler: stand, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), nil
}
