package httpapi_test

// Fuzz targets of the bodies fuzz_test.go does not cover: the operator's correction, reconcile
// and run-now bodies, a replay's, and the two webhook intakes. Each checks what fuzz_test.go's
// do checks (a problem document or the documented success, never a 5xx, nothing written for a
// refused input) and, for what is accepted, that it is stored as sent.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// doWith is do with extra headers (pairs).
func (s *fuzzStack) doWith(t *testing.T, method, path, key string, body []byte, headers []string, successes ...int) apptest.Response {
	t.Helper()
	s.writes.reset()
	s.queue.sent = nil
	r := s.h.Do(t, method, path, key, body, headers...)
	s.judge(t, r, body, successes)
	return r
}

func FuzzCorrection(f *testing.F) {
	s := newFuzzStack(f, "correction")
	n := 0
	f.Fuzz(func(t *testing.T, body []byte) {
		n++
		key := fmt.Sprintf("fuzz-correction-%d", n)
		r := s.doWith(t, "POST", "/v1/usage/corrections", apptest.AdminKey, body, []string{"Idempotency-Key", key}, http.StatusCreated)
		if r.Status != http.StatusCreated {
			return
		}
		var sent, got struct {
			Account, Feature, Reason, Cycle string
			Units                           int64
		}
		member(t, body, "account", &sent.Account)
		member(t, body, "feature", &sent.Feature)
		member(t, body, "reason", &sent.Reason)
		member(t, body, "units", &sent.Units)
		hasCycle := member(t, body, "cycle", &sent.Cycle)
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Account != sent.Account || got.Feature != sent.Feature || got.Reason != sent.Reason || got.Units != sent.Units ||
			hasCycle && sent.Cycle != "" && got.Cycle != sent.Cycle {
			t.Fatalf("sent %s; stored %s", body, r.Body)
		}
	})
}

func FuzzReconcile(f *testing.F) {
	s := newFuzzStack(f, "reconcile")
	f.Fuzz(func(t *testing.T, body []byte) {
		r := s.do(t, "POST", "/v1/reconcile", apptest.AdminKey, body, http.StatusOK)
		if r.Status != http.StatusOK {
			return
		}
		var sent struct{ Account, Cycle string }
		var got struct {
			Results []struct{ Account, Cycle string }
		}
		if len(trimJSONSpace(body)) > 0 {
			member(t, body, "account", &sent.Account)
			member(t, body, "cycle", &sent.Cycle)
		}
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatal(err)
		}
		for _, res := range got.Results {
			if sent.Account != "" && res.Account != sent.Account || sent.Cycle != "" && res.Cycle != sent.Cycle {
				t.Fatalf("asked for %s; reconciled %s", body, r.Body)
			}
		}
	})
}

// FuzzEmptyBody: the two routes whose body, if any, is an empty JSON object (run the reporter
// now; replay a billing event) read it the same strict way.
func FuzzEmptyBody(f *testing.F) {
	s := newFuzzStack(f, "empty-body")
	path, raw, headers := s.h.Webhook(f, "stripe", "invoice_paid_basil")
	stored := s.h.Do(f, "POST", path, "", raw, headers...)
	if stored.Status != http.StatusOK {
		f.Fatalf("store a billing event: %d %s", stored.Status, stored.Body)
	}
	id := stored.JSON(f)["id"].(string)
	f.Fuzz(func(t *testing.T, body []byte) {
		s.do(t, "POST", "/v1/report", apptest.AdminKey, body, http.StatusOK)
		r := s.do(t, "POST", "/v1/billing-events/"+url.PathEscape(id)+"/replay", apptest.AdminKey, body, http.StatusAccepted)
		if r.Status == http.StatusAccepted && r.JSON(t)["status"] != string(inbox.Received) {
			t.Fatalf("replayed: %s", r.Body)
		}
	})
}

// checkStored checks an accepted delivery is stored under the provider's event id: a first
// delivery with one receipt, of exactly the payload that was signed; a copy counted once more.
func checkStored(t *testing.T, s *fuzzStack, r apptest.Response, eventID string, payload []byte) {
	t.Helper()
	var answer struct {
		ID        string
		Duplicate bool
	}
	if err := json.Unmarshal(r.Body, &answer); err != nil {
		t.Fatal(err)
	}
	got := s.h.Do(t, "GET", "/v1/billing-events/"+url.PathEscape(answer.ID), apptest.AdminKey, nil)
	var e struct {
		ProviderEventID string
		SeenCount       int
		Receipts        []struct{ PayloadSHA256 string }
	}
	if got.Status != http.StatusOK || json.Unmarshal(got.Body, &e) != nil {
		t.Fatalf("stored delivery %s reads back %d %s", answer.ID, got.Status, got.Body)
	}
	if e.ProviderEventID != eventID {
		t.Fatalf("sent event id %q; stored %s", eventID, got.Body)
	}
	s.seen[answer.ID]++
	if answer.Duplicate != (s.seen[answer.ID] > 1) || e.SeenCount != s.seen[answer.ID] {
		t.Fatalf("delivery %d of %q answered %s; stored %s", s.seen[answer.ID], eventID, r.Body, got.Body)
	}
	if !answer.Duplicate && (len(e.Receipts) != 1 || e.Receipts[0].PayloadSHA256 != inbox.PayloadSHA256(payload)) {
		t.Fatalf("sent payload %s (%q); stored %s", inbox.PayloadSHA256(payload), payload, got.Body)
	}
}

