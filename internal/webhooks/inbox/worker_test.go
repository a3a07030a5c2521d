package inbox_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/inboxfault"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// held runs Process for id in the background with its apply held at the gate; it returns once
// the worker has decided and reached its commit, and a function that releases the commit and
// waits for the outcome.
func (h *harness) held(t *testing.T, gate *inboxfault.Gate, id string) func() (inbox.Outcome, error) {
	t.Helper()
	type result struct {
		out inbox.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := h.worker().Process(context.Background(), id)
		done <- result{out, err}
	}()
	select {
	case <-gate.Reached():
	case r := <-done:
		t.Fatalf("the worker finished without reaching its commit: %+v %v", r.out, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the worker never reached its commit")
	}
	return func() (inbox.Outcome, error) {
		gate.Release()
		r := <-done
		return r.out, r.err
	}
}

func newGatedHarness(t *testing.T, gate *inboxfault.Gate, catalog *plans.Catalog) *harness {
	t.Helper()
	return newHarness(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){gate.Option}, Catalog: catalog})
}

// Two workers never apply one event: while one holds the lease (it has claimed and decided,
// and not committed yet), another nudged for the same event does not claim it.
func TestWorker_TwoWorkersRacing_OnlyTheLeaseHolderApplies(t *testing.T) {
	id := inbox.ID(inbox.Kinde, "event_pc")
	gate := inboxfault.NewGate(id)
	h := newGatedHarness(t, gate, nil)
	h.account(t, "acct_1", "customer_1", "")
	h.deliver(t, kindeEvent{id: "event_pc", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)

	finish := h.held(t, gate, id)
	second, err := h.process(t, id)
	if err != nil || second.Status != inbox.Processing || second.RetryAfter <= 0 {
		t.Fatalf("the second worker: %+v %v; want to leave the leased event and look again later", second, err)
	}
	first, err := finish()
	if err != nil || first.Status != inbox.Applied {
		t.Fatalf("the first worker: %+v %v", first, err)
	}
	if e := h.event(t, id); e.Attempts != 1 {
		t.Errorf("%d attempts; want 1: the second worker must not have claimed", e.Attempts)
	}
	if c := h.grants(t, "acct_1", "2026-11"); c.Total() != 500 || len(c.Grants) != 2 {
		t.Errorf("grants %+v", c.Grants)
	}
}

// The claim is a conditional write on the revision read: of two workers that read the same
// received event, exactly one claims it.
func TestWorker_ClaimIsConditionedOnTheRevisionRead(t *testing.T) {
	h := newHarness(t)
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "c", plan: "customer_pro_plan"}, false)
	read := h.event(t, id)
	claim := func(worker string) error {
		next := read
		next.Status, next.Attempts, next.Rev = inbox.Processing, read.Attempts+1, read.Rev+1
		next.LeaseExpiresAtMs, next.Result = h.Clock.Now().Add(inbox.LeaseDuration).UnixMilli(), worker
		return h.store().Transition(context.Background(), read.Rev, next)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = claim([]string{"a", "b"}[i]) }()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, inbox.ErrCancelled):
			t.Fatal(err)
		}
	}
	if won != 1 {
		t.Errorf("%d claims won; want exactly 1", won)
	}
}

