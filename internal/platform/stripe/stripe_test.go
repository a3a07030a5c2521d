package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	standin "github.com/ferrymeter/ferry/internal/devkit/standin/stripe"
	"github.com/ferrymeter/ferry/internal/platform/stripe"
)

const key = "sk_test_ferry"

func serve(t *testing.T) (*standin.Server, *stripe.Client) {
	t.Helper()
	stand := standin.New(key, map[string]standin.Meter{"mtr_events": {EventName: "ferry_events"}})
	srv := httptest.NewServer(stand)
	t.Cleanup(srv.Close)
	c, err := stripe.New(stripe.Config{APIKey: key, APIBase: srv.URL, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return stand, c
}

func event(id string, value int64, at time.Time) stripe.MeterEvent {
	return stripe.MeterEvent{Identifier: id, EventName: "ferry_events", Customer: "cus_1", Value: value, Timestamp: at}
}

// The same identifier sent twice moves the meter once: the stand-in, like Stripe, deduplicates.
func TestSend_AnIdentifierMovesTheMeterOnce(t *testing.T) {
	stand, c := serve(t)
	ctx := context.Background()
	at := time.Now().Add(-time.Hour)
	for range 2 {
		if err := c.Send(ctx, event("acct_42:events:2026-10:6048", 6048, at)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Send(ctx, event("acct_42:events:2026-10:8457", 2409, at)); err != nil {
		t.Fatal(err)
	}
	got := stand.Counts()
	if got.MeterEventRequests != 3 || got.EventsRecorded != 2 || got.Duplicates != 1 {
		t.Errorf("counts = %+v", got)
	}
	if total := stand.Total("ferry_events", "cus_1"); total != 8457 {
		t.Errorf("meter = %d, want 8457", total)
	}
	sum, err := c.Summary(ctx, "mtr_events", "cus_1", at.Add(-time.Minute), time.Now().Add(time.Minute))
	if err != nil || sum != 8457 {
		t.Errorf("summary = %d, %v; want 8457", sum, err)
	}
}

func TestCancel_WithinTheWindowTakesTheEventOut(t *testing.T) {
	stand, c := serve(t)
	ctx := context.Background()
	now := time.Now()
	stand.SetClock(func() time.Time { return now })
	if err := c.Send(ctx, event("a", 10, now.Add(-time.Minute))); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, event("b", 5, now.Add(-time.Minute))); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "ferry_events", "b"); err != nil {
		t.Fatal(err)
	}
	if total := stand.Total("ferry_events", "cus_1"); total != 10 {
		t.Errorf("meter = %d after cancelling b, want 10", total)
	}
	stand.SetClock(func() time.Time { return now.Add(stripe.CancelWindow) })
	err := c.Cancel(ctx, "ferry_events", "a")
	if err == nil || stripe.IsRetryable(err) {
		t.Errorf("cancel after 24 h: err = %v, want a final refusal", err)
	}
}

// Summaries are minute-aligned and eventually consistent: the lag leaves fresh events out.
func TestSummary_LagsLikeStripe(t *testing.T) {
	stand, c := serve(t)
	ctx := context.Background()
	at := time.Now().Add(-10 * time.Minute)
	if err := c.Send(ctx, event("a", 7, at)); err != nil {
		t.Fatal(err)
	}
	stand.SetLag(time.Minute)
	if sum, err := c.Summary(ctx, "mtr_events", "cus_1", at.Add(-time.Hour), time.Now().Add(time.Minute)); err != nil || sum != 0 {
		t.Errorf("summary under lag = %d, %v; want 0", sum, err)
	}
	stand.SetLag(0)
	if sum, err := c.Summary(ctx, "mtr_events", "cus_1", at.Add(-time.Hour), time.Now().Add(time.Minute)); err != nil || sum != 7 {
		t.Errorf("summary = %d, %v; want 7", sum, err)
	}
	if _, err := c.Summary(ctx, "mtr_nope", "cus_1", at.Add(-time.Hour), time.Now()); err == nil {
		t.Error("read a meter that does not exist")
	}
}

func TestErrors_AreClassified(t *testing.T) {
	stand, c := serve(t)
	ctx := context.Background()
	stand.FailNext(standin.EndpointMeterEvents, standin.Fail, standin.RateLimit)
	for _, want := range []int{http.StatusInternalServerError, http.StatusTooManyRequests} {
		err := c.Send(ctx, event("x", 1, time.Now()))
		var se *stripe.Error
		if !errors.As(err, &se) || se.Status != want || !stripe.IsRetryable(err) {
			t.Errorf("err = %v, want a retryable %d", err, want)
		}
	}
	long := event(strings.Repeat("x", 101), 1, time.Now())
	if err := c.Send(ctx, long); err == nil || stripe.IsRetryable(err) {
		t.Errorf("a 101-character identifier: err = %v, want a final 400", err)
	}
	if stand.Total("ferry_events", "cus_1") != 0 {
		t.Error("a refused event moved the meter")
	}
}

func TestSend_TimeoutAfterTheWriteLanded_IsRetryable_AndTheRetryIsADuplicate(t *testing.T) {
	stand := standin.New(key, map[string]standin.Meter{"mtr_events": {EventName: "ferry_events"}})
	stand.SetHang(2 * time.Second)
	srv := httptest.NewServer(stand)
	t.Cleanup(srv.Close)
	c, err := stripe.New(stripe.Config{APIKey: key, APIBase: srv.URL, HTTPClient: &http.Client{Timeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	stand.FailNext(standin.EndpointMeterEvents, standin.TimeoutAfterWrite)
	ctx := context.Background()
	if err := c.Send(ctx, event("once", 3, time.Now())); err == nil || !stripe.IsRetryable(err) {
		t.Fatalf("err = %v, want a retryable timeout", err)
	}
	if err := c.Send(ctx, event("once", 3, time.Now())); err != nil {
		t.Fatal(err)
	}
	if got := stand.Counts(); got.EventsRecorded != 1 || got.Duplicates != 1 || stand.Total("ferry_events", "cus_1") != 3 {
		t.Errorf("counts = %+v, meter %d; want the event once", got, stand.Total("ferry_events", "cus_1"))
	}
}

func TestConfig_RefusesHTTPOffLoopback(t *testing.T) {
	for base, ok := range map[string]bool{
		"https://api.stripe.com": true, "http://127.0.0.1:12111": true, "http://localhost:9": true,
		"http://stripe.example.com": false, "ftp://127.0.0.1": false, "https://api.stripe.com/v1": false,
	} {
		err := stripe.Config{APIKey: key, APIBase: base}.Validate()
		if (err == nil) != ok {
			t.Errorf("%s: err = %v", base, err)
		}
	}
	if err := (stripe.Config{}).Validate(); err == nil {
		t.Error("a config without a key is valid")
	}
}
