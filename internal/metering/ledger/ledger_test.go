package ledger

import (
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
)

func TestBillingFor_Tiers(t *testing.T) {
	catalog := plans.Default()
	cases := []struct {
		name    string
		account accounts.Account
		kind    BillingKind
		limit   plans.Limit
	}{
		{"free is capped at its plan limit", accounts.Account{Plan: "free", Status: accounts.Active}, BillCapped, plans.Max(1000)},
		{"free with an override", accounts.Account{Plan: "free", Status: accounts.Active, Limits: map[string]plans.Limit{"events": plans.Max(3)}}, BillCapped, plans.Max(3)},
		{"active plus is counted", accounts.Account{Plan: "plus", Status: accounts.Active}, BillCounted, plans.Unlimited},
		{"inactive plus rejects", accounts.Account{Plan: "plus", Status: accounts.Inactive}, BillReject, plans.Unlimited},
		{"internal consumes nothing", accounts.Account{Plan: "internal", Status: accounts.Active}, BillCheckpointOnly, plans.Unlimited},
		{"an unknown account is on the default plan", accounts.Unknown("acct_x", catalog), BillCapped, plans.Max(1000)},
		{"a plan that left the catalog falls back to the default", accounts.Account{Plan: "gold", Status: accounts.Active}, BillCapped, plans.Max(1000)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := BillingFor(tc.account, catalog)
			if c.Kind != tc.kind || c.Amount != 1 || c.Feature != plans.FeatureEvents {
				t.Errorf("BillingFor = %+v, want kind %d", c, tc.kind)
			}
			if c.Kind != BillReject && c.Limit != tc.limit {
				t.Errorf("limit = %+v, want %+v", c.Limit, tc.limit)
			}
			if c.Kind == BillReject && c.Reason == "" {
				t.Error("a rejection has no reason")
			}
		})
	}
}