// A worker whose claim was overtaken while it decided — here a replay, after which another
// worker applied the event — must not commit its stale decision over the newer outcome: the
// mark is conditioned on the claim's revision, and the cancelled transaction is resolved by
// reading the event again.
func TestWorker_OvertakenClaim_CommitsNothing(t *testing.T) {
	id := inbox.ID(inbox.Kinde, "event_1")
	gate := inboxfault.NewGate(id)
	h := newGatedHarness(t, gate, nil)
	h.account(t, "acct_1", "", "")
	h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_late", plan: "customer_pro_plan"}, false)
	// The first worker finds no account for the customer and decides IGNORED; it is held.
	finish := h.held(t, gate, id)
	// Meanwhile the operator links the customer and replays the event; another worker applies it.
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_1", apptest.AdminKey, map[string]any{"kindeCustomerId": "customer_late"}); r.Status != http.StatusOK {
		t.Fatalf("link: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, http.MethodPost, "/v1/billing-events/"+id+"/replay", apptest.AdminKey, nil); r.Status != http.StatusAccepted {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Applied {
		t.Fatalf("the second worker: %+v %v", out, err)
	}
	out, err := finish()
	if err != nil {
		t.Fatal(err)
	}
	if e := h.event(t, id); e.Status != inbox.Applied || out.Status != inbox.Applied {
		t.Errorf("the event is %s (the held worker says %s); want APPLIED: the stale IGNORED must not land", e.Status, out.Status)
	}
}

// noAllowance is the default catalog without its allowance feature: a plan change then writes
// no grant rows, so the account's own guards are the only ones between a decision and its
// commit.
func noAllowance(t *testing.T) *plans.Catalog {
	t.Helper()
	c := plans.Default()
	delete(c.Definitions, "credits")
	for name, p := range c.Plans {
		delete(p.Features, "credits")
		c.Plans[name] = p
	}
	return &c
}

// A plan change decided from an account that a newer plan change then overtook must not land:
// the account write is conditioned on the event being newer than the account's plan change.
func TestWorker_PlanChangeOvertakenByANewerOne_Ignored(t *testing.T) {
	old := inbox.ID(inbox.Kinde, "event_old")
	gate := inboxfault.NewGate(old)
	h := newGatedHarness(t, gate, noAllowance(t))
	h.account(t, "acct_1", "customer_1", "")
	h.deliver(t, kindeEvent{id: "event_old", typ: "customer.plan_changed", at: start.Add(time.Minute), customer: "customer_1", plan: "customer_pro_plan"}, false)
	newer := h.deliver(t, kindeEvent{id: "event_new", typ: "customer.agreement_cancelled", at: start.Add(2 * time.Minute), customer: "customer_1"}, false)
	finish := h.held(t, gate, old)
	if out, err := h.process(t, newer); err != nil || out.Status != inbox.Applied {
		t.Fatalf("the newer change: %+v %v", out, err)
	}
	if out, err := finish(); err != nil || out.Status != inbox.Ignored {
		t.Fatalf("the older change: %+v %v; want IGNORED", out, err)
	}
	acct, _ := h.accounts().Get(context.Background(), "acct_1")
	if acct.Plan != "free" || acct.PlanChangedAtMs != start.Add(2*time.Minute).UnixMilli() {
		t.Errorf("plan %s changed at %d; want free from the newer change", acct.Plan, acct.PlanChangedAtMs)
	}
	if e := h.event(t, old); e.Reason != inbox.ReasonNewerPlan {
		t.Errorf("reason %q", e.Reason)
	}
}

// The same for status: a failed payment decided before a newer overdue invoice committed must
// not set the account back to past_due.
func TestWorker_StatusChangeOvertakenByANewerOne_Ignored(t *testing.T) {
	old := inbox.ID(inbox.Kinde, "event_failed")
	gate := inboxfault.NewGate(old)
	h := newGatedHarness(t, gate, noAllowance(t))
	h.account(t, "acct_1", "customer_1", "")
	h.deliver(t, kindeEvent{id: "event_failed", typ: "customer.payment_failed", at: start.Add(time.Minute), customer: "customer_1"}, false)
	newer := h.deliver(t, kindeEvent{id: "event_overdue", typ: "customer.invoice_overdue", at: start.Add(2 * time.Minute), customer: "customer_1"}, false)
	finish := h.held(t, gate, old)
	if out, err := h.process(t, newer); err != nil || out.Status != inbox.Applied {
		t.Fatalf("the overdue invoice: %+v %v", out, err)
	}
	if out, err := finish(); err != nil || out.Status != inbox.Ignored {
		t.Fatalf("the failed payment: %+v %v; want IGNORED", out, err)
	}
	if acct, _ := h.accounts().Get(context.Background(), "acct_1"); acct.Status != "inactive" {
		t.Errorf("status %s; want inactive", acct.Status)
	}
}

