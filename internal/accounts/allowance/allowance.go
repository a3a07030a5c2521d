// Package allowance keeps the per-cycle allowances of the catalog's allowance features (credits
// by default). A cycle's allowance is not a number on a plan but the sum of keyed grant rows,
// one per (account, feature, cycle, plan): the row of the plan the account was on when the
// cycle was first touched (its opening), and one row for each plan the account entered or paid
// for in the cycle, topping the allowance up to that plan's grant. A row is written at most
// once, whoever writes it first — the plan change or its payment — so an allowance is granted
// once however often, and in whatever order, the events that grant it arrive.
//
// Grants only ever add, so an allowance never shrinks: a limit read before a grant is never
// more generous than the limit after it, which is what lets a hold admit against a limit read
// just before its own transaction.
package allowance

import (
	"errors"
	"fmt"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
)

// Reason says why a grant row was written.
type Reason string

// Reasons.
const (
	// Opening is a cycle's first row: the grant of the plan the account was on when the cycle's
	// allowance was first needed (an admission, or a billing event for the cycle).
	Opening Reason = "opening"
	// Entered is the top-up of a plan the account changed to in the cycle.
	Entered Reason = "plan entered"
	// Paid is the top-up of a plan a payment in the cycle was for.
	Paid Reason = "payment"
)

// Grant is one keyed grant row.
type Grant struct {
	// Plan keys the row within its cycle: (account, feature, cycle, plan).
	Plan   string
	Amount int64
	Reason Reason
	// EventID is the billing event that wrote the row ("" for an opening an admission wrote).
	EventID     string
	GrantedAtMs int64
}

// Cycle is one (account, feature, cycle)'s grant rows, as read together with their version.
type Cycle struct {
	AccountID string
	Feature   string
	Label     string
	Grants    []Grant
	// Rev counts the writes to the cycle's rows (0: none yet). Every write is conditioned on
	// the revision the rows were read at, so two writers deciding from the same rows cannot
	// both commit.
	Rev int64
}

// Total is the cycle's allowance: the sum of its grant rows.
func (c Cycle) Total() int64 {
	var n int64
	for _, g := range c.Grants {
		n += g.Amount
	}
	return n
}

// Has reports whether the cycle already has the row of plan.
func (c Cycle) Has(plan string) bool {
	for _, g := range c.Grants {
		if g.Plan == plan {
			return true
		}
	}
	return false
}

// Opened reports whether the cycle has any row.
func (c Cycle) Opened() bool { return len(c.Grants) > 0 }

// Limit is the cycle's allowance as a limit.
func (c Cycle) Limit() plans.Limit { return plans.Max(c.Total()) }

// ErrCancelled is what a store returns when a grant transaction was cancelled: the rows changed
// after they were read, or it met another transaction. The caller reads the rows again (durable
// state says which) and decides again.
var ErrCancelled = errors.New("the grant transaction was cancelled")

// Open returns the rows that open a cycle with no rows yet: the grant of plan onPlan (the plan
// the account is on). It returns nothing for a cycle already opened, or a plan without the
// feature.
func Open(c Cycle, onPlan plans.Plan, nowMs int64) []Grant {
	if c.Opened() {
		return nil
	}
	f, ok := onPlan.Features[c.Feature]
	if !ok || f.Grant == nil {
		return nil
	}
	return []Grant{{Plan: onPlan.Name, Amount: *f.Grant, Reason: Opening, GrantedAtMs: nowMs}}
}

// Enter returns the rows a cycle needs for an account on plan onPlan: its opening row if it has
// none, or else onPlan's top-up row if the account entered onPlan in the cycle by a path that
// wrote no row (an operator's plan change), so that the allowance is never below the grant of the
// plan the account is on. A billing event's plan change writes its row in its own transaction;
// this is what an admission writes when it finds none.
func Enter(c Cycle, onPlan plans.Plan, nowMs int64) []Grant {
	return TopUp(c, onPlan, onPlan, Entered, "", nowMs)
}

// TopUp returns the rows that entering (or paying for) plan to adds to a cycle: the cycle's
// opening row first if it has none (from is the plan the account was on), then to's row, which
// tops the allowance up to to's grant (never below what is granted: an allowance never
// shrinks). A row the cycle already has is not repeated, so a second writer of the same plan's
// row — the payment after its plan change, or a replay — adds nothing.
func TopUp(c Cycle, from, to plans.Plan, reason Reason, eventID string, nowMs int64) []Grant {
	rows := Open(c, from, nowMs)
	for i := range rows {
		rows[i].EventID = eventID
	}
	after := Cycle{Feature: c.Feature, Grants: append(append([]Grant(nil), c.Grants...), rows...)}
	f, ok := to.Features[c.Feature]
	if !ok || f.Grant == nil || after.Has(to.Name) {
		return rows
	}
	amount := max(0, *f.Grant-after.Total())
	return append(rows, Grant{Plan: to.Name, Amount: amount, Reason: reason, EventID: eventID, GrantedAtMs: nowMs})
}

// Validate checks rows before they are written: a plan's row once per cycle, amounts not
// negative. A failure is a programmer error in the caller.
func Validate(c Cycle, add []Grant) error {
	seen := map[string]bool{}
	for _, g := range c.Grants {
		seen[g.Plan] = true
	}
	for _, g := range add {
		if g.Plan == "" || seen[g.Plan] || g.Amount < 0 {
			return fmt.Errorf("grant row %q of %d for %s %s %s: empty, repeated or negative", g.Plan, g.Amount, c.AccountID, c.Feature, c.Label)
		}
		seen[g.Plan] = true
	}
	return nil
}
