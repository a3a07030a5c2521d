package ledger

import (
	"errors"
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/usage"
)

// A cancelled billing write is decided from durable state alone, in this order.
func TestResolveBilling(t *testing.T) {
	capped := Billing{Kind: BillCapped, Feature: plans.FeatureEvents, Amount: 1, Limit: plans.Max(3)}
	budget := func(committed int64) *usage.Totals { return &usage.Totals{Committed: committed} }
	cases := []struct {
		name    string
		billed  bool
		status  Status
		budget  *usage.Totals
		want    Outcome
		wantErr error
		again   bool
	}{
		{"the checkpoint is present: an earlier attempt billed it", true, Inserting, nil, AlreadyAccepted, nil, false},
		{"billed wins over any status", true, Inserted, nil, AlreadyAccepted, nil, false},
		{"the entry left INSERTING", false, Rejected, nil, 0, ErrNotInserting, false},
		{"the budget is at the limit", false, Inserting, budget(3), 0, ErrLimitReached, false},
		{"the budget has room: a conflict", false, Inserting, budget(2), 0, nil, true},
		{"no budget to explain it: a conflict", false, Inserting, nil, 0, nil, true},
	}
	for _, c := range cases {
		got, err := resolveBilling(c.billed, c.status, c.budget, capped)
		switch {
		case c.again:
			if !errors.Is(err, errUnexplained) {
				t.Errorf("%s: %v, want another try", c.name, err)
			}
		case c.wantErr != nil:
			if !errors.Is(err, c.wantErr) {
				t.Errorf("%s: %v, want %v", c.name, err, c.wantErr)
			}
		default:
			if got != c.want || err != nil {
				t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
			}
		}
	}
}
