package ferry

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// endpointAnswer is an endpoint as Ferry shows it; withSecret adds the secret a registration or
// a rotation answers once.
const endpointAnswer = `{"id":"we_4t7kq2m5xv3nb6ydz2wjc7hgra","url":"http://127.0.0.1:9/hook","kinds":["threshold.crossed","limit.reached"],
 "accounts":["acct_1"],"description":null,"disabled":false,"secrets":[{"createdAt":"2026-11-15T12:00:00.000Z","expiresAt":null}],
 "createdAt":"2026-11-15T12:00:00.000Z","updatedAt":"2026-11-15T12:00:00.000Z"`

const deliveryAnswer = `{"notification":"ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr","endpoint":"we_4t7kq2m5xv3nb6ydz2wjc7hgra","kind":"threshold.crossed",
 "account":"acct_1","status":"DELIVERED","attempts":1,"lastStatus":204,"deliveredAt":"2026-11-15T12:00:02.000Z","replays":0,
 "createdAt":"2026-11-15T12:00:00.000Z","updatedAt":"2026-11-15T12:00:02.000Z"}`

// A registration whose answer is lost is sent again with the same bytes under the same key, so
// Ferry answers the first registration (and its secret) instead of making a second endpoint.
func TestCreateWebhookEndpoint_AnswerLost_SameKeyAndBytes_SecretDecoded(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){
		hangUp,
		problemAnswer(502, "outcome-unknown", "", "Retry-After", "0"),
		problemAnswer(409, "idempotency-in-flight", "", "Retry-After", "0"),
		jsonAnswer(201, endpointAnswer+`,"secret":"whsec_Ed6lJUaehf1BhhX5RbFQGypEWULXlNaqr7xRzXgLHcA="}`),
	}}
	c := newTestClient(t, s, Config{MaxAttempts: 4})
	kinds := WebhookKinds{ThresholdCrossed, LimitReached}
	accounts := WebhookAccounts{"acct_1"}
	got, err := c.CreateWebhookEndpoint(context.Background(), CreateWebhookEndpointRequest{Url: "http://127.0.0.1:9/hook", Kinds: &kinds, Accounts: &accounts})
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.recorded()
	if len(reqs) != 4 {
		t.Fatalf("%d attempts, want 4", len(reqs))
	}
	const wantBody = `{"accounts":["acct_1"],"kinds":["threshold.crossed","limit.reached"],"url":"http://127.0.0.1:9/hook"}`
	for i, r := range reqs {
		if r.method != http.MethodPost || r.path != "/v1/webhook-endpoints" || string(r.body) != wantBody ||
			r.idempotencyKey == "" || r.idempotencyKey != reqs[0].idempotencyKey || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("attempt %d: %s %s %s under key %q (the first's: %q)", i+1, r.method, r.path, r.body, r.idempotencyKey, reqs[0].idempotencyKey)
		}
	}
	if got.Secret != "whsec_Ed6lJUaehf1BhhX5RbFQGypEWULXlNaqr7xRzXgLHcA=" || got.Id != "we_4t7kq2m5xv3nb6ydz2wjc7hgra" ||
		len(got.Kinds) != 2 || got.Kinds[1] != LimitReached || got.Accounts[0] != "acct_1" || got.Description != nil ||
		len(got.Secrets) != 1 || got.Secrets[0].ExpiresAt != nil {
		t.Fatalf("answer %+v", got)
	}
}

