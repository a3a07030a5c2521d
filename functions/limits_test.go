package functions_test

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/functions"
	apifn "github.com/ferrymeter/ferry/functions/api"
	holdsfn "github.com/ferrymeter/ferry/functions/holds"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	kindestandin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Each function that admits holds reads its limit source from its settings: the plans unless
// FERRY_LIMITS_SOURCE says kinde, with the Kinde client's settings. A source that cannot be used
// fails the build, naming each problem: the function does not start, and never falls back to the
// plans.
func TestLimitsSource_FromSettings(t *testing.T) {
	cases := []struct {
		name     string
		settings compose.Settings
		source   string
		wantErr  []string
	}{
		{"nothing set reads the plans", nil, limits.SourcePlan, nil},
		{"plan", compose.Settings{resources.EnvLimitsSource: "plan"}, limits.SourcePlan, nil},
		{"an unknown source is refused", compose.Settings{resources.EnvLimitsSource: "stripe"}, "", []string{`"stripe"`}},
		{"kinde without settings names each missing one", compose.Settings{resources.EnvLimitsSource: "kinde"}, "",
			[]string{"domain", "client id", "client secret"}},
		{"kinde with a domain that is no host", compose.Settings{
			resources.EnvLimitsSource: "kinde", resources.EnvKindeDomain: "ftp://acme", resources.EnvKindeClientID: "id",
			resources.EnvKindeClientSecret: "secret",
		}, "", []string{"not a host name"}},
		{"kinde with settings", compose.Settings{
			resources.EnvLimitsSource: "kinde", resources.EnvKindeDomain: "acme.kinde.com",
			resources.EnvKindeClientID: "id", resources.EnvKindeClientSecret: "secret",
		}, limits.SourceKinde, nil},
	}
	for _, c := range cases {
		for _, function := range []string{resources.FunctionHolds, resources.FunctionAPI} {
			t.Run(c.name+"/"+function, func(t *testing.T) {
				cfg := compose.DefaultConfig()
				cfg.OperatorKey = "operator"
				fn, err := functions.Definitions().Build(function, compose.Env{
					Names: allNames(), Config: cfg, Settings: c.settings,
					Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.NewCounter(), Now: time.Now,
				})
				if len(c.wantErr) > 0 {
					if err == nil {
						t.Fatal("built; want the build refused")
					}
					for _, want := range c.wantErr {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("error %q does not mention %s", err, want)
						}
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				var got limits.Source
				if p := holdsfn.PartsOf(fn); p != nil {
					got = p.Limits
				} else {
					got = apifn.PartsOf(fn).Limits
				}
				_, isPlan := got.(limits.Plan)
				_, isKinde := got.(*limits.Cached)
				if (c.source == limits.SourcePlan && !isPlan) || (c.source == limits.SourceKinde && !isKinde) {
					t.Errorf("source %T; want %s", got, c.source)
				}
			})
		}
	}
}

// With limits from Kinde, GET /v1/usage shows the limit the next admission is held to: Kinde's
// entitlement, not the plan's.
func TestGetUsage_KindeSource_ShowsKindesLimit(t *testing.T) {
	catalog := plans.Default()
	stand := apptest.NewStandIns(t, catalog)
	stand.Kinde.SetEntitlements("kp_cust_1", kindestandin.Limit("tokens", upTo(777)))
	h := apptest.New(t, apptest.Options{Settings: stand.Settings.With(compose.Settings{resources.EnvLimitsSource: limits.SourceKinde})})

	resp := h.Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, map[string]any{
		"id": "acct_k", "plan": "plus", "kindeCustomerId": "kp_cust_1",
	})
	if resp.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Status, resp.Body)
	}
	key := resp.JSON(t)["apiKey"].(string)
	u := h.Do(t, http.MethodGet, "/v1/usage?feature=tokens", key, nil).JSON(t)
	plus, _ := catalog.Plan("plus")
	planLimit := plus.Features["tokens"]
	if u["limit"] != float64(777) || u["remaining"] != float64(777) {
		t.Errorf("usage = %v, want Kinde's limit 777 (the plan's is %v)", u, planLimit)
	}
}

func upTo(n int64) *int64 { return &n }
