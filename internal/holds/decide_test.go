package holds

import (
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/usage"
)

func ptr(n int64) *int64 { return &n }

func TestAdmit(t *testing.T) {
	cases := []struct {
		name      string
		budget    usage.Totals
		limit     plans.Limit
		amount    int64
		admitted  bool
		remaining *int64
	}{
		{"an empty budget admits a job that fits", usage.Totals{}, plans.Max(100_000), 40_000, true, ptr(60_000)},
		{"holds count as spent", usage.Totals{Held: 80_000, Committed: 80_000}, plans.Max(100_000), 40_000, false, ptr(20_000)},
		{"used counts as spent", usage.Totals{Used: 70_000, Committed: 70_000}, plans.Max(100_000), 30_000, true, ptr(0)},
		{"exactly the remainder fits", usage.Totals{Used: 10, Held: 50, Committed: 60}, plans.Max(100), 40, true, ptr(0)},
		{"one over the remainder is refused", usage.Totals{Used: 10, Held: 50, Committed: 60}, plans.Max(100), 41, false, ptr(40)},
		{"a job larger than the whole limit is refused", usage.Totals{}, plans.Max(100), 101, false, ptr(100)},
		{"a limit lowered below the committed sum leaves nothing", usage.Totals{Held: 60_000, Committed: 60_000}, plans.Max(50_000), 1, false, ptr(0)},
		{"a zero limit refuses everything", usage.Totals{}, plans.Max(0), 1, false, ptr(0)},
		{"unlimited admits anything", usage.Totals{Used: 1 << 40, Committed: 1 << 40}, plans.Unlimited, MaxAmount, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := admit(c.budget, c.limit, c.amount)
			if got.Admitted != c.admitted {
				t.Errorf("admitted = %v, want %v", got.Admitted, c.admitted)
			}
			switch {
			case c.remaining == nil && got.Remaining != nil:
				t.Errorf("remaining = %d, want none (unlimited)", *got.Remaining)
			case c.remaining != nil && (got.Remaining == nil || *got.Remaining != *c.remaining):
				t.Errorf("remaining = %v, want %d", got.Remaining, *c.remaining)
			}
		})
	}
}

func TestChargeStep(t *testing.T) {
	cases := []struct {
		name               string
		held, used, amount int64
		want               StepDecision
	}{
		{"a step within the hold is charged in full", 40_000, 0, 10_000, StepDecision{Charged: 10_000}},
		{"a step that exactly fills the hold is not capped", 40_000, 30_000, 10_000, StepDecision{Charged: 10_000}},
		{"a step past the hold is cut to what is left", 10_000, 8_000, 7_000, StepDecision{Charged: 2_000, Capped: true}},
		{"a full hold charges nothing and caps", 10_000, 10_000, 1, StepDecision{Charged: 0, Capped: true}},
		{"a zero step renews the lease and charges nothing", 10_000, 10_000, 0, StepDecision{}},
		{"a hold over-charged by a bug never charges negative", 10, 15, 5, StepDecision{Charged: 0, Capped: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := chargeStep(c.held, c.used, c.amount); got != c.want {
				t.Errorf("chargeStep(%d, %d, %d) = %+v, want %+v", c.held, c.used, c.amount, got, c.want)
			}
		})
	}
}

func TestSettle(t *testing.T) {
	cases := []struct {
		name       string
		held, used int64
		want       SettleDecision
	}{
		{"a job under its estimate pays its usage and releases the rest", 40_000, 31_200, SettleDecision{Charged: 31_200, Released: 8_800}},
		{"a job that failed half way pays for the half it did", 40_000, 20_000, SettleDecision{Charged: 20_000, Released: 20_000}},
		{"a job that used all of its hold releases nothing", 40_000, 40_000, SettleDecision{Charged: 40_000}},
		{"usage past the hold is charged at the hold", 40_000, 55_000, SettleDecision{Charged: 40_000}},
		{"a job that never charged releases everything", 40_000, 0, SettleDecision{Released: 40_000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := settle(c.held, c.used)
			if got != c.want {
				t.Errorf("settle(%d, %d) = %+v, want %+v", c.held, c.used, got, c.want)
			}
			if got.Charged+got.Released != c.held {
				t.Errorf("charged + released = %d, want the hold %d", got.Charged+got.Released, c.held)
			}
		})
	}
}

func TestID_DeterministicAndScopedToTheAccount(t *testing.T) {
	a := ID("acct_1", "job-42")
	if a != ID("acct_1", "job-42") {
		t.Error("the same account and key give different ids")
	}
	if a == ID("acct_2", "job-42") {
		t.Error("two accounts' equal keys give the same id")
	}
	if a == ID("acct_1", "job-43") {
		t.Error("two keys give the same id")
	}
	// The separator keeps ("a", "bc") and ("ab", "c") apart.
	if ID("a", "bc") == ID("ab", "c") {
		t.Error("ids are ambiguous across the account/key boundary")
	}
	if !ValidID(a) {
		t.Errorf("ValidID(%q) = false", a)
	}
	for _, bad := range []string{"", "hold_", "hold_ABCDEFGHIJKLMNOPQRSTUVWXYZ", a + "a", "hole_" + a[5:], "hold_" + a[5:30] + "1"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}