// Each route is sent as the API document names it: its method and path (ids escaped), a body
// only where one is meant, and an Idempotency-Key on every mutating call and no read.
func TestWebhookEndpointRoutes_MethodPathBodyAndKey(t *testing.T) {
	const id = "we_4t7kq2m5xv3nb6ydz2wjc7hgra"
	empty, disabled := "", true
	for _, tc := range []struct {
		name     string
		answer   func(http.ResponseWriter, *http.Request, []byte)
		call     func(*Client) error
		method   string
		path     string
		rawQuery string
		body     string
	}{
		{"list", jsonAnswer(200, `{"items":[`+endpointAnswer+`}],"next":null}`), func(c *Client) error {
			n := 0
			for e, err := range c.WebhookEndpoints(context.Background()) {
				if err != nil {
					return err
				}
				if e.Id != id {
					t.Errorf("listed %+v", e)
				}
				n++
			}
			if n != 1 {
				t.Errorf("%d endpoints listed, want 1", n)
			}
			return nil
		}, "GET", "/v1/webhook-endpoints", "", ""},
		{"get", jsonAnswer(200, endpointAnswer+`}`), func(c *Client) error {
			e, err := c.GetWebhookEndpoint(context.Background(), id)
			if err == nil && (e.Id != id || e.Url != "http://127.0.0.1:9/hook" || e.Disabled) {
				t.Errorf("read %+v", e)
			}
			return err
		}, "GET", "/v1/webhook-endpoints/" + id, "", ""},
		{"update", jsonAnswer(200, endpointAnswer+`}`), func(c *Client) error {
			// An empty description is sent, not dropped: it is how the description is removed.
			_, err := c.UpdateWebhookEndpoint(context.Background(), id, UpdateWebhookEndpointRequest{Description: &empty, Disabled: &disabled})
			return err
		}, "PATCH", "/v1/webhook-endpoints/" + id, "", `{"description":"","disabled":true}`},
		{"delete", func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(204) }, func(c *Client) error {
			return c.DeleteWebhookEndpoint(context.Background(), id)
		}, "DELETE", "/v1/webhook-endpoints/" + id, "", ""},
		{"rotate", jsonAnswer(200, endpointAnswer+`,"secret":"whsec_ujdZKLH6rzzed/aH4YV/LvkOqkbJFYqOJk/v7bUSni0=","previousSecretExpiresAt":"2026-11-17T09:00:00.000Z"}`),
			func(c *Client) error {
				r, err := c.RotateWebhookEndpointSecret(context.Background(), id)
				if err == nil && (r.Secret != "whsec_ujdZKLH6rzzed/aH4YV/LvkOqkbJFYqOJk/v7bUSni0=" || r.PreviousSecretExpiresAt == nil ||
					!r.PreviousSecretExpiresAt.Equal(time.Date(2026, 11, 17, 9, 0, 0, 0, time.UTC))) {
					t.Errorf("rotated %+v", r)
				}
				return err
			}, "POST", "/v1/webhook-endpoints/" + id + "/rotate-secret", "", ""},
		{"replay", jsonAnswer(202, strings.Replace(deliveryAnswer, `"status":"DELIVERED"`, `"status":"PENDING"`, 1)), func(c *Client) error {
			d, err := c.ReplayWebhookDelivery(context.Background(), id, "ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr")
			if err == nil && (d.Status != WebhookDeliveryStatusPENDING || d.Notification != "ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr") {
				t.Errorf("replayed %+v", d)
			}
			return err
		}, "POST", "/v1/webhook-endpoints/" + id + "/deliveries/ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr/replay", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){tc.answer}}
			c := newTestClient(t, s, Config{})
			if err := tc.call(c); err != nil {
				t.Fatal(err)
			}
			reqs := s.recorded()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.method != tc.method || r.path != tc.path || r.rawQuery != tc.rawQuery || string(r.body) != tc.body {
				t.Fatalf("sent %s %s?%s %q\nwant %s %s?%s %q", r.method, r.path, r.rawQuery, r.body, tc.method, tc.path, tc.rawQuery, tc.body)
			}
			if mutating := tc.method != http.MethodGet; (r.idempotencyKey != "") != mutating {
				t.Fatalf("a %s sent Idempotency-Key %q", tc.method, r.idempotencyKey)
			}
			if (r.header.Get("Content-Type") != "") != (tc.body != "") {
				t.Fatalf("Content-Type %q with body %q", r.header.Get("Content-Type"), r.body)
			}
		})
	}
	// An id is escaped: it arrives as one segment of the path, never as a query.
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){func(w http.ResponseWriter, r *http.Request, b []byte) {
		if r.URL.RawPath != "/v1/webhook-endpoints/we_a%2Fb%3Fc" {
			t.Errorf("raw path %q", r.URL.RawPath)
		}
		jsonAnswer(200, endpointAnswer+`}`)(w, r, b)
	}}}
	if _, err := newTestClient(t, s, Config{}).GetWebhookEndpoint(context.Background(), "we_a/b?c"); err != nil {
		t.Fatal(err)
	}
}

// The delivery log is read page after page, each page asking for the cursor the one before
// answered, until a page answers none.
func TestWebhookDeliveries_FollowsCursorsToTheEnd(t *testing.T) {
	second := strings.Replace(deliveryAnswer, "ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr", "ntf_b3kz7q2m5xv3nb6ydz2wjc7hgr", 1)
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){
		jsonAnswer(200, `{"items":[`+deliveryAnswer+`],"next":"c2"}`),
		jsonAnswer(200, `{"items":[`+second+`],"next":null}`),
	}}
	c := newTestClient(t, s, Config{})
	limit := 1
	var got []string
	for d, err := range c.WebhookDeliveries(context.Background(), "we_4t7kq2m5xv3nb6ydz2wjc7hgra", ListWebhookDeliveriesParams{Limit: &limit}) {
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != WebhookDeliveryStatusDELIVERED || d.Kind != ThresholdCrossed || d.LastStatus == nil || *d.LastStatus != 204 {
			t.Fatalf("delivery %+v", d)
		}
		got = append(got, d.Notification)
	}
	reqs := s.recorded()
	if len(got) != 2 || got[1] != "ntf_b3kz7q2m5xv3nb6ydz2wjc7hgr" || len(reqs) != 2 {
		t.Fatalf("read %v in %d requests", got, len(reqs))
	}
	if reqs[0].path != "/v1/webhook-endpoints/we_4t7kq2m5xv3nb6ydz2wjc7hgra/deliveries" || reqs[0].rawQuery != "limit=1" || reqs[1].rawQuery != "cursor=c2&limit=1" {
		t.Fatalf("asked %s?%s then ?%s", reqs[0].path, reqs[0].rawQuery, reqs[1].rawQuery)
	}
}

