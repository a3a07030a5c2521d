package inbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// The reference scenario's three events (DESIGN §3 scenario 3, the seed's nine deliveries): a
// plan change to Kinde's customer_pro_plan at T+3 min, its payment at T+3 min 10 s, and an old
// cancellation at T.
func referenceEvents(customer string) (pc, pay, can kindeEvent) {
	pc = kindeEvent{id: "event_pc_" + customer, typ: "customer.plan_changed", at: start.Add(3 * time.Minute), customer: customer, plan: "customer_pro_plan"}
	pay = kindeEvent{id: "event_pay_" + customer, typ: "customer.payment_succeeded", at: start.Add(3*time.Minute + 10*time.Second), customer: customer, plan: "customer_pro_plan"}
	can = kindeEvent{id: "event_can_" + customer, typ: "customer.agreement_cancelled", at: start, customer: customer}
	return
}

// Nine deliveries: 1 PAY, 2 PC (the worker dies after deciding the effect and before its
// transaction commits), 3 PC, 4 PAY, 5 PAY, 6 PAY, 7 CAN, 8 PAY, 9 PC. The account ends on
// plus with the allowance granted once (free 10 + plus 490 = 500), 9 receipts, 3 stored
// events seen 5, 3 and 1 times, and the old cancellation IGNORED with its reason.
func TestReference_NineDeliveries_PlanAndAllowanceRight(t *testing.T) {
	h := newHarness(t)
	key := h.account(t, "acct_bottle", "customer_0198", "")
	pc, pay, can := referenceEvents("customer_0198")
	h.Clock.Set(start.Add(5 * time.Minute))

	var ids []string
	deliver := func(e kindeEvent, duplicate bool) string {
		id := h.deliver(t, e, duplicate)
		ids = append(ids, id)
		return id
	}
	// 1 PAY: grants the plus allowance before the plan change arrives (the cycle opens with
	// free's 10, and plus tops it up to 500).
	payID := deliver(pay, false)
	if out, err := h.process(t, payID); err != nil || out.Status != inbox.Applied {
		t.Fatalf("delivery 1: %v %v", out, err)
	}
	// 2 PC: the worker computes the effect and dies before its transaction commits.
	pcID := deliver(pc, false)
	h.crash.Arm(pcID, 1)
	if _, err := h.process(t, pcID); !errors.Is(err, instrument.ErrInjectedCrash) {
		t.Fatalf("delivery 2: the apply was not killed: %v", err)
	}
	if got := h.crash.Fired(); len(got) != 1 || got[0] != pcID {
		t.Fatalf("the crash fired for %v", got)
	}
	if e := h.event(t, pcID); e.Status != inbox.Processing {
		t.Fatalf("after the crash the plan change is %s; want PROCESSING under the dead worker's lease", e.Status)
	}
	if acct, _ := h.accounts().Get(t.Context(), "acct_bottle"); acct.Plan != "free" {
		t.Fatalf("after the crash the plan is %s; nothing of the crashed apply may be durable", acct.Plan)
	}
	// 3 PC: Kinde's 30-second retry. The dead worker's lease has lapsed by then; the sweep
	// finds the event and the worker runs it to the end.
	h.Clock.Advance(35 * time.Second)
	deliver(pc, true)
	h.settle(t)
	// 4–6 PAY: copies.
	for range 3 {
		deliver(pay, true)
	}
	// 7 CAN: the old cancellation, stored and then IGNORED.
	canID := deliver(can, false)
	h.settle(t)
	// 8 PAY, 9 PC: copies.
	deliver(pay, true)
	deliver(pc, true)
	h.settle(t)

	got := h.stateOf(t, key, "acct_bottle", ids)
	want := state{
		Plan: "plus", Status: "active", PlanChangedAt: pc.at.UnixMilli(),
		Grants: "free 10, plus 490", CreditsLimit: 500, Stored: 3, Seen: "5, 3, 1", Receipts: 9,
	}
	if got != want {
		t.Errorf("end state:\n got  %s\n want %s", got, want)
	}
	c := h.event(t, canID)
	if c.Status != inbox.Ignored || c.Reason != "a newer plan change is already stored" {
		t.Errorf("the cancellation is %s (%q); want IGNORED: a newer plan change is already stored", c.Status, c.Reason)
	}
	for _, id := range []string{pcID, payID} {
		if e := h.event(t, id); e.Status != inbox.Applied {
			t.Errorf("%s (%s) is %s; want APPLIED", id, e.Type, e.Status)
		}
	}
	if e := h.event(t, pcID); e.Attempts != 2 || !strings.Contains(e.Result, "plan set to plus") {
		t.Errorf("the plan change: %d attempts, result %q; want 2 (one killed) and the plan set", e.Attempts, e.Result)
	}
}
