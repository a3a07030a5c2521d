package kinde_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	standin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
)

func newClient(t *testing.T, srv *httptest.Server, secret string) *kinde.Client {
	t.Helper()
	c, err := kinde.New(kinde.Config{Domain: srv.URL, ClientID: "ferry", ClientSecret: secret, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func upTo(n int64) *int64 { return &n }

func TestClient_Limits_ReadsEntitlementsWithNullAsUnlimited(t *testing.T) {
	stand := standin.New("ferry", "s3cret")
	stand.SetEntitlements("cust_1", standin.Limit("tokens", upTo(100_000)), standin.Limit("seats", nil))
	srv := httptest.NewServer(stand)
	defer srv.Close()

	got, err := newClient(t, srv, "s3cret").Limits(context.Background(), "cust_1")
	if err != nil {
		t.Fatal(err)
	}
	if got["tokens"] != plans.Max(100_000) || got["seats"] != plans.Unlimited || len(got) != 2 {
		t.Errorf("limits = %v", got)
	}
}

func TestClient_TokenCachedUntilExpiry_OneTokenForManyReads(t *testing.T) {
	stand := standin.New("ferry", "s3cret")
	srv := httptest.NewServer(stand)
	defer srv.Close()
	c := newClient(t, srv, "s3cret")
	for range 5 {
		if _, err := c.Entitlements(context.Background(), "cust_1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := stand.Counts(); got.Token != 1 || got.Entitlements != 5 {
		t.Errorf("counts = %+v, want 1 token call for 5 reads", got)
	}
}

func TestClient_Entitlements_FollowsPages(t *testing.T) {
	stand := standin.New("ferry", "s3cret")
	var ents []kinde.Entitlement
	for i := range 250 {
		ents = append(ents, kinde.Entitlement{ID: fmt.Sprintf("entitlement_%03d", i), FeatureCode: fmt.Sprintf("f%03d", i), LimitMax: upTo(int64(i))})
	}
	stand.SetEntitlements("cust_1", ents...)
	srv := httptest.NewServer(stand)
	defer srv.Close()

	got, err := newClient(t, srv, "s3cret").Entitlements(context.Background(), "cust_1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 250 || got[249].FeatureCode != "f249" {
		t.Errorf("read %d entitlements", len(got))
	}
	if calls := stand.Counts().Entitlements; calls != 3 {
		t.Errorf("%d page calls, want 3 of 100", calls)
	}
}

func TestClient_Failures(t *testing.T) {
	stand := standin.New("ferry", "s3cret")
	srv := httptest.NewServer(stand)
	defer srv.Close()
	ctx := context.Background()

	t.Run("wrong secret is an error", func(t *testing.T) {
		if _, err := newClient(t, srv, "wrong").Limits(ctx, "cust_1"); err == nil {
			t.Error("no error with a wrong client secret")
		}
	})
	t.Run("an outage is a status error", func(t *testing.T) {
		c := newClient(t, srv, "s3cret")
		if _, err := c.Limits(ctx, "cust_1"); err != nil { // fetch the token while up
			t.Fatal(err)
		}
		stand.SetMode(standin.Fail)
		defer stand.SetMode(standin.OK)
		var se *kinde.StatusError
		if _, err := c.Limits(ctx, "cust_1"); !errors.As(err, &se) || se.Status != 503 {
			t.Errorf("err = %v, want a 503 status error", err)
		}
	})
	t.Run("429 says how long to wait", func(t *testing.T) {
		stand.SetMode(standin.RateLimit)
		defer stand.SetMode(standin.OK)
		var rl *kinde.RateLimitedError
		_, err := newClient(t, srv, "s3cret").Limits(ctx, "cust_1")
		if !errors.As(err, &rl) || rl.RetryAfter() != 30*time.Second {
			t.Errorf("err = %v, want a rate limit with a 30 s wait", err)
		}
	})
}

func TestConfig_Validate_NamesEveryMissingSetting(t *testing.T) {
	err := kinde.Config{Domain: "::bad"}.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"domain", "client id", "client secret"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if err := (kinde.Config{Domain: "acme.kinde.com", ClientID: "a", ClientSecret: "b"}).Validate(); err != nil {
		t.Errorf("a bare host name is refused: %v", err)
	}
}

func TestLimitsOf_RefusesANegativeLimit(t *testing.T) {
	if _, err := kinde.LimitsOf([]kinde.Entitlement{{ID: "e", FeatureCode: "tokens", LimitMax: upTo(-1)}}); err == nil {
		t.Error("a negative limit was accepted")
	}
}
