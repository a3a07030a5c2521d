package holds

import (
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/usage"
)

// Admission is the decision on one reservation.
type Admission struct {
	Admitted bool
	// Remaining is what the limit has left for other jobs after the decision: after the hold
	// when admitted, before it when refused. Nil when the feature is unlimited.
	Remaining *int64
}

// admit decides whether a budget has room for amount under limit, by the capacity rule
// (plans.Limit.Check). Used and held both count: a running job's hold is capacity no other job
// may take. The reservation transaction enforces the same rule as a condition; admit explains a
// cancelled one.
func admit(b usage.Totals, limit plans.Limit, amount int64) Admission {
	c := limit.Check(b.Committed, amount)
	if !c.Fits || c.Remaining == nil {
		return Admission{Admitted: c.Fits, Remaining: c.Remaining}
	}
	left := *c.Remaining - amount
	return Admission{Admitted: true, Remaining: &left}
}

// StepDecision is the decision on one charge step.
type StepDecision struct {
	Charged int64
	// Capped: the step was cut to what the hold had left. The job must stop.
	Capped bool
}

// chargeStep charges a step of amount against a hold of held units of which used are already
// charged: all of it if the hold has room, otherwise what is left. A job can never be charged
// past its hold, so it can never take capacity another job holds.
func chargeStep(held, used, amount int64) StepDecision {
	room := max(0, held-used)
	charged := max(0, min(amount, room))
	return StepDecision{Charged: charged, Capped: charged < amount}
}

// SettleDecision is the decision on settling a hold.
type SettleDecision struct {
	// Charged is what the job pays: its usage, never more than it held.
	Charged int64
	// Released goes back to the budget.
	Released int64
}

// settle ends a hold of held units at the job's final usage. Every ending — finished, failed
// half way, expired — is this same step with a different usage.
func settle(held, used int64) SettleDecision {
	charged := max(0, min(used, held))
	return SettleDecision{Charged: charged, Released: held - charged}
}
