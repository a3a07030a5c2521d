package kinde_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	standin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
)

// The read-back of meter usage is UNVERIFIED against a live Kinde account: this fixture pins
// the shape Ferry expects (kinde.MeterUsageReadResponse). When a live account shows otherwise,
// change the fixture and kinde.TotalOf together.
func TestTotalOf_UnverifiedReadFixture(t *testing.T) {
	body, err := os.ReadFile("testdata/meter_usage_read.json")
	if err != nil {
		t.Fatal(err)
	}
	for feature, want := range map[string]int64{"events": 8031 + 12, "tokens": 120000, "seats": 0} {
		got, err := kinde.TotalOf(body, feature)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s total = %d, want %d", feature, got, want)
		}
	}
}

func TestTotalOf_RefusesWhatItCannotRead(t *testing.T) {
	for name, body := range map[string]string{
		"not json":       `<html>`,
		"more pages":     `{"meter_usage":[],"has_more":true}`,
		"not an integer": `{"meter_usage":[{"billing_feature_code":"events","meter_value":"12.5","meter_type_code":"absolute"}]}`,
	} {
		if _, err := kinde.TotalOf([]byte(body), "events"); err == nil {
			t.Errorf("%s: read a total", name)
		}
	}
}

// RecordAbsolute speaks Kinde's documented wire format: meter_value a string, meter_type_code
// absolute, on POST /api/v1/billing/meter_usage with the M2M bearer token.
func TestRecordAbsolute_WireFormat(t *testing.T) {
	var got map[string]any
	var auth, method, path string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /oauth2/token", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"access_token":"tok","token_type":"Bearer","expires_in":3600}`)
	})
	mux.HandleFunc(kinde.MeterUsagePath, func(w http.ResponseWriter, r *http.Request) {
		method, path, auth = r.Method, r.URL.Path, r.Header.Get("Authorization")
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"code":"METER_USAGE_RECORDED","message":"Meter usage recorded"}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	if err := newClient(t, srv, "s3cret").RecordAbsolute(context.Background(), "agreement_1", "events", 8457); err != nil {
		t.Fatal(err)
	}
	if method != http.MethodPost || path != "/api/v1/billing/meter_usage" || auth != "Bearer tok" {
		t.Errorf("%s %s auth %q", method, path, auth)
	}
	want := map[string]any{"customer_agreement_id": "agreement_1", "billing_feature_code": "events", "meter_value": "8457", "meter_type_code": "absolute"}
	if len(got) != len(want) {
		t.Errorf("body = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
}

func TestRecordAbsolute_429CarriesRateLimitReset(t *testing.T) {
	stand := standin.New("ferry", "s3cret")
	stand.SetRateLimitReset(42)
	stand.FailMeterWrites(standin.MeterRateLimit)
	srv := httptest.NewServer(stand)
	defer srv.Close()
	c := newClient(t, srv, "s3cret")

	err := c.RecordAbsolute(context.Background(), "agreement_1", "events", 10)
	var rl *kinde.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter() != 42*time.Second {
		t.Fatalf("err = %v, want a 429 asking for 42s", err)
	}
	if got := stand.MeterTotal("agreement_1", "events"); got != 0 {
		t.Errorf("a refused write moved the meter to %d", got)
	}
}

// Absolute writes are safe to repeat, and the stand-in's read-back follows the same
// (unverified) shape TotalOf reads.
func TestRecordAbsolute_RepeatSetsTheSameTotal_ReadBack(t *testing.T) {
	stand := standin.New("ferry", "s3cret")
	srv := httptest.NewServer(stand)
	defer srv.Close()
	c := newClient(t, srv, "s3cret")
	ctx := context.Background()

	for _, total := range []int64{6048, 6048, 8457} {
		if err := c.RecordAbsolute(ctx, "agreement_1", "events", total); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.ReadTotal(ctx, "agreement_1", "events")
	if err != nil {
		t.Fatal(err)
	}
	if got != 8457 || stand.MeterTotal("agreement_1", "events") != 8457 {
		t.Errorf("read back %d, stand-in holds %d, want 8457", got, stand.MeterTotal("agreement_1", "events"))
	}
	stand.SetMeterTotal("agreement_1", "events", 8031) // drift injected
	if got, _ := c.ReadTotal(ctx, "agreement_1", "events"); got != 8031 {
		t.Errorf("read back %d after drift, want 8031", got)
	}
}

func TestReadTotal_FailuresAreErrors(t *testing.T) {
	stand := standin.New("ferry", "s3cret")
	stand.FailMeterReads(standin.MeterFail, standin.MeterRateLimit)
	srv := httptest.NewServer(stand)
	defer srv.Close()
	c := newClient(t, srv, "s3cret")
	for _, want := range []string{"503", "rate limited"} {
		_, err := c.ReadTotal(context.Background(), "agreement_1", "events")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}
