package holds_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	standin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// withKinde builds a harness whose limits come from a Kinde stand-in.
func withKinde(t *testing.T) (*apptest.Harness, *standin.Server) {
	t.Helper()
	stand := standin.New("ferry", "s3cret")
	srv := httptest.NewServer(stand)
	t.Cleanup(srv.Close)
	h := apptest.New(t, apptest.Options{Configure: func(h *apptest.Harness) {
		client, err := kinde.New(kinde.Config{Domain: srv.URL, ClientID: "ferry", ClientSecret: "s3cret", HTTPClient: srv.Client()})
		if err != nil {
			t.Fatal(err)
		}
		fn := h.Fn(resources.FunctionHolds)
		h.Holds().Holds.Limits = &limits.Cached{Fetch: client, Metrics: fn.Metrics, Log: fn.Log, Now: fn.Now}
	}})
	return h, stand
}

// The provider goes down. Admissions use the last limit for up to 10 minutes, then fail closed
// with a 503 that says why; running jobs are not affected; when the provider answers again,
// admissions resume.
func TestReserve_ProviderDown_StaleThenFailClosedThenRecovers(t *testing.T) {
	h, stand := withKinde(t)
	tokens := int64(100_000)
	stand.SetEntitlements("acct_kinde", standin.Limit("tokens", &tokens))
	key := h.CreateAccount(t, "acct_kinde", "free", nil)

	running := mustStatus(t, reserve(t, h, key, "job-1", 10_000), http.StatusCreated)["id"].(string)
	stand.SetMode(standin.Fail)

	h.Clock.Advance(2 * time.Minute)
	mustStatus(t, reserve(t, h, key, "job-2", 10_000), http.StatusCreated)

	h.Clock.Advance(8*time.Minute + time.Second) // the last good read is now over 10 minutes old
	r := h.Do(t, http.MethodPost, "/v1/holds", key, map[string]any{"key": "job-3", "feature": "tokens", "amount": 10_000})
	p := mustStatus(t, r, http.StatusServiceUnavailable)
	if !strings.HasSuffix(p["type"].(string), "limit-unknown") || !strings.Contains(p["detail"].(string), "billing provider") ||
		r.Header.Get("Retry-After") == "" {
		t.Errorf("fail-closed answer = %v (Retry-After %q)", p, r.Header.Get("Retry-After"))
	}
	// A job that already holds capacity keeps its hold and can run and settle.
	mustStatus(t, reserve(t, h, key, "job-1", 10_000), http.StatusOK)
	mustStatus(t, charge(t, h, key, running, "step-1", 10_000), http.StatusOK)
	mustStatus(t, settleHold(t, h, key, running, nil), http.StatusOK)

	stand.SetMode(standin.OK)
	h.Clock.Advance(10 * time.Second)
	mustStatus(t, reserve(t, h, key, "job-3", 10_000), http.StatusCreated)
	wantUsage(t, h, key, 10_000, 20_000)
}

// A plan change at the provider reaches the next admission once the cached limit is a minute
// old; running holds keep what they hold. A null maximum is unlimited.
func TestReserve_ProviderPlanChange_ReachesTheNextAdmissionWithinAMinute(t *testing.T) {
	h, stand := withKinde(t)
	tokens := int64(100_000)
	stand.SetEntitlements("acct_kinde_change", standin.Limit("tokens", &tokens))
	key := h.CreateAccount(t, "acct_kinde_change", "free", nil)
	mustStatus(t, reserve(t, h, key, "job-1", 60_000), http.StatusCreated)

	lower := int64(50_000)
	stand.SetEntitlements("acct_kinde_change", standin.Limit("tokens", &lower))
	h.Clock.Advance(30 * time.Second)
	mustStatus(t, reserve(t, h, key, "job-2", 30_000), http.StatusCreated) // the cached 100,000 still applies
	h.Clock.Advance(31 * time.Second)
	p := mustStatus(t, reserve(t, h, key, "job-3", 1), http.StatusPaymentRequired)
	if num(t, p, "remaining") != 0 {
		t.Errorf("refusal = %v", p)
	}

	stand.SetEntitlements("acct_kinde_change", standin.Limit("tokens", nil))
	h.Clock.Advance(time.Minute)
	mustStatus(t, reserve(t, h, key, "job-4", 1_000_000_000), http.StatusCreated)
}