// An effect decided for the account a customer was linked to must not land once the customer
// was unlinked meanwhile: the account write is conditioned on the link.
func TestWorker_CustomerUnlinkedWhileDeciding_Ignored(t *testing.T) {
	id := inbox.ID(inbox.Kinde, "event_1")
	gate := inboxfault.NewGate(id)
	h := newGatedHarness(t, gate, noAllowance(t))
	h.account(t, "acct_1", "customer_1", "")
	h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
	finish := h.held(t, gate, id)
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_1", apptest.AdminKey, map[string]any{"kindeCustomerId": nil}); r.Status != http.StatusOK {
		t.Fatalf("unlink: %d %s", r.Status, r.Body)
	}
	out, err := finish()
	if err != nil || out.Status != inbox.Ignored {
		t.Fatalf("%+v %v; want IGNORED: the customer names no account any more", out, err)
	}
	if acct, _ := h.accounts().Get(context.Background(), "acct_1"); acct.Plan != "free" {
		t.Errorf("plan %s; want free: the unlinked account must not change", acct.Plan)
	}
}

// An effect that changes nothing on the account itself — a payment older than the account's
// status change still grants its plan's allowance — is held to the account's link too: unlinked
// while the worker decided, the grant must not land on the account.
func TestWorker_GrantOnlyPaymentForAnUnlinkedCustomer_Ignored(t *testing.T) {
	pay := inbox.ID(inbox.Kinde, "event_pay")
	gate := inboxfault.NewGate(pay)
	h := newGatedHarness(t, gate, nil)
	h.account(t, "acct_1", "customer_1", "")
	// A newer overdue invoice is already applied: the payment's status change is older.
	od := h.deliver(t, kindeEvent{id: "event_od", typ: "customer.invoice_overdue", at: start.Add(2 * time.Hour), customer: "customer_1"}, false)
	if out, err := h.process(t, od); err != nil || out.Status != inbox.Applied {
		t.Fatalf("the overdue invoice: %+v %v", out, err)
	}
	h.deliver(t, kindeEvent{id: "event_pay", typ: "customer.payment_succeeded", at: start.Add(time.Hour), customer: "customer_1", plan: "customer_pro_plan"}, false)
	finish := h.held(t, gate, pay)
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_1", apptest.AdminKey, map[string]any{"kindeCustomerId": nil}); r.Status != http.StatusOK {
		t.Fatalf("unlink: %d %s", r.Status, r.Body)
	}
	out, err := finish()
	if err != nil || out.Status != inbox.Ignored {
		t.Fatalf("%+v %v; want IGNORED: the customer names no account any more", out, err)
	}
	if c := h.grants(t, "acct_1", "2026-11"); c.Has("plus") {
		t.Errorf("rows %+v; the unlinked account must not be granted plus", c.Grants)
	}
}

// proCatalog adds a plan "pro" (Kinde key customer_max_plan) granting 1,000 credits.
func proCatalog(t *testing.T) *plans.Catalog {
	t.Helper()
	c := plans.Default()
	pro := c.Plans["plus"]
	grant := int64(1000)
	pro.Name, pro.KindePlanKeys, pro.StripePriceIDs = "pro", []string{"customer_max_plan"}, nil
	pro.Features = map[string]plans.Feature{}
	for f, v := range c.Plans["plus"].Features {
		pro.Features[f] = v
	}
	pro.Features["credits"] = plans.Feature{Grant: &grant}
	c.Plans["pro"] = pro
	return &c
}

