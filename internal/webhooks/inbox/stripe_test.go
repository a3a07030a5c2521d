package inbox_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// stripeEvent is a Stripe event around a subscription or an invoice, as Stripe renders it.
func stripeEvent(t *testing.T, id, typ string, created time.Time, object map[string]any) []byte {
	t.Helper()
	body, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": "2025-03-31.basil", "created": created.Unix(), "livemode": false,
		"type": typ, "data": map[string]any{"object": object},
	})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func subscription(id, customer, price, status string) map[string]any {
	return map[string]any{"id": id, "object": "subscription", "customer": customer, "status": status,
		"items": map[string]any{"object": "list", "data": []any{map[string]any{"id": "si_1", "price": map[string]any{"id": price}}}}}
}

func invoice(id, customer, price string) map[string]any {
	return map[string]any{"id": id, "object": "invoice", "customer": customer, "status": "paid",
		"lines": map[string]any{"object": "list", "data": []any{map[string]any{"id": "il_1",
			"pricing": map[string]any{"type": "price_details", "price_details": map[string]any{"price": price}}}}}}
}

// postStripe delivers a Stripe event signed now (Stripe's signature is judged by the wall clock).
func (h *harness) postStripe(t *testing.T, body []byte) apptest.Response {
	t.Helper()
	return h.send(t, http.MethodPost, "/v1/webhooks/stripe", body,
		"Content-Type", "application/json; charset=utf-8", "Stripe-Signature", stripewebhook.Sign(body, apptest.StripeSecret, time.Now()))
}

func TestStripe_SubscriptionThenInvoice_PlanAndAllowanceOnce(t *testing.T) {
	h := newHarness(t)
	key := h.account(t, "acct_s", "", "cus_s")
	h.Clock.Set(start.Add(time.Hour))
	sub := stripeEvent(t, "evt_sub", "customer.subscription.created", start.Add(time.Minute), subscription("sub_1", "cus_s", "price_ferry_plus_monthly", "active"))
	paid := stripeEvent(t, "evt_paid", "invoice.paid", start.Add(2*time.Minute), invoice("in_1", "cus_s", "price_ferry_plus_monthly"))
	for _, body := range [][]byte{paid, sub, paid, sub} {
		if r := h.postStripe(t, body); r.Status != http.StatusOK {
			t.Fatalf("delivery: %d %s", r.Status, r.Body)
		}
	}
	h.settle(t)
	got := h.stateOf(t, key, "acct_s", []string{inbox.ID(inbox.Stripe, "evt_sub"), inbox.ID(inbox.Stripe, "evt_paid")})
	want := state{Plan: "plus", Status: "active", PlanChangedAt: start.Add(time.Minute).UnixMilli(), Grants: "free 10, plus 490",
		CreditsLimit: 500, Stored: 2, Seen: "2, 2", Receipts: 4}
	if got != want {
		t.Errorf("end state:\n got  %s\n want %s", got, want)
	}
}
