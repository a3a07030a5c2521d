package holds

import (
	"github.com/ferrymeter/ferry/internal/plans"
	"github.com/ferrymeter/ferry/internal/usage"
)

// Admission is the decision on one reservation.
type Admission struct {
	Admitted bool
	// Remaining is what the limit has left for other jobs after the decision: after the hold
	// when admitted, before it when refused. Nil when the feature is unlimited.
	Remaining *int64
}

// admit decides whether a budget has room for amount under limit. Used and held both count:
// a running job's hold is capacity no other job may take. The reservation transaction enforces
// the same rule as a condition (committed ≤ limit − amount); admit explains a cancelled one.
func admit(b usage.Totals, limit plans.Limit, amount int64) Admission {
	if limit.Unlimited {
		return Admission{Admitted: true}
	}
	remaining := max(0, limit.Max-b.Committed)
	if amount > remaining {
		return Admission{Remaining: &remaining}
	}
	left := remaining - amount
	return Admission{Admitted: true, Remaining: &left}
}

// Charge is the decision on one charge step.
type Charge struct {
	Charged int64
	// Capped: the step was cut to what the hold had left. The job must stop.
	Capped bool
}

// chargeStep charges a step of amount against a hold of held units of which used are already
// charged: all of it if the hold has room, otherwise what is left. A job can never be charged
// past its hold, so it can never take capacity another job holds.
func chargeStep(held, used, amount int64) Charge {
	room := max(0, held-used)
	charged := max(0, min(amount, room))
	return Charge{Charged: charged, Capped: charged < amount}
}

// Outcome is the decision on settling a hold.
type Outcome struct {
	// Charged is what the job pays: its usage, never more than it held.
	Charged int64
	// Released goes back to the budget.
	Released int64
}

// settle ends a hold of held units at the job's final usage. Every ending — finished, failed
// half way, expired — is this same step with a different usage.
func settle(held, used int64) Outcome {
	charged := max(0, min(used, held))
	return Outcome{Charged: charged, Released: held - charged}
}