// Grant rows are decided from the cycle's rows as read, and written only if no one wrote the
// cycle since: two events topping one cycle up to different plans at once end at the larger
// plan's allowance, not the sum of both top-ups — whether the race opens the cycle or finds it
// opened already.
func TestWorker_ConcurrentTopUps_AllowanceIsTheLargerGrantNotTheSum(t *testing.T) {
	for _, opened := range []bool{false, true} {
		name := "a fresh cycle"
		if opened {
			name = "an opened cycle"
		}
		t.Run(name, func(t *testing.T) {
			pc := inbox.ID(inbox.Kinde, "event_plus")
			gate := inboxfault.NewGate(pc)
			h := newGatedHarness(t, gate, proCatalog(t))
			key := h.account(t, "acct_1", "customer_1", "")
			if opened {
				// An admission opens the cycle with free's 10 first.
				if r := h.Do(t, http.MethodPost, "/v1/holds", key, map[string]any{"key": "job-0", "feature": "credits", "amount": 1}); r.Status != http.StatusCreated {
					t.Fatalf("hold: %d %s", r.Status, r.Body)
				}
			}
			h.deliver(t, kindeEvent{id: "event_plus", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
			pay := h.deliver(t, kindeEvent{id: "event_pay_pro", typ: "customer.payment_succeeded", at: start.Add(time.Minute), customer: "customer_1", plan: "customer_max_plan"}, false)
			finish := h.held(t, gate, pc) // decided: plus tops the cycle up to 500
			if out, err := h.process(t, pay); err != nil || out.Status != inbox.Applied {
				t.Fatalf("the payment: %+v %v", out, err)
			}
			if out, err := finish(); err != nil || out.Status != inbox.Applied {
				t.Fatalf("the plan change: %+v %v", out, err)
			}
			c := h.grants(t, "acct_1", "2026-11")
			if c.Total() != 1000 {
				t.Errorf("credits %d from %+v; want 1000: the larger plan's grant", c.Total(), c.Grants)
			}
			if u := h.Do(t, http.MethodGet, "/v1/usage?feature=credits", key, nil).JSON(t); u["limit"] != float64(1000) {
				t.Errorf("usage %v", u)
			}
		})
	}
}

// A stored event survives a worker that dies at every step: before or after its claim, before
// or after its commit. Each stop is a real one (the call dies at the client); recovery — the
// lease lapses, the sweep finds the event — applies it exactly once.
func TestWorker_CrashAtEveryStep_AppliesOnce(t *testing.T) {
	if testenv.External() {
		t.Skip("injects faults at the client")
	}
	steps := []struct {
		name  string
		op    string
		fault instrument.Fault
	}{
		{"before the claim", "UpdateItem", instrument.CrashBefore},
		{"after the claim", "UpdateItem", instrument.CrashAfter},
		{"before the commit", "TransactWriteItems", instrument.CrashBefore},
		{"after the commit, before the answer", "TransactWriteItems", instrument.CrashAfter},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			faults := instrument.NewFaults(nil)
			h := newHarness(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
			key := h.account(t, "acct_1", "customer_1", "")
			pc, pay, _ := referenceEvents("customer_1")
			h.Clock.Set(start.Add(5 * time.Minute))
			pcID := h.deliver(t, pc, false)
			fired := false
			faults.SetPlan(func(op string, _, _ int) instrument.Fault {
				if op == step.op && !fired {
					fired = true
					return step.fault
				}
				if fired && (op == "UpdateItem" || op == "TransactWriteItems") {
					return instrument.CrashBefore // the dead worker writes nothing more
				}
				return instrument.NoFault
			})
			if _, err := h.process(t, pcID); !errors.Is(err, instrument.ErrInjectedCrash) {
				t.Fatalf("the worker did not die: %v", err)
			}
			faults.SetPlan(nil)
			h.Clock.Advance(inbox.LeaseDuration + time.Second)
			h.settle(t)
			payID := h.deliver(t, pay, false)
			h.settle(t)
			got := h.stateOf(t, key, "acct_1", []string{pcID, payID})
			if got.Plan != "plus" || got.Grants != "free 10, plus 490" || got.CreditsLimit != 500 {
				t.Errorf("after a crash %s: %s", step.name, got)
			}
			if e := h.event(t, pcID); e.Status != inbox.Applied {
				t.Errorf("the plan change is %s", e.Status)
			}
		})
	}
}

// A worker that keeps dying gives up after six attempts: DEAD, with the metric the alarm
// watches.
func TestWorker_DiesSixTimes_Dead(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
	h.crash.Arm(id, inbox.MaxAttempts)
	for attempt := 1; attempt <= inbox.MaxAttempts; attempt++ {
		if _, err := h.process(t, id); !errors.Is(err, instrument.ErrInjectedCrash) {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		h.Clock.Advance(inbox.LeaseDuration)
	}
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Dead {
		t.Fatalf("after six dead attempts: %+v %v; want DEAD", out, err)
	}
	e := h.event(t, id)
	if e.Status != inbox.Dead || e.Attempts != inbox.MaxAttempts || !strings.Contains(e.Reason, "lease lapsed") {
		t.Errorf("%s after %d attempts: %q", e.Status, e.Attempts, e.Reason)
	}
	// At least once: the sixth worker decided DEAD before its write failed (the alarm comes
	// before the write, see Worker.dead), and the seventh, finding the lease lapsed, gave up.
	if got := h.Counter.Get(metrics.InboxDead); got < 1 || got > 2 {
		t.Errorf("InboxDead %d; want 1 or 2", got)
	}
	if acct, _ := h.accounts().Get(context.Background(), "acct_1"); acct.Plan != "free" {
		t.Errorf("plan %s; nothing of a dead event applies", acct.Plan)
	}
	alarmed := false
	for _, a := range metrics.Alarms {
		alarmed = alarmed || (a.Metric == metrics.InboxDead && a.Threshold == 1)
	}
	if !alarmed {
		t.Error("no alarm on InboxDead")
	}
	// Replay after the cause is fixed: a fresh set of attempts, applied once.
	if r := h.Do(t, http.MethodPost, "/v1/billing-events/"+id+"/replay", apptest.AdminKey, nil); r.Status != http.StatusAccepted {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Applied {
		t.Fatalf("replayed: %+v %v", out, err)
	}
}

// A failing attempt (not a dead worker: the apply itself fails) backs off 5 s, 30 s, 2 min,
// 10 min, 1 h, then is DEAD with its metric.
func TestWorker_FailingAttempts_BackOffThenDead(t *testing.T) {
	h := newHarness(t)
	h.worker().Interpreters[inbox.Kinde] = inbox.InterpreterFunc(func(context.Context, []byte) (inbox.Facts, error) {
		return inbox.Facts{}, errors.New("the provider cannot be read")
	})
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "c", plan: "customer_pro_plan"}, false)
	waits := []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour}
	for attempt := 1; attempt <= inbox.MaxAttempts; attempt++ {
		out, err := h.process(t, id)
		if err != nil {
			t.Fatal(err)
		}
		e := h.event(t, id)
		if attempt == inbox.MaxAttempts {
			if out.Status != inbox.Dead || e.Status != inbox.Dead {
				t.Fatalf("attempt %d: %s; want DEAD", attempt, e.Status)
			}
			break
		}
		wait := waits[attempt-1]
		// The nudge that comes back after the wait can be delayed at most 15 minutes (SQS);
		// the worker nudges again then, or the sweep finds the event.
		if e.Status != inbox.Failed || e.NextAttemptAtMs != h.Clock.Now().Add(wait).UnixMilli() || out.RetryAfter != min(wait, 15*time.Minute) {
			t.Fatalf("attempt %d: %s, next at %d, retry after %s; want FAILED %s later", attempt, e.Status, e.NextAttemptAtMs, out.RetryAfter, wait)
		}
		// Not due before its backoff ends.
		h.Clock.Advance(wait - time.Millisecond)
		if out, _ := h.process(t, id); out.Status != inbox.Failed || out.RetryAfter != time.Millisecond {
			t.Fatalf("attempt %d: claimed before its backoff ended: %+v", attempt, out)
		}
		h.Clock.Advance(time.Millisecond)
	}
	if got := h.Counter.Get(metrics.InboxDead); got != 1 {
		t.Errorf("InboxDead %d", got)
	}
	if got := h.Counter.Get(metrics.InboxFailed); got != inbox.MaxAttempts-1 {
		t.Errorf("InboxFailed %d", got)
	}
	if e := h.event(t, id); !strings.Contains(e.Reason, "attempt 6 of 6 failed: read the event: the provider cannot be read") {
		t.Errorf("reason %q", e.Reason)
	}
}

