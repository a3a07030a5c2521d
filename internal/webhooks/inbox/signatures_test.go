package inbox_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	signer "github.com/ferrymeter/ferry/internal/devkit/kindesigner"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// forge signs claims with any method and key, and a kid header.
func forge(t *testing.T, method jwt.SigningMethod, key any, kid string, claims map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, jwt.MapClaims(claims))
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertNothingStored is how a refusal is checked: the inbox table holds no item at all.
func (h *harness) assertNothingStored(t *testing.T) {
	t.Helper()
	if n := h.tableItems(t, resources.TableInbox); n != 0 {
		t.Errorf("the inbox table holds %d items after refused deliveries; want none", n)
	}
}

// Every kind of Kinde delivery that cannot be verified is answered 401 and stores nothing.
func TestKindeWebhook_UnverifiableStoresNothing(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	sign := h.Signer(t)
	now := h.Clock.Now()
	e := kindeEvent{id: "event_1", typ: "customer.plan_changed", at: now.Add(-time.Minute), customer: "customer_1", plan: "customer_pro_plan"}
	good := e.claims(now)
	with := func(k string, v any) map[string]any {
		c := e.claims(now)
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	kid := sign.KeyID()
	publicDER := sign.PrivateKey().PublicKey.N.Bytes()
	valid := forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), kid, good)
	parts := strings.Split(valid, ".")
	unsigned := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"`+kid+`"}`)) + "." + parts[1] + "."
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(mustDecode(t, parts[1])), "customer_pro_plan", "customer_gold_plan", 1))) + "." + parts[2]
	for _, c := range []struct {
		name   string
		token  string
		reason string
	}{
		{"signed by another key under Kinde's kid", forge(t, jwt.SigningMethodRS256, other, kid, good), "does not verify"},
		{"a payload changed after signing", tampered, "does not verify"},
		{"an unknown kid", forge(t, jwt.SigningMethodRS256, other, "kid-nobody-publishes", good), "a key Kinde does not publish"},
		{"alg none", unsigned, "RS256"},
		{"HS256 keyed with the public key", forge(t, jwt.SigningMethodHS256, publicDER, kid, good), "RS256"},
		{"RS512 with Kinde's key", forge(t, jwt.SigningMethodRS512, sign.PrivateKey(), kid, good), "RS256"},
		{"PS256 with Kinde's key", forge(t, jwt.SigningMethodPS256, sign.PrivateKey(), kid, good), "RS256"},
		{"expired", forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), kid, with("exp", now.Add(-time.Hour).Unix())), "expired"},
		{"not valid yet", forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), kid, with("nbf", now.Add(time.Hour).Unix())), "not valid yet"},
		{"sent 72 hours ago: a replay", forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), kid, with("timestamp", kindeTime(now.Add(-72*time.Hour-time.Minute)))), "replays"},
		{"sent in the future", forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), kid, with("timestamp", kindeTime(now.Add(time.Hour)))), "future"},
		{"no timestamp", forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), kid, with("timestamp", nil)), "timestamp"},
		{"a timestamp it can only read by rounding", forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), kid, with("timestamp", "2026-11-15T12:00:00.1234567891Z")), "timestamp"},
		{"no event_id, and sent 72 hours ago: the replay is what is refused", forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), kid, with2(with, "event_id", nil, "timestamp", kindeTime(now.Add(-73*time.Hour)))), "replays"},
		{"not a JWT", "this is not a token", "well-formed"},
		{"two segments", parts[0] + "." + parts[1], "well-formed"},
		{"an empty body", "", "empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(c.token), "Content-Type", "application/jwt")
			if r.Status != http.StatusUnauthorized || r.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(r.Body), c.reason) {
				t.Errorf("%d %s %s; want 401 problem+json saying %q", r.Status, r.Header.Get("Content-Type"), r.Body, c.reason)
			}
		})
	}
	h.assertNothingStored(t)
	if got := h.Counter.Get(metrics.WebhooksRefused); got < 15 {
		t.Errorf("WebhooksRefused %d", got)
	}
	// A token 71 hours old is a genuine late retry (Kinde retries for 36 hours): stored.
	late := forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), kid, with("timestamp", kindeTime(now.Add(-71*time.Hour))))
	if r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(late), "Content-Type", "application/jwt"); r.Status != http.StatusOK {
		t.Errorf("a 71-hour-old token: %d %s; want 200", r.Status, r.Body)
	}
}

// with2 changes two claims.
func with2(with func(string, any) map[string]any, k1 string, v1 any, k2 string, v2 any) map[string]any {
	c := with(k1, v1)
	if v2 == nil {
		delete(c, k2)
	} else {
		c[k2] = v2
	}
	return c
}

// A token Kinde signed, sent now, that is not an event Ferry can store — no event_id (its dedupe
// key), an empty one or one that is no id, no type — is answered 400, as Stripe's route answers a signed
// event without an id: the signature verified, so it is not a 401. Nothing is stored, and it is
// not counted as a refused signature.
func TestKindeWebhook_SignedWithoutEventIDOrTypeIs400(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	sign := h.Signer(t)
	now := h.Clock.Now()
	e := kindeEvent{id: "event_1", typ: "customer.plan_changed", at: now.Add(-time.Minute), customer: "customer_1", plan: "customer_pro_plan"}
	for _, c := range []struct {
		name, claim string
		value       any
		reason      string
	}{
		{"no event_id", "event_id", nil, "no usable event_id"},
		{"an empty event_id", "event_id", "", "no usable event_id"},
		{"an event_id that is no id", "event_id", "event 1\n", "no usable event_id"},
		{"no type", "type", nil, "no type claim"},
	} {
		t.Run(c.name, func(t *testing.T) {
			claims := e.claims(now)
			if c.value == nil {
				delete(claims, c.claim)
			} else {
				claims[c.claim] = c.value
			}
			r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), sign.KeyID(), claims)), "Content-Type", "application/jwt")
			if r.Status != http.StatusBadRequest || r.Header.Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(string(r.Body), "invalid-request") || !strings.Contains(string(r.Body), c.reason) {
				t.Errorf("%d %s; want 400 invalid-request saying %q", r.Status, r.Body, c.reason)
			}
		})
	}
	h.assertNothingStored(t)
	if got := h.Counter.Get(metrics.WebhooksRefused); got != 0 {
		t.Errorf("WebhooksRefused %d: a signed token was counted as a refused signature", got)
	}
}

func mustDecode(t *testing.T, seg string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Deliveries that are not the right shape are refused before verification: 415 for another
// media type, 413 over 256 KiB. Nothing is stored.
func TestWebhooks_WrongMediaTypeAndOversizeStoreNothing(t *testing.T) {
	h := newHarness(t)
	token := h.token(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "c", plan: "customer_pro_plan"})
	if r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(token), "Content-Type", "application/json"); r.Status != http.StatusUnsupportedMediaType {
		t.Errorf("Kinde as JSON: %d %s; want 415", r.Status, r.Body)
	}
	big := []byte(strings.Repeat("a", 256<<10+1))
	if r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", big, "Content-Type", "application/jwt"); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("Kinde over 256 KiB: %d; want 413", r.Status)
	}
	body := stripeEvent(t, "evt_1", "invoice.paid", start, invoice("in_1", "cus_1", "price_ferry_plus_monthly"))
	if r := h.send(t, http.MethodPost, "/v1/webhooks/stripe", body, "Content-Type", "text/plain", "Stripe-Signature", stripewebhook.Sign(body, apptest.StripeSecret, time.Now())); r.Status != http.StatusUnsupportedMediaType {
		t.Errorf("Stripe as text: %d; want 415", r.Status)
	}
	if r := h.send(t, http.MethodPost, "/v1/webhooks/stripe", big, "Content-Type", "application/json", "Stripe-Signature", stripewebhook.Sign(big, apptest.StripeSecret, time.Now())); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("Stripe over 256 KiB: %d; want 413", r.Status)
	}
	h.assertNothingStored(t)
}

// Every kind of Stripe delivery that cannot be verified is answered 401 and stores nothing; a
// signed body that is not an event is answered 400 and stores nothing.
func TestStripeWebhook_UnverifiableStoresNothing(t *testing.T) {
	h := newHarness(t)
	body := stripeEvent(t, "evt_1", "invoice.paid", start, invoice("in_1", "cus_1", "price_ferry_plus_monthly"))
	now := time.Now()
	for _, c := range []struct {
		name, header, reason string
	}{
		{"no Stripe-Signature header", "", "no Stripe-Signature header"},
		{"a malformed header", "t=not-a-time,v1=abc", "malformed"},
		{"another endpoint's secret", stripewebhook.Sign(body, "whsec_other", now), "no v1 signature"},
		{"a stale timestamp", stripewebhook.Sign(body, apptest.StripeSecret, now.Add(-6*time.Minute)), "more than 5m0s old"},
		{"a timestamp an hour ahead", stripewebhook.Sign(body, apptest.StripeSecret, now.Add(time.Hour)), "in the future"},
		{"a timestamp a year ahead", stripewebhook.Sign(body, apptest.StripeSecret, now.AddDate(1, 0, 0)), "in the future"},
		{"a v0 signature only", "t=" + itoa(now.Unix()) + ",v0=" + strings.Repeat("ab", 32), "no v1 signature"},
	} {
		t.Run(c.name, func(t *testing.T) {
			headers := []string{"Content-Type", "application/json"}
			if c.header != "" {
				headers = append(headers, "Stripe-Signature", c.header)
			}
			r := h.send(t, http.MethodPost, "/v1/webhooks/stripe", body, headers...)
			if r.Status != http.StatusUnauthorized || !strings.Contains(string(r.Body), c.reason) {
				t.Errorf("%d %s; want 401 saying %q", r.Status, r.Body, c.reason)
			}
		})
	}
	thin := []byte(`{"id":"evt_thin","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered","created":"2026-11-15T12:00:00Z"}`)
	if r := h.send(t, http.MethodPost, "/v1/webhooks/stripe", thin, "Content-Type", "application/json", "Stripe-Signature", stripewebhook.Sign(thin, apptest.StripeSecret, now)); r.Status != http.StatusBadRequest {
		t.Errorf("a thin event: %d %s; want 400", r.Status, r.Body)
	}
	h.assertNothingStored(t)
}

// Keys are cached and fetched again when a token names a kid the cache lacks (a rotation), but
// at most once per interval: a flood of unknown kids makes one fetch, not one each.
func TestKindeWebhook_UnknownKidRefetchedAtABoundedRate(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	sign := h.Signer(t)
	deliver := func(id string) int {
		return h.send(t, http.MethodPost, "/v1/webhooks/kinde",
			[]byte(h.token(t, kindeEvent{id: id, typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"})),
			"Content-Type", "application/jwt").Status
	}
	if s := deliver("event_1"); s != http.StatusOK {
		t.Fatalf("first delivery: %d", s)
	}
	// Kinde rotates to a new published key: the first token under it refetches and verifies.
	if _, err := sign.Rotate(true); err != nil {
		t.Fatal(err)
	}
	if s := deliver("event_2"); s != http.StatusOK {
		t.Fatalf("a token under a rotated, published key: %d; want 200 after a refetch", s)
	}
	fetches := sign.Fetches()
	// A key nobody publishes: refused, and within the interval no more fetches, however many.
	if _, err := sign.Rotate(false); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if s := deliver("event_x" + itoa(int64(i))); s != http.StatusUnauthorized {
			t.Errorf("an unpublished key: %d; want 401", s)
		}
	}
	if got := sign.Fetches(); got != fetches {
		t.Errorf("%d JWKS fetches for five tokens under an unknown kid within the interval; want none more than %d", got, fetches)
	}
}

// When Kinde's keys cannot be fetched at all, no delivery can be verified: 503 (Ferry's side;
// Kinde retries), nothing stored. A deployment with no key URL answers the same.
func TestKindeWebhook_KeysUnavailableIs503(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	sign, err := signer.New()
	if err != nil {
		t.Fatal(err)
	}
	for name, url := range map[string]string{"unreachable keys": closed.URL + signer.JWKSPath, "no key URL": ""} {
		t.Run(name, func(t *testing.T) {
			h := &harness{Harness: apptest.New(t, apptest.Options{Start: start})}
			h.receiver().SetKindeJWKSURL(url)
			token, err := sign.Sign(kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "c", plan: "customer_pro_plan"}.claims(start))
			if err != nil {
				t.Fatal(err)
			}
			r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(token), "Content-Type", "application/jwt")
			if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
				t.Errorf("%d %s; want 503 with Retry-After", r.Status, r.Body)
			}
			h.assertNothingStored(t)
		})
	}
}

// A correctly signed delivery that could be read two ways — a member named twice, invalid UTF-8,
// an escaped lone surrogate — is refused 400 before anything is stored: the worker reads the
// stored payload again, and must read what was verified.
func TestWebhooks_SignedButAmbiguousStoresNothing(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "cus_1")
	now := h.Clock.Now()
	sent := kindeTime(now)
	claims := map[string]string{
		"a member named twice": `{"type":"customer.plan_changed","event_id":"event_1","event_id":"event_2","timestamp":"` + sent + `","data":{"customer_id":"customer_1"}}`,
		"invalid UTF-8":        `{"type":"customer.plan_changed","event_id":"event_1","timestamp":"` + sent + `","data":{"customer_id":"customer_1","note":"` + "\xff" + `"}}`,
		"a lone surrogate":     `{"type":"customer.plan_changed","event_id":"event_1","timestamp":"` + sent + `","data":{"customer_id":"\ud800"}}`,
	}
	key := h.Signer(t).PrivateKey()
	for name, payload := range claims {
		header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","kid":"` + h.Signer(t).KeyID() + `","typ":"JWT"}`))
		signing := header + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))
		sig, err := jwt.SigningMethodRS256.Sign(signing, key)
		if err != nil {
			t.Fatal(err)
		}
		r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(signing+"."+base64.RawURLEncoding.EncodeToString(sig)), "Content-Type", "application/jwt")
		if r.Status != http.StatusBadRequest {
			t.Errorf("Kinde, %s: %d %s; want 400", name, r.Status, r.Body)
		}
	}
	bodies := map[string]string{
		"a member named twice": `{"id":"evt_1","object":"event","type":"invoice.paid","type":"invoice.payment_failed","created":1,"data":{"object":{"object":"invoice","customer":"cus_1"}}}`,
		"invalid UTF-8":        `{"id":"evt_1","object":"event","type":"invoice.paid","created":1,"data":{"object":{"object":"invoice","customer":"cus_1","description":"` + "\xff" + `"}}}`,
	}
	for name, body := range bodies {
		sig := stripewebhook.Sign([]byte(body), apptest.StripeSecret, time.Now())
		r := h.send(t, http.MethodPost, "/v1/webhooks/stripe", []byte(body), "Content-Type", "application/json", "Stripe-Signature", sig)
		if r.Status != http.StatusBadRequest {
			t.Errorf("Stripe, %s: %d %s; want 400", name, r.Status, r.Body)
		}
	}
	h.assertNothingStored(t)
}