// signKinde signs claims, byte for byte as given, as a Kinde webhook token (RS256, the signer's
// kid): the claims reach the verifier exactly as the fuzzer wrote them, duplicates and all.
func signKinde(t testing.TB, s *fuzzStack, claims []byte) string {
	t.Helper()
	signer := s.h.Signer(t)
	header, err := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": signer.KeyID()})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	sig, err := jwt.SigningMethodRS256.Sign(signing, signer.PrivateKey())
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc.EncodeToString(sig)
}

// FuzzKindeWebhook: each input is used twice — as a token's claims, signed with the key Kinde
// publishes (the verifier must store exactly those claims or refuse them), and as the body
// itself (no valid signature: always refused, nothing stored).
func FuzzKindeWebhook(f *testing.F) {
	s := newFuzzStack(f, "kinde-webhook")
	s.h.Signer(f)
	// The target's signing is the verifier's: a genuine token of the target's making is stored,
	// so what the fuzzer sees refused is refused for what it wrote.
	genuine := []byte(`{"type":"customer.payment_succeeded","event_id":"event_fuzz_genuine","timestamp":"` + s.h.Clock.Now().Format(time.RFC3339) + `"}`)
	if r := s.h.Do(f, "POST", "/v1/webhooks/kinde", "", []byte(signKinde(f, s, genuine)), "Content-Type", "application/jwt"); r.Status != http.StatusOK {
		f.Fatalf("a genuine token: %d %s", r.Status, r.Body)
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		headers := []string{"Content-Type", "application/jwt", "webhook-id", "msg_fuzz"}
		token := signKinde(t, s, input)
		r := s.doWith(t, "POST", "/v1/webhooks/kinde", "", []byte(token), headers, http.StatusOK)
		if r.Status == http.StatusOK {
			var c struct {
				EventID string `json:"event_id"`
			}
			if err := json.Unmarshal(input, &c); err != nil {
				t.Fatalf("accepted claims do not decode: %v", err)
			}
			checkStored(t, s, r, c.EventID, input)
		}
		raw := s.doWith(t, "POST", "/v1/webhooks/kinde", "", input, headers, http.StatusOK)
		if raw.Status == http.StatusOK {
			t.Fatalf("an unsigned body was accepted as a Kinde token: %q", input)
		}
		if w := s.refusedWrites(); w != 0 {
			t.Fatalf("a refused token made %d DynamoDB writes: %q", w, input)
		}
	})
}

// FuzzStripeWebhook: each input is a body signed as Stripe signs it now (stored exactly, or
// refused as not an event Ferry stores), and the same body unsigned (always refused).
func FuzzStripeWebhook(f *testing.F) {
	s := newFuzzStack(f, "stripe-webhook")
	genuine := []byte(`{"id":"evt_fuzz_genuine","object":"event","type":"invoice.paid","created":1763208000,"data":{"object":{"id":"in_1","object":"invoice"}}}`)
	if r := s.h.Do(f, "POST", "/v1/webhooks/stripe", "", genuine, "Content-Type", "application/json", "Stripe-Signature", stripewebhook.Sign(genuine, apptest.StripeSecret, time.Now())); r.Status != http.StatusOK {
		f.Fatalf("a genuine delivery: %d %s", r.Status, r.Body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sig := stripewebhook.Sign(body, apptest.StripeSecret, time.Now())
		headers := []string{"Content-Type", "application/json", "Stripe-Signature", sig}
		r := s.doWith(t, "POST", "/v1/webhooks/stripe", "", body, headers, http.StatusOK)
		if r.Status == http.StatusOK {
			var ev struct{ ID string }
			if err := json.Unmarshal(body, &ev); err != nil {
				t.Fatalf("an accepted event does not decode: %v", err)
			}
			checkStored(t, s, r, ev.ID, body)
		}
		unsigned := s.doWith(t, "POST", "/v1/webhooks/stripe", "", body, []string{"Content-Type", "application/json"}, http.StatusOK)
		if unsigned.Status != http.StatusUnauthorized {
			t.Fatalf("an unsigned Stripe delivery: %d %s", unsigned.Status, unsigned.Body)
		}
		if w := s.refusedWrites(); w != 0 {
			t.Fatalf("an unsigned delivery made %d DynamoDB writes", w)
		}
	})
}