// Every arrival order of the reference scenario's nine deliveries that matters — the payment
// before the plan change, the cancellation first, every copy of one event before the others —
// and a spread of random orders end in the same state.
func TestWorker_EveryPermutationClassEndsTheSame(t *testing.T) {
	nine := []string{"PAY", "PC", "PC", "PAY", "PAY", "PAY", "CAN", "PAY", "PC"}
	orders := map[string][]string{
		"the reference order":                                    nine,
		"the plan change first":                                  {"PC", "PC", "PC", "PAY", "PAY", "PAY", "PAY", "PAY", "CAN"},
		"the payment before the plan change":                     {"PAY", "PAY", "PAY", "PAY", "PAY", "PC", "PC", "PC", "CAN"},
		"the cancellation first":                                 {"CAN", "PC", "PAY", "PC", "PAY", "PAY", "PC", "PAY", "PAY"},
		"the cancellation last":                                  {"PAY", "PC", "PAY", "PC", "PAY", "PC", "PAY", "PAY", "CAN"},
		"every copy of the payment first":                        {"PAY", "PAY", "PAY", "PAY", "PAY", "CAN", "PC", "PC", "PC"},
		"every copy of the plan change first, cancellation next": {"PC", "PC", "PC", "CAN", "PAY", "PAY", "PAY", "PAY", "PAY"},
	}
	rng := rand.New(rand.NewPCG(10, 9))
	for i := range 8 {
		order := append([]string(nil), nine...)
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		orders["random "+itoa(int64(i))] = order
	}
	var want state
	first := true
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			key := h.account(t, "acct_p", "customer_p", "")
			pc, pay, can := referenceEvents("customer_p")
			events := map[string]kindeEvent{"PC": pc, "PAY": pay, "CAN": can}
			h.Clock.Set(start.Add(5 * time.Minute))
			seen := map[string]bool{}
			var ids []string
			for i, n := range order {
				id := h.deliver(t, events[n], seen[n])
				seen[n] = true
				ids = append(ids, id)
				if i%2 == 0 {
					// Apply as the deliveries arrive, sometimes before the next one.
					h.settle(t)
				}
			}
			h.settle(t)
			got := h.stateOf(t, key, "acct_p", ids)
			expected := state{Plan: "plus", Status: "active", PlanChangedAt: pc.at.UnixMilli(), Grants: "free 10, plus 490",
				CreditsLimit: 500, Stored: 3, Seen: "5, 3, 1", Receipts: 9}
			if got != expected {
				t.Errorf("order %v:\n got  %s\n want %s", order, got, expected)
			}
			if first {
				want, first = got, false
			} else if got != want {
				t.Errorf("order %v ends %s, another ends %s", order, got, want)
			}
		})
	}
}

