package allowance_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
)

func rows(gs []allowance.Grant) string {
	var out []string
	for _, g := range gs {
		out = append(out, fmt.Sprintf("%s %d %s", g.Plan, g.Amount, g.Reason))
	}
	return strings.Join(out, ", ")
}

func TestTopUp_OpensThenTopsUpOnce(t *testing.T) {
	c := plans.Default()
	free, plus, internal := c.Plans["free"], c.Plans["plus"], c.Plans["internal"]
	cycle := func(gs ...allowance.Grant) allowance.Cycle {
		return allowance.Cycle{Feature: "credits", Grants: gs}
	}
	row := func(plan string, n int64) allowance.Grant { return allowance.Grant{Plan: plan, Amount: n} }
	for _, tc := range []struct {
		name     string
		c        allowance.Cycle
		from, to plans.Plan
		want     string
	}{
		{"fresh cycle, free to plus", cycle(), free, plus, "free 10 opening, plus 490 plan entered"},
		{"opened on free, to plus", cycle(row("free", 10)), free, plus, "plus 490 plan entered"},
		{"plus already granted (the payment came first)", cycle(row("free", 10), row("plus", 490)), free, plus, ""},
		{"fresh cycle, on plus, back to free", cycle(), plus, free, "plus 500 opening, free 0 plan entered"},
		{"on plus, entering plus in a fresh cycle", cycle(), plus, plus, "plus 500 opening"},
		{"a plan without the feature", cycle(), internal, internal, ""},
		{"from a plan without the feature, to plus", cycle(), internal, plus, "plus 500 plan entered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rows(allowance.TopUp(tc.c, tc.from, tc.to, allowance.Entered, "bev_1", 1)); got != tc.want {
				t.Errorf("TopUp = [%s]; want [%s]", got, tc.want)
			}
		})
	}
}

// Enter gives an account on a plan the rows that plan needs in the cycle: the opening of a fresh
// cycle, the top-up of a plan entered without a row (an operator's change), nothing once there.
func TestEnter_TheRowsThePlanNeeds(t *testing.T) {
	c := plans.Default()
	free, plus := c.Plans["free"], c.Plans["plus"]
	cycle := func(gs ...allowance.Grant) allowance.Cycle {
		return allowance.Cycle{Feature: "credits", Grants: gs}
	}
	row := func(plan string, n int64) allowance.Grant { return allowance.Grant{Plan: plan, Amount: n} }
	for _, tc := range []struct {
		name string
		c    allowance.Cycle
		on   plans.Plan
		want string
	}{
		{"a fresh cycle", cycle(), free, "free 10 opening"},
		{"opened on free, now on plus", cycle(row("free", 10)), plus, "plus 490 plan entered"},
		{"opened on free, still on free", cycle(row("free", 10)), free, ""},
		{"plus granted by its payment", cycle(row("free", 10), row("plus", 490)), plus, ""},
		{"opened on plus, now on free: never shrinks", cycle(row("plus", 500)), free, "free 0 plan entered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rows(allowance.Enter(tc.c, tc.on, 1)); got != tc.want {
				t.Errorf("Enter = [%s]; want [%s]", got, tc.want)
			}
		})
	}
}

func TestCycle_LimitIsTheSumOfItsRows(t *testing.T) {
	c := allowance.Cycle{Grants: []allowance.Grant{{Plan: "free", Amount: 10}, {Plan: "plus", Amount: 490}}}
	if c.Limit() != plans.Max(500) {
		t.Errorf("limit %v", c.Limit())
	}
}

func TestValidate_RefusesARepeatedRow(t *testing.T) {
	c := allowance.Cycle{Grants: []allowance.Grant{{Plan: "free", Amount: 10}}}
	if err := allowance.Validate(c, []allowance.Grant{{Plan: "free", Amount: 10}}); err == nil {
		t.Error("a second free row was accepted")
	}
	if err := allowance.Validate(c, []allowance.Grant{{Plan: "plus", Amount: -1}}); err == nil {
		t.Error("a negative row was accepted")
	}
}
