package reconcile

import "fmt"

// Verdict is what the comparison of the ledger with a provider's meter found.
type Verdict string

// Verdicts.
const (
	// Match: the meter holds the ledger's total.
	Match Verdict = "match"
	// Unreadable: the meter could not be read back, so nothing is proven.
	Unreadable Verdict = "unreadable"
	// ClosedCycleDrift: a closed cycle's meter differs from the ledger; Ferry never writes a
	// closed cycle, so a person settles it.
	ClosedCycleDrift Verdict = "closed_cycle_drift"
	// OverBilled: the meter is above the ledger.
	OverBilled Verdict = "over_billed"
	// UnderBilled: the meter is below the ledger.
	UnderBilled Verdict = "under_billed"
)

// Evidence is the three numbers and what is known about how they came to be.
type Evidence struct {
	// Ledger is the ledger's total for the cycle: what the meter should hold.
	Ledger int64
	// Sent is the last total Ferry sent the provider.
	Sent int64
	// Meter is what the provider holds; nil when it could not be read.
	Meter *int64
	// Unread says why the meter could not be read (with Meter nil).
	Unread string
	// Closed: the cycle has ended.
	Closed bool
	// Failed counts Ferry's reports to the provider that failed for good (dead-lettered).
	Failed int
	// Pending: the ledger's latest change is marked and waits for the reporter (kept with the
	// evidence's circumstances; the verdict does not depend on it).
	Pending bool
}

// Decision is the verdict, the repair it calls for, and the cause in words.
type Decision struct {
	Verdict Verdict
	// Repair is the total the meter must be brought to (always the ledger's); nil for none.
	Repair *int64
	Cause  string
	// Review: the meter differs and Ferry will not repair it; a person settles it (a closed
	// cycle, a ledger below zero).
	Review bool
}

// CauseNegative is added to the cause when the ledger is below zero.
const CauseNegative = " The ledger is below zero, which no meter can hold: nothing is sent to the provider, and the cycle is on the review list."

// CauseLate is the cause when the meter holds the last report and the ledger moved on.
const CauseLate = "The ledger changed after the last report: a late event or a correction arrived."

// Decide compares the ledger with the provider's meter. It never trusts the meter over the
// ledger: in an open cycle the repair is always the ledger's total; a closed cycle is never
// repaired, and neither is a ledger below zero (corrections cannot take it there, but rows
// written before that rule can): no provider takes a negative total, so neither an absolute
// write nor a delta is ever computed from one. It is a pure function of its evidence.
func Decide(e Evidence) Decision {
	if e.Meter == nil {
		why := e.Unread
		if why == "" {
			why = "no answer"
		}
		return Decision{Verdict: Unreadable, Cause: "The provider's meter could not be read back (" + why + "), so this cycle is not proven."}
	}
	meter := *e.Meter
	if meter == e.Ledger {
		cause := "The meter equals the ledger."
		if e.Sent != e.Ledger {
			cause = fmt.Sprintf("The meter equals the ledger (the last report Ferry recorded was %d).", e.Sent)
		}
		return Decision{Verdict: Match, Cause: cause}
	}
	cause := causeOf(e, meter)
	if e.Closed {
		return Decision{Verdict: ClosedCycleDrift, Review: true, Cause: cause + " The cycle is closed: Ferry never writes a closed cycle, so it is on the review list."}
	}
	verdict := UnderBilled
	if meter > e.Ledger {
		verdict = OverBilled
	}
	if e.Ledger < 0 {
		return Decision{Verdict: verdict, Review: true, Cause: cause + CauseNegative}
	}
	repair := e.Ledger
	return Decision{Verdict: verdict, Repair: &repair, Cause: cause}
}

// causeOf says, from the evidence, why the meter differs from the ledger.
func causeOf(e Evidence, meter int64) string {
	if meter == e.Sent {
		// The meter holds what Ferry sent; the ledger moved on.
		return CauseLate
	}
	var cause string
	switch {
	case meter < e.Sent && e.Failed > 0:
		cause = fmt.Sprintf("The last report failed: %d of Ferry's reports never reached the meter (%d, where Ferry sent %d).", e.Failed, meter, e.Sent)
	case meter < e.Sent:
		cause = fmt.Sprintf("The meter (%d) is below what Ferry sent (%d): a report was lost, or the provider dropped usage.", meter, e.Sent)
	default:
		cause = fmt.Sprintf("The meter (%d) moved above what Ferry sent (%d) without a report from Ferry: a report was counted twice, or something else wrote to the meter.", meter, e.Sent)
	}
	if e.Ledger != e.Sent {
		cause += " The ledger also changed after the last report."
	}
	return cause
}
