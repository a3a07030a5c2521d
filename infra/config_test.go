package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func lookupIn(ctx map[string]any) func(string) any {
	return func(key string) any { return ctx[key] }
}

func TestConfigFromContext_Defaults(t *testing.T) {
	cfg, err := ConfigFromContext(lookupIn(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Stage:                  "dev",
		LogRetentionDays:       defaultLogRetentionDays,
		LogLevel:               "info",
		APIRateLimit:           defaultAPIRateLimit,
		APIBurstLimit:          defaultAPIBurstLimit,
		ConsumerMaxConcurrency: defaultConsumerMaxConcurrency,
		ArchiveIADays:          defaultArchiveIADays,
		ArchiveGlacierDays:     defaultArchiveGlacierDays,
		ArchiveNoncurrentDays:  defaultArchiveNoncurrentDays,
		LimitsSource:           "plan",
	}
	if cfg != want {
		t.Errorf("config %+v; want %+v", cfg, want)
	}
	if !cfg.Disposable() || cfg.Prefix() != "ferry-dev" {
		t.Errorf("dev stage: disposable %v, prefix %q", cfg.Disposable(), cfg.Prefix())
	}
}

// Values come as strings from `-c key=value` and as numbers from cdk.json.
func TestConfigFromContext_StringsAndNumbers(t *testing.T) {
	cfg, err := ConfigFromContext(lookupIn(map[string]any{
		ctxStage:            "prod",
		ctxAlarmEmail:       "ops@example.com",
		ctxLogRetentionDays: "90",
		ctxAPIRateLimit:     25.0,
		ctxLogLevel:         "WARN",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Stage != "prod" || cfg.Disposable() || cfg.AlarmEmail != "ops@example.com" || cfg.LogRetentionDays != 90 || cfg.APIRateLimit != 25 || cfg.LogLevel != "warn" {
		t.Errorf("config %+v", cfg)
	}
}

func TestConfigFromContext_ReportsEveryInvalidValue(t *testing.T) {
	_, err := ConfigFromContext(lookupIn(map[string]any{
		ctxStage:                  "Prod_1",
		ctxAlarmEmail:             "nobody",
		ctxLogRetentionDays:       "31",
		ctxLogLevel:               "loud",
		ctxAPIRateLimit:           "fast",
		ctxConsumerMaxConcurrency: 1.0,
		ctxArchiveIADays:          "10",
		ctxArchiveExpireDays:      "5",
	}))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"stage", "alarmEmail", "logRetentionDays", "logLevel", "apiRateLimit", "consumerMaxConcurrency", "archiveInfrequentAccessDays", "archiveExpireDays"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

func TestConfigFromContext_PlansFileIsCompactedJSON(t *testing.T) {
	path := writeFile(t, "plans.json", "{\n  \"plus\": {\"included\": 100000}\n}\n")
	cfg, err := ConfigFromContext(lookupIn(map[string]any{ctxPlansFile: path}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Plans != `{"plus":{"included":100000}}` {
		t.Errorf("plans %q", cfg.Plans)
	}
}

func TestConfigFromContext_PlansFileRefused(t *testing.T) {
	for name, content := range map[string]string{
		"invalid JSON": "{plus",
		"too large":    `{"x":"` + strings.Repeat("a", maxPlansBytes) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, "plans.json", content)
			if _, err := ConfigFromContext(lookupIn(map[string]any{ctxPlansFile: path})); err == nil || !strings.Contains(err.Error(), "plans") {
				t.Errorf("err = %v; want a plans error", err)
			}
		})
	}
	if _, err := ConfigFromContext(lookupIn(map[string]any{ctxPlansFile: filepath.Join(t.TempDir(), "missing.json")})); err == nil {
		t.Error("missing plans file accepted")
	}
}

func TestConfigFromContext_KindeLimitsSource(t *testing.T) {
	cfg, err := ConfigFromContext(lookupIn(map[string]any{
		ctxLimitsSource:         "Kinde",
		ctxKindeDomain:          "https://acme.kinde.com",
		ctxKindeClientID:        "0123456789abcdef0123456789abcdef",
		ctxKindeClientSecretARN: " " + kindeSecretARN + " ",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Kinde() || cfg.KindeDomain != "https://acme.kinde.com" || cfg.KindeClientSecretARN != kindeSecretARN || !cfg.kindeSecretIsComplete() {
		t.Errorf("config %+v", cfg)
	}
}

func TestConfigFromContext_KindeDomains(t *testing.T) {
	for domain, ok := range map[string]bool{
		"acme.kinde.com":                      true,
		"https://acme.kinde.com":              true,
		"https://acme.kinde.com/":             true,
		"auth.acme.com":                       true,
		"http://acme.kinde.com":               false, // the client secret would cross the network in clear
		"acme":                                false,
		"acme.kinde.com/path":                 false,
		"https://acme.kinde.com/oauth2/token": false,
		"https://user@acme.kinde.com":         false,
		"acme kinde.com":                      false,
	} {
		t.Run(domain, func(t *testing.T) {
			_, err := ConfigFromContext(lookupIn(kindeContext(kindeSecretARN, ctxKindeDomain, domain)))
			if (err == nil) != ok {
				t.Errorf("err = %v; want accepted %v", err, ok)
			}
			if err != nil && !strings.Contains(err.Error(), ctxKindeDomain) {
				t.Errorf("error does not name %s: %v", ctxKindeDomain, err)
			}
		})
	}
}

func TestConfigFromContext_KindeSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  map[string]any
		want []string
	}{
		{"kinde with nothing", map[string]any{ctxLimitsSource: "kinde"},
			[]string{`limitsSource "kinde" needs kindeDomain, kindeClientId, kindeClientSecretArn`}},
		{"kinde without the secret", kindeContext(kindeSecretARN, ctxKindeClientSecretARN, ""),
			[]string{`needs kindeClientSecretArn`}},
		{"kinde without the client id", kindeContext(kindeSecretARN, ctxKindeClientID, ""),
			[]string{`needs kindeClientId`}},
		{"not a secret's ARN", kindeContext("arn:aws:s3:::ferry-kinde"),
			[]string{"kindeClientSecretArn", "ARN of a Secrets Manager secret"}},
		{"client id with a space", kindeContext(kindeSecretARN, ctxKindeClientID, "abc def"),
			[]string{"kindeClientId"}},
		{"unknown source", map[string]any{ctxLimitsSource: "stripe"},
			[]string{`limitsSource "stripe": want one of plan, kinde`}},
		{"plan with a Kinde domain", map[string]any{ctxKindeDomain: "acme.kinde.com"},
			[]string{`kindeDomain: set only with limitsSource=kinde, and limitsSource is "plan"`}},
		{"plan with every Kinde key", kindeContext(kindeSecretARN, ctxLimitsSource, "plan"),
			[]string{"kindeDomain, kindeClientId, kindeClientSecretArn: set only with limitsSource=kinde"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ConfigFromContext(lookupIn(tc.ctx))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not mention %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestConfigFromContext_InboxSettings(t *testing.T) {
	cfg, err := ConfigFromContext(lookupIn(kindeContext(kindeSecretARN)))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Settings()[resources.EnvKindeWebhookJWKSURL]; got != "https://acme.kinde.com/.well-known/jwks" {
		t.Errorf("the JWKS URL derived from kindeDomain is %q", got)
	}
	cfg, err = ConfigFromContext(lookupIn(map[string]any{ctxKindeWebhookJWKSURL: "https://auth.example.com/.well-known/jwks"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Settings()[resources.EnvKindeWebhookJWKSURL]; got != "https://auth.example.com/.well-known/jwks" {
		t.Errorf("the JWKS URL is %q", got)
	}
	for _, tc := range []struct {
		name string
		ctx  map[string]any
		want string
	}{
		{"a JWKS URL in the clear", map[string]any{ctxKindeWebhookJWKSURL: "http://acme.kinde.com/.well-known/jwks"}, "http is allowed only for loopback hosts"},
		{"re-fetch without a key", map[string]any{ctxStripeRefetch: "true"}, "stripeRefetch=true needs stripeApiKeySecretArn"},
		// (The key alone is valid: it reports usage to Stripe; infra/reporting_test.go.)
		{"an API base without re-fetch", map[string]any{ctxStripeAPIBase: "https://stripe.example.com"}, "set only with stripeRefetch=true"},
		{"re-fetch not a boolean", map[string]any{ctxStripeRefetch: "yes"}, "stripeRefetch: want true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ConfigFromContext(lookupIn(tc.ctx))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// A switch is a JSON boolean or "true"/"false" in any case; anything else is refused rather than
// read as one or the other.
func TestConfigFromContext_Switches(t *testing.T) {
	for _, tc := range []struct {
		value any
		want  bool
	}{{nil, false}, {true, true}, {false, false}, {"true", true}, {" TRUE ", true}, {"False", false}} {
		// The re-fetch reads with the Stripe API key, so the key is named too.
		ctx := map[string]any{ctxStripeAPIKeySecretARN: "arn:aws:secretsmanager:us-east-1:123456789012:secret:stripe-AbCdEf"}
		if tc.value != nil {
			ctx[ctxStripeRefetch] = tc.value
		}
		cfg, err := ConfigFromContext(lookupIn(ctx))
		if err != nil {
			t.Fatalf("stripeRefetch %#v: %v", tc.value, err)
		}
		if cfg.StripeRefetch != tc.want {
			t.Errorf("stripeRefetch %#v read as %v", tc.value, cfg.StripeRefetch)
		}
		if got, on := cfg.Settings()[resources.EnvStripeRefetch]; on != tc.want || (on && got != "true") {
			t.Errorf("stripeRefetch %#v: setting %q (present %v)", tc.value, got, on)
		}
	}
	for _, bad := range []any{"yes", "1", "", float64(1)} {
		_, err := ConfigFromContext(lookupIn(map[string]any{ctxStripeRefetch: bad, ctxReportToKinde: bad}))
		for _, key := range []string{ctxStripeRefetch, ctxReportToKinde} {
			if err == nil || !strings.Contains(err.Error(), "context "+key+": want true or false") {
				t.Errorf("%s=%#v: err %v", key, bad, err)
			}
		}
	}
}

// A context key an earlier release read and this one does not is refused with why, whatever its
// value: batchMode chose between two worker designs, and there is one now. A deployment that
// sets it (batchMode=false asked for the per-event worker) is told, not silently given another.
func TestConfigFromContext_RetiredKeysAreRefused(t *testing.T) {
	for _, v := range []any{"true", "false", true, false} {
		_, err := ConfigFromContext(lookupIn(map[string]any{"batchMode": v}))
		if err == nil || !strings.Contains(err.Error(), "context batchMode: the per-event worker was retired") {
			t.Errorf("batchMode=%#v: err %v; want it refused as retired", v, err)
		}
	}
}