// Ferry's refusals come back as their kinds and are not retried: an unknown endpoint, a
// rotation that raced another, a registration that names its problems.
func TestWebhookEndpoints_Refusals_TypedAndNotRetried(t *testing.T) {
	ctx := context.Background()
	const id = "we_4t7kq2m5xv3nb6ydz2wjc7hgra"
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request, []byte)
		call   func(*Client) error
		check  func(error) bool
	}{
		{"unknown endpoint", problemAnswer(404, "not-found", ""), func(c *Client) error { return c.DeleteWebhookEndpoint(ctx, id) },
			func(err error) bool { var e *NotFoundError; return errors.As(err, &e) }},
		{"rotation raced", problemAnswer(409, "conflict", ""), func(c *Client) error { _, err := c.RotateWebhookEndpointSecret(ctx, id); return err },
			func(err error) bool { var e *ConflictError; return errors.As(err, &e) }},
		{"delivery being sent", problemAnswer(409, "conflict", ""), func(c *Client) error {
			_, err := c.ReplayWebhookDelivery(ctx, id, "ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr")
			return err
		}, func(err error) bool { var e *ConflictError; return errors.As(err, &e) }},
		{"registration refused", problemAnswer(400, "invalid-request", `,"errors":["url: https only","kinds: unknown kind usage.spike"]`),
			func(c *Client) error {
				_, err := c.CreateWebhookEndpoint(ctx, CreateWebhookEndpointRequest{Url: "ftp://x"})
				return err
			}, func(err error) bool { var e *InvalidRequestError; return errors.As(err, &e) && len(e.Errors) == 2 }},
		{"deliveries of an unknown endpoint", problemAnswer(404, "not-found", ""), func(c *Client) error {
			for _, err := range c.WebhookDeliveries(ctx, id, ListWebhookDeliveriesParams{}) {
				return err
			}
			return nil
		}, func(err error) bool { var e *NotFoundError; return errors.As(err, &e) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){tc.answer}}
			err := tc.call(newTestClient(t, s, Config{MaxAttempts: 5}))
			if !tc.check(err) {
				t.Fatalf("err %#v", err)
			}
			if n := len(s.recorded()); n != 1 {
				t.Fatalf("%d attempts, want 1", n)
			}
		})
	}
}

// A call that names no endpoint would name the collection instead: it is refused unsent.
func TestWebhookEndpoints_EmptyID_RefusedBeforeSending(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){jsonAnswer(200, `{}`)}}
	c := newTestClient(t, s, Config{})
	ctx := context.Background()
	_, getErr := c.GetWebhookEndpoint(ctx, "")
	_, updateErr := c.UpdateWebhookEndpoint(ctx, "", UpdateWebhookEndpointRequest{})
	_, rotateErr := c.RotateWebhookEndpointSecret(ctx, "")
	_, replayErr := c.ReplayWebhookDelivery(ctx, "we_x", "")
	var logErr error
	for _, err := range c.WebhookDeliveries(ctx, "", ListWebhookDeliveriesParams{}) {
		logErr = err
	}
	for i, err := range []error{getErr, updateErr, c.DeleteWebhookEndpoint(ctx, ""), rotateErr, replayErr, logErr} {
		if err == nil {
			t.Errorf("call %d took an empty id", i)
		}
	}
	if n := len(s.recorded()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// newServerSecret makes a secret as Ferry does: "whsec_" and the standard base64 of 32 random
// bytes.
func newServerSecret(t *testing.T) string {
	t.Helper()
	var key [32]byte
	rand.Read(key[:])
	return "whsec_" + base64.StdEncoding.EncodeToString(key[:])
}

// serverDelivery signs body as Ferry's sender does: the three headers set in Go's canonical
// form, the timestamp in unix seconds, one signature per secret, newest first, space-separated.
func serverDelivery(t *testing.T, id string, at time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	var sigs []string
	for _, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := wh.Sign(id, at, body)
		if err != nil {
			t.Fatal(err)
		}
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, strings.Join(sigs, " "))
	return h
}

