package app_test

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	kindestandin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestLimitsConfigFromEnv(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		source  string
		wantErr []string
	}{
		{"nothing set reads the plans", nil, limits.SourcePlan, nil},
		{"plan", map[string]string{resources.EnvLimitsSource: "plan"}, limits.SourcePlan, nil},
		{"an unknown source is refused", map[string]string{resources.EnvLimitsSource: "stripe"}, "", []string{`"stripe"`}},
		{"kinde without settings names each missing one", map[string]string{resources.EnvLimitsSource: "kinde"}, "",
			[]string{"domain", "client id", "client secret"}},
		{"kinde with settings", map[string]string{
			resources.EnvLimitsSource: "kinde", resources.EnvKindeDomain: "acme.kinde.com",
			resources.EnvKindeClientID: "id", resources.EnvKindeClientSecret: "secret",
		}, limits.SourceKinde, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, name := range []string{resources.EnvLimitsSource, resources.EnvKindeDomain, resources.EnvKindeClientID, resources.EnvKindeClientSecret, resources.EnvKindeClientSecretARN} {
				t.Setenv(name, c.env[name])
			}
			cfg, err := app.LimitsConfigFromEnv(t.Context())
			if len(c.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error; config %+v", cfg)
				}
				for _, want := range c.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not mention %s", err, want)
					}
				}
				return
			}
			if err != nil || cfg.Source != c.source {
				t.Errorf("config %+v, %v; want source %s", cfg, err, c.source)
			}
		})
	}
}

// A Kinde source that cannot be built must not fall back to the plans: every admission is
// refused with the reason.
func TestBuild_MisconfiguredKindeSource_FailsClosed(t *testing.T) {
	names := allNames()
	cfg := app.DefaultConfig()
	cfg.Limits = app.LimitsConfig{Source: limits.SourceKinde}
	fn, err := app.DefaultDefinitions().Build(resources.FunctionHolds, app.Env{
		Names: names, Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.NewCounter(), Now: time.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = fn.Holds.Limits.Limit(t.Context(), accounts.Account{ID: "acct_1"}, "tokens")
	if !limits.IsUnknown(err) || !strings.Contains(err.Error(), "misconfigured") {
		t.Errorf("err = %v, want a fail-closed unknown limit", err)
	}
}

// With limits from Kinde, GET /v1/usage shows the limit the next admission is held to: Kinde's
// entitlement, not the plan's.
func TestGetUsage_KindeSource_ShowsKindesLimit(t *testing.T) {
	catalog := plans.Default()
	stand := apptest.NewStandIns(t, catalog)
	stand.Kinde.SetEntitlements("kp_cust_1", kindestandin.Limit("tokens", upTo(777)))
	h := apptest.New(t, apptest.Options{Limits: app.LimitsConfig{Source: limits.SourceKinde, Kinde: *stand.Meters.Kinde}})

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
