package inbox_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
)

// The allowance a plan change grants is what holds can spend: a fresh free account's credits
// show the opening it will get (free's 10) and admit up to it; after the upgrade, the cycle's
// limit is the sum of its rows (10 + 490) and holds spend up to 500, no more.
func TestAllowance_HoldsSpendTheSumOfTheGrantRows(t *testing.T) {
	h := newHarness(t)
	key := h.account(t, "acct_1", "customer_1", "")
	usage := func() map[string]any { return h.Do(t, http.MethodGet, "/v1/usage?feature=credits", key, nil).JSON(t) }
	hold := func(k string, amount int) apptest.Response {
		return h.Do(t, http.MethodPost, "/v1/holds", key, map[string]any{"key": k, "feature": "credits", "amount": amount})
	}
	if u := usage(); u["limit"] != float64(10) {
		t.Fatalf("a fresh account's credits: %v; want limit 10 (the opening it will get)", u)
	}
	if r := hold("job-1", 11); r.Status != http.StatusPaymentRequired {
		t.Fatalf("11 credits on free: %d %s; want 402", r.Status, r.Body)
	}
	// The refused admission opened the cycle: the row now exists.
	if c := h.grants(t, "acct_1", "2026-11"); c.Total() != 10 || len(c.Grants) != 1 {
		t.Fatalf("after the first admission: %+v", c.Grants)
	}
	id := h.deliver(t, kindeEvent{id: "event_pc", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
	h.Clock.Advance(time.Second)
	if _, err := h.process(t, id); err != nil {
		t.Fatal(err)
	}
	u := usage()
	if u["limit"] != float64(500) || len(u["grants"].([]any)) != 2 {
		t.Fatalf("after the upgrade: %v", u)
	}
	if r := hold("job-2", 400); r.Status != http.StatusCreated {
		t.Fatalf("400 credits on plus: %d %s", r.Status, r.Body)
	}
	if r := hold("job-3", 101); r.Status != http.StatusPaymentRequired {
		t.Errorf("101 more: %d %s; want 402 (100 left)", r.Status, r.Body)
	}
	if r := hold("job-4", 100); r.Status != http.StatusCreated {
		t.Errorf("the last 100: %d %s", r.Status, r.Body)
	}
	// An overdue invoice makes the account inactive: no holds.
	od := h.deliver(t, kindeEvent{id: "event_od", typ: "customer.invoice_overdue", at: start.Add(time.Hour), customer: "customer_1"}, false)
	if _, err := h.process(t, od); err != nil {
		t.Fatal(err)
	}
	if r := hold("job-5", 1); r.Status != http.StatusPaymentRequired || r.JSON(t)["type"] != "tag:ferrymeter.dev,2026:problem:account-inactive" {
		t.Errorf("a hold on an inactive account: %d %s", r.Status, r.Body)
	}
	// A later payment makes it active again.
	pay := h.deliver(t, kindeEvent{id: "event_pay", typ: "customer.payment_succeeded", at: start.Add(2 * time.Hour), customer: "customer_1", plan: "customer_pro_plan"}, false)
	if _, err := h.process(t, pay); err != nil {
		t.Fatal(err)
	}
	if acct, _ := h.accounts().Get(t.Context(), "acct_1"); acct.Status != "active" {
		t.Errorf("after the payment: %s", acct.Status)
	}
	if c := h.grants(t, "acct_1", "2026-11"); c.Total() != 500 {
		t.Errorf("the payment granted again: %+v", c.Grants)
	}
}

// An operator cannot override an allowance's limit: it is the sum of its grant rows.
func TestAllowance_NoOverride(t *testing.T) {
	h := newHarness(t)
	r := h.Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, map[string]any{"id": "acct_1", "limits": map[string]any{"credits": 1000}})
	if r.Status != http.StatusBadRequest {
		t.Errorf("%d %s; want 400", r.Status, r.Body)
	}
}

// An operator's plan change writes no grant row itself, and the allowance is still never below
// the plan's grant: usage shows the plan's top-up as pending (it counts), and the next admission
// writes it, once. A later billing event for the same plan finds the row.
func TestAllowance_AnOperatorsPlanChangeTopsUpAtTheNextAdmission(t *testing.T) {
	h := newHarness(t)
	key := h.account(t, "acct_1", "customer_1", "")
	hold := func(k string, amount int) apptest.Response {
		return h.Do(t, http.MethodPost, "/v1/holds", key, map[string]any{"key": k, "feature": "credits", "amount": amount})
	}
	if r := hold("job-1", 5); r.Status != http.StatusCreated {
		t.Fatalf("5 credits on free: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_1", apptest.AdminKey, map[string]any{"plan": "plus"}); r.Status != http.StatusOK {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	u := h.Do(t, http.MethodGet, "/v1/usage?feature=credits", key, nil).JSON(t)
	grants := u["grants"].([]any)
	if u["limit"] != float64(500) || len(grants) != 2 || grants[1].(map[string]any)["pending"] != true || grants[0].(map[string]any)["pending"] != nil {
		t.Fatalf("after the operator's upgrade: %v; want free 10 stored and plus 490 pending", u)
	}
	if c := h.grants(t, "acct_1", "2026-11"); c.Total() != 10 {
		t.Fatalf("a read wrote rows: %+v", c.Grants)
	}
	if r := hold("job-2", 495); r.Status != http.StatusCreated {
		t.Fatalf("495 more credits on plus: %d %s", r.Status, r.Body)
	}
	if r := hold("job-3", 1); r.Status != http.StatusPaymentRequired {
		t.Errorf("1 more: %d %s; want 402", r.Status, r.Body)
	}
	pay := h.deliver(t, kindeEvent{id: "event_pay", typ: "customer.payment_succeeded", at: start.Add(time.Hour), customer: "customer_1", plan: "customer_pro_plan"}, false)
	if _, err := h.process(t, pay); err != nil {
		t.Fatal(err)
	}
	c := h.grants(t, "acct_1", "2026-11")
	if c.Total() != 500 || len(c.Grants) != 2 || c.Grants[1].Plan != "plus" || c.Grants[1].Amount != 490 {
		t.Errorf("rows %+v; want free 10 + plus 490, each once", c.Grants)
	}
}