// A notification as Ferry sends it verifies and decodes to its kind and data; during a
// rotation's overlap either secret verifies it; a changed body, a changed header or another
// secret does not.
func TestWebhookVerifier_VerifyMessage_AsFerrySends(t *testing.T) {
	const id = "ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr"
	body := []byte(`{"id":"` + id + `","type":"threshold.crossed","timestamp":"2026-11-15T12:00:00.000Z",` +
		`"data":{"account":"acct_1","feature":"events","meter":"events","cycle":"2026-11","threshold":80,"percent":80,"limit":100,"used":85}}`)
	current, previous := newServerSecret(t), newServerSecret(t)
	now := time.Now()
	h := serverDelivery(t, id, now, body, current, previous)
	for _, secret := range []string{current, previous} {
		v, err := NewWebhookVerifier(secret)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := v.VerifyMessage(body, h)
		if err != nil {
			t.Fatalf("a delivery signed with both secrets: %v", err)
		}
		d := msg.Data
		if msg.Id != id || msg.Type != ThresholdCrossed || !msg.Timestamp.Equal(time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)) ||
			strOf(d.Account) != "acct_1" || strOf(d.Feature) != "events" || strOf(d.Meter) != "events" || strOf(d.Cycle) != "2026-11" ||
			intOf(d.Threshold) != 80 || intOf(d.Percent) != 80 || intOf(d.Limit) != 100 || intOf(d.Used) != 85 {
			t.Fatalf("message %+v", msg)
		}
	}
	v, _ := NewWebhookVerifier(current)
	tampered := []byte(strings.Replace(string(body), `"used":85`, `"used":8`, 1))
	if _, err := v.VerifyMessage(tampered, h); err == nil {
		t.Fatal("a tampered body verified")
	}
	other := h.Clone()
	other.Set(standardwebhooks.HeaderWebhookID, "ntf_b3kz7q2m5xv3nb6ydz2wjc7hgr")
	if _, err := v.VerifyMessage(body, other); err == nil {
		t.Fatal("a changed webhook-id verified")
	}
	stranger, _ := NewWebhookVerifier(newServerSecret(t))
	if _, err := stranger.VerifyMessage(body, h); err == nil {
		t.Fatal("another endpoint's secret verified")
	}
	if _, err := v.VerifyMessage(body, http.Header{}); err == nil {
		t.Fatal("a delivery without its headers verified")
	}

	// limit.reached has no threshold; a kind added after this version decodes as sent.
	for _, tc := range []struct {
		kind  string
		valid bool
	}{{"limit.reached", true}, {"usage.spike", false}} {
		b := []byte(`{"id":"` + id + `","type":"` + tc.kind + `","timestamp":"2026-11-15T12:00:00.000Z",` +
			`"data":{"account":"acct_1","feature":"events","cycle":"2026-11","limit":100,"used":100}}`)
		msg, err := v.VerifyMessage(b, serverDelivery(t, id, now, b, current))
		if err != nil {
			t.Fatalf("%s: %v", tc.kind, err)
		}
		if string(msg.Type) != tc.kind || msg.Type.Valid() != tc.valid || msg.Data.Threshold != nil || intOf(msg.Data.Used) != 100 {
			t.Fatalf("%s: %+v", tc.kind, msg)
		}
	}
	// A verified body that is not a notification is an error, not a zero message.
	notJSON := []byte("not json")
	if _, err := v.VerifyMessage(notJSON, serverDelivery(t, id, now, notJSON, current)); err == nil {
		t.Fatal("a body that is not JSON decoded")
	}
}

// An account's thresholds are sent as the API document spells them.
func TestThresholds_EncodeAsTheDocumentSpellsThem(t *testing.T) {
	b, err := json.Marshal(CreateAccountRequest{Id: "acct_1", Alerts: &Alerts{"events": {ThresholdPercent(80), ThresholdValue(500)}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"alerts":{"events":[{"percent":80},{"value":500}]},"id":"acct_1"}`; string(b) != want {
		t.Fatalf("sent %s\nwant %s", b, want)
	}
	var a Account
	if err := json.Unmarshal([]byte(`{"alerts":{"events":[{"percent":80},{"percent":100}]}}`), &a); err != nil {
		t.Fatal(err)
	}
	p, err := a.Alerts["events"][1].AsThreshold0()
	if err != nil || p.Percent != 100 {
		t.Fatalf("read %+v, %v", p, err)
	}
}

// intOf and strOf read a message's optional members in tests: -1 and "<none>" when absent.
func intOf(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

func strOf(p *string) string {
	if p == nil {
		return "<none>"
	}
	return *p
}