// The write that makes an event DEAD commits but its answer is lost (the worker dies with it),
// after failing attempts and after a worker that kept dying: the event is DEAD, which nothing
// looks at again, so its alarm must be raised before that write.
func TestWorker_DeadWriteWhoseAnswerIsLost_StillAlarms(t *testing.T) {
	for _, tc := range []struct {
		name string
		// deadWrite is the write of the last process call that makes the event DEAD: after the
		// claim, if it makes one, and after billing_event.dead, which is told first.
		deadWrite int
		arm       func(h *harness, id string)
	}{
		{"the last attempt fails", 3, func(h *harness, _ string) {
			h.worker().Interpreters[inbox.Kinde] = inbox.InterpreterFunc(func(context.Context, []byte) (inbox.Facts, error) {
				return inbox.Facts{}, errors.New("the provider cannot be read")
			})
		}},
		{"the last worker died", 2, func(h *harness, id string) { h.crash.Arm(id, inbox.MaxAttempts) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faults := instrument.NewFaults(nil)
			h := newHarness(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
			id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "c", plan: "customer_pro_plan"}, false)
			tc.arm(h, id)
			for attempt := 1; attempt < inbox.MaxAttempts; attempt++ {
				h.process(t, id)
				h.Clock.Advance(2 * time.Hour) // past any backoff and any lease
			}
			if tc.deadWrite == 2 {
				h.process(t, id) // the last worker dies too; the next one gives up
				h.Clock.Advance(2 * time.Hour)
			}
			faults.SetPlan(instrument.CrashAfterWrite(tc.deadWrite))
			if _, err := h.process(t, id); !errors.Is(err, instrument.ErrInjectedCrash) {
				t.Fatalf("the DEAD write's answer was not lost: %v (fired %v)", err, faults.Fired())
			}
			faults.SetPlan(nil)
			if e := h.event(t, id); e.Status != inbox.Dead {
				t.Fatalf("the event is %s after %d attempts; want DEAD (the write committed)", e.Status, e.Attempts)
			}
			// At least once (a worker that died deciding DEAD raised it too).
			if got := h.Counter.Get(metrics.InboxDead); got < 1 {
				t.Errorf("InboxDead %d; a DEAD event must raise its alarm even when the write's answer is lost", got)
			}
		})
	}
}

