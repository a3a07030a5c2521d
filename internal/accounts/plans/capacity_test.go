package plans

import "testing"

func TestCheck_TheCapacityRule(t *testing.T) {
	cases := []struct {
		name              string
		limit             Limit
		committed, amount int64
		fits              bool
		remaining         int64
	}{
		{"room to spare", Max(10), 3, 4, true, 7},
		{"exactly the rest", Max(10), 6, 4, true, 4},
		{"one over", Max(10), 7, 4, false, 3},
		{"at the limit, nothing asked", Max(10), 10, 0, true, 0},
		{"at the limit, one asked", Max(10), 10, 1, false, 0},
		{"past the limit (a lowered limit) reads as nothing left", Max(10), 12, 1, false, 0},
		{"a zero limit refuses any amount", Max(0), 0, 1, false, 0},
	}
	for _, c := range cases {
		got := c.limit.Check(c.committed, c.amount)
		if got.Fits != c.fits || got.Remaining == nil || *got.Remaining != c.remaining {
			t.Errorf("%s: %+v (remaining %v), want fits %v remaining %d", c.name, got, got.Remaining, c.fits, c.remaining)
		}
		// The condition form and the rule agree: committed ≤ limit − amount exactly when it fits.
		if cond := c.committed <= c.limit.CommittedAtMost(c.amount); cond != c.fits {
			t.Errorf("%s: the condition form says %v, the rule %v", c.name, cond, c.fits)
		}
	}
	if got := Unlimited.Check(1<<40, 1<<40); !got.Fits || got.Remaining != nil {
		t.Errorf("unlimited: %+v, want fits and no remaining", got)
	}
}
