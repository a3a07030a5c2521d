package inbox_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	standin "github.com/ferrymeter/ferry/internal/devkit/standin/stripeobjects"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
	"github.com/ferrymeter/ferry/internal/webhooks/stripe/objects"
)

// With the re-fetch on, the worker reads a Stripe event's object again from Stripe's API (a
// stand-in here, through stripe-go's client) and acts on that, not on the copy in the payload:
// a subscription whose payload still shows plus but that Stripe now holds as canceled moves the
// account to the default plan. A re-fetch that fails is a failed attempt, retried later.
func TestRefetch_ActsOnTheObjectAsStripeHoldsItNow(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "", "cus_1")
	api := standin.New("sk_test_ferry")
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	client, err := objects.New(objects.Config{APIBase: srv.URL, APIKey: "sk_test_ferry"})
	if err != nil {
		t.Fatal(err)
	}
	h.worker().Interpreters[inbox.Stripe] = stripewebhook.Interpreter{Refetch: client}
	now, _ := json.Marshal(subscription("sub_1", "cus_1", "price_ferry_plus_monthly", "canceled"))
	api.PutSubscription("sub_1", now)

	body := stripeEvent(t, "evt_1", "customer.subscription.updated", start, subscription("sub_1", "cus_1", "price_ferry_plus_monthly", "active"))
	if r := h.postStripe(t, body); r.Status != http.StatusOK {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	id := inbox.ID(inbox.Stripe, "evt_1")
	api.Fail(http.StatusInternalServerError)
	out, err := h.process(t, id)
	if err != nil || out.Status != inbox.Failed {
		t.Fatalf("with Stripe failing: %+v %v; want FAILED (retried later)", out, err)
	}
	if e := h.event(t, id); !strings.Contains(e.Reason, "re-fetch subscription sub_1") {
		t.Errorf("reason %q", e.Reason)
	}
	api.Fail(0)
	h.Clock.Advance(inbox.Backoff[0])
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Applied {
		t.Fatalf("%+v %v", out, err)
	}
	acct, _ := h.accounts().Get(t.Context(), "acct_1")
	if acct.Plan != "free" {
		t.Errorf("plan %s; want free: Stripe holds the subscription as canceled", acct.Plan)
	}
	if api.Calls() < 2 {
		t.Errorf("%d calls to the stand-in", api.Calls())
	}
}

// Without the re-fetch, the payload is what the event says.
func TestRefetch_OffByDefault(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "", "cus_1")
	body := stripeEvent(t, "evt_1", "customer.subscription.updated", start, subscription("sub_1", "cus_1", "price_ferry_plus_monthly", "active"))
	if r := h.postStripe(t, body); r.Status != http.StatusOK {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	h.Clock.Advance(time.Second)
	h.settle(t)
	acct, _ := h.accounts().Get(t.Context(), "acct_1")
	if acct.Plan != "plus" {
		t.Errorf("plan %s; want plus", acct.Plan)
	}
}