// A status event that was applied, replayed by an operator, meets its own key on the account: it
// is the change the account already carries. It ends APPLIED with the account unchanged — not
// IGNORED as if a newer change were stored, and not refused by the status condition on every
// attempt until it is DEAD.
func TestWorker_AppliedStatusEventReplayed_AppliedAndUnchanged(t *testing.T) {
	for _, c := range []struct {
		typ    string
		status accounts.Status
	}{
		{"customer.payment_failed", accounts.PastDue},
		{"customer.invoice_overdue", accounts.Inactive},
		{"customer.payment_succeeded", accounts.Active},
	} {
		t.Run(c.typ, func(t *testing.T) {
			h := newHarness(t, apptest.Options{Catalog: noAllowance(t)})
			h.account(t, "acct_1", "customer_1", "")
			id := h.deliver(t, kindeEvent{id: "event_1", typ: c.typ, at: start, customer: "customer_1"}, false)
			if out, err := h.process(t, id); err != nil || out.Status != inbox.Applied {
				t.Fatalf("first apply: %+v %v", out, err)
			}
			before, _ := h.accounts().Get(context.Background(), "acct_1")
			if r := h.Do(t, http.MethodPost, "/v1/billing-events/"+id+"/replay", apptest.AdminKey, nil); r.Status != http.StatusAccepted {
				t.Fatalf("replay: %d %s", r.Status, r.Body)
			}
			h.settle(t)
			e := h.event(t, id)
			if e.Status != inbox.Applied || e.Attempts > 2 || !strings.Contains(e.Result, "already applied") {
				t.Errorf("replayed: %s after %d attempts, result %q, reason %q; want APPLIED, already applied", e.Status, e.Attempts, e.Result, e.Reason)
			}
			after, _ := h.accounts().Get(context.Background(), "acct_1")
			if after.Status != c.status || after.StatusChangeKey != before.StatusChangeKey || after.UpdatedAtMs != before.UpdatedAtMs {
				t.Errorf("account %s (key %q); want %s, unchanged", after.Status, after.StatusChangeKey, c.status)
			}
		})
	}
}
