package deliver_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/operator/deliver"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	kindewebhook "github.com/ferrymeter/ferry/internal/webhooks/kinde"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// What the tools send reads, through Ferry's own readers, as the event they meant: the customer,
// the plan, the event time to the nanosecond (Kinde's offset and fraction included).
func TestDeliveries_ReadAsTheyWereMeant(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 123456789, time.UTC)
	claims, err := json.Marshal(deliver.KindeClaims("customer.plan_changed", "event_1", at, at.Add(time.Second), "customer_1", "customer_pro_plan", nil))
	if err != nil {
		t.Fatal(err)
	}
	k := kindewebhook.Read(claims)
	if k.Kind != inbox.PlanChange || len(k.Customers) != 1 || k.Customers[0].ID != "customer_1" ||
		len(k.PlanKeys) != 1 || k.PlanKeys[0] != "customer_pro_plan" || k.Time.UnixNano() != at.UnixNano() || k.Problem != "" {
		t.Errorf("Kinde: %+v", k)
	}
	body, err := deliver.StripeEvent("invoice.paid", "evt_1", at, "cus_1", "price_ferry_plus_monthly", "", "paid")
	if err != nil {
		t.Fatal(err)
	}
	s := stripewebhook.Read(body)
	if s.Kind != inbox.Payment || len(s.Customers) != 1 || s.Customers[0].ID != "cus_1" ||
		len(s.PlanKeys) != 1 || s.PlanKeys[0] != "price_ferry_plus_monthly" || s.Time.UnixNano() != at.Truncate(time.Second).UnixNano() || s.Problem != "" {
		t.Errorf("Stripe: %+v", s)
	}
	if got := deliver.KindeStamp(at); got != "2026-12-01T20:00:00.123456789+11:00" {
		t.Errorf("KindeStamp: %s", got)
	}
}
