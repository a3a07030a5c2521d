package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/inboxfault"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// told reads every stored notification of a kind, strongly consistent, as the message its
// deliveries send, ordered by account and then event.
func (h *harness) told(t *testing.T, kind notify.Kind) []notify.Message {
	t.Helper()
	var out []notify.Message
	var start map[string]types.AttributeValue
	for {
		page, err := h.Env.Clients.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{
			TableName: aws.String(h.Env.Names.Table(resources.TableNotifications)), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range page.Items {
			if dynamo.Str(item, "sk") != notify.SKNotification {
				continue
			}
			n := notify.StoredOf(item)
			if n.Kind != kind {
				continue
			}
			var m notify.Message
			if err := json.Unmarshal(n.Body, &m); err != nil {
				t.Fatalf("notification %s: %v", n.ID, err)
			}
			if m.ID != n.ID || m.Data.Account != n.Account {
				t.Errorf("notification %s (account %s) carries the message of %s (account %s)", n.ID, n.Account, m.ID, m.Data.Account)
			}
			out = append(out, m)
		}
		if start = page.LastEvaluatedKey; len(start) == 0 {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Data.Account != out[j].Data.Account {
			return out[i].Data.Account < out[j].Data.Account
		}
		return out[i].Data.Event < out[j].Data.Event
	})
	return out
}

// change is what a plan or status notification says, for comparing.
func change(m notify.Message) string {
	return m.Data.Account + " " + m.Data.Event + " " + m.Data.EventType + " " + m.Data.From + "→" + m.Data.To
}

func changes(ms []notify.Message) string {
	var out []string
	for _, m := range ms {
		out = append(out, change(m))
	}
	return strings.Join(out, "; ")
}

// replay replays an event as the operator does.
func (h *harness) replay(t *testing.T, id string) {
	t.Helper()
	if r := h.Do(t, http.MethodPost, "/v1/billing-events/"+id+"/replay", apptest.AdminKey, nil); r.Status != http.StatusAccepted {
		t.Fatalf("replay %s: %d %s", id, r.Status, r.Body)
	}
}

// A plan change is told once, with the plan before and after, in the transaction that applies
// it; its copies and an operator's replay, which find the change already applied, tell nothing
// more.
func TestNotify_PlanChange_ToldOnce_CopiesAndReplaysTellNothingMore(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	pc := kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}
	id := h.deliver(t, pc, false)
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Applied {
		t.Fatalf("%+v %v; want APPLIED", out, err)
	}
	want := "acct_1 " + id + " customer.plan_changed free→plus"
	got := h.told(t, notify.PlanChanged)
	if changes(got) != want {
		t.Fatalf("told [%s]; want [%s]", changes(got), want)
	}
	if m := got[0]; m.Type != notify.PlanChanged || m.Timestamp != h.Clock.Now().UTC().Format(time.RFC3339Nano) || !strings.HasPrefix(m.ID, "ntf_") {
		t.Errorf("message %+v", m)
	}
	first := got[0].ID

	h.deliver(t, pc, true)
	h.deliver(t, pc, true)
	h.settle(t)
	h.replay(t, id)
	h.settle(t)
	if e := h.event(t, id); e.Status != inbox.Applied || !strings.Contains(e.Result, "already applied") {
		t.Fatalf("replayed: %s %q; want APPLIED, already applied", e.Status, e.Result)
	}
	if got := h.told(t, notify.PlanChanged); len(got) != 1 || got[0].ID != first {
		t.Errorf("after copies and a replay, told [%s]; want the first notification only", changes(got))
	}
	if got := h.told(t, notify.StatusChanged); len(got) != 0 {
		t.Errorf("a plan change told a status change: [%s]", changes(got))
	}
}

// An event older than the account's plan change is IGNORED and tells nothing; a newer one that
// sets the plan the account is already on applies (its key moves) and tells nothing either.
func TestNotify_OlderOrUnchangingPlanChange_TellsNothing(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	newer := h.deliver(t, kindeEvent{id: "event_new", typ: "customer.plan_changed", at: start.Add(2 * time.Minute), customer: "customer_1", plan: "customer_pro_plan"}, false)
	if out, err := h.process(t, newer); err != nil || out.Status != inbox.Applied {
		t.Fatalf("the newer change: %+v %v", out, err)
	}
	older := h.deliver(t, kindeEvent{id: "event_old", typ: "customer.agreement_cancelled", at: start.Add(time.Minute), customer: "customer_1"}, false)
	if out, err := h.process(t, older); err != nil || out.Status != inbox.Ignored {
		t.Fatalf("the older change: %+v %v; want IGNORED", out, err)
	}
	same := h.deliver(t, kindeEvent{id: "event_same", typ: "customer.plan_changed", at: start.Add(3 * time.Minute), customer: "customer_1", plan: "customer_pro_plan"}, false)
	if out, err := h.process(t, same); err != nil || out.Status != inbox.Applied {
		t.Fatalf("the unchanging change: %+v %v", out, err)
	}
	if acct, _ := h.accounts().Get(context.Background(), "acct_1"); acct.Plan != "plus" || acct.PlanChangedAtMs != start.Add(3*time.Minute).UnixMilli() {
		t.Fatalf("plan %s changed at %d; want plus from the last change", acct.Plan, acct.PlanChangedAtMs)
	}
	if got, want := changes(h.told(t, notify.PlanChanged)), "acct_1 "+newer+" customer.plan_changed free→plus"; got != want {
		t.Errorf("told [%s]; want [%s]", got, want)
	}
}

// A plan change decided (with its notification) and then overtaken, before its commit, by a
// newer one that commits first: its transaction is cancelled whole, so its notification never
// lands, and the decision made again tells nothing.
func TestNotify_PlanChangeOvertakenBetweenDecisionAndCommit_TellsNothing(t *testing.T) {
	old := inbox.ID(inbox.Kinde, "event_old")
	gate := inboxfault.NewGate(old)
	h := newGatedHarness(t, gate, noAllowance(t))
	h.account(t, "acct_1", "customer_1", "")
	h.deliver(t, kindeEvent{id: "event_old", typ: "customer.plan_changed", at: start.Add(time.Minute), customer: "customer_1", plan: "customer_pro_plan"}, false)
	newer := h.deliver(t, kindeEvent{id: "event_new", typ: "customer.plan_changed", at: start.Add(2 * time.Minute), customer: "customer_1", plan: "customer_pro_plan"}, false)
	finish := h.held(t, gate, old)
	if out, err := h.process(t, newer); err != nil || out.Status != inbox.Applied {
		t.Fatalf("the newer change: %+v %v", out, err)
	}
	if out, err := finish(); err != nil || out.Status != inbox.Ignored {
		t.Fatalf("the older change: %+v %v; want IGNORED", out, err)
	}
	if got, want := changes(h.told(t, notify.PlanChanged)), "acct_1 "+newer+" customer.plan_changed free→plus"; got != want {
		t.Errorf("told [%s]; want [%s]", got, want)
	}
}

// Status changes are told once each, with the status before and after; copies tell nothing
// more, nor does an older event that the account's status change overtook.
func TestNotify_StatusChanges_EachToldOnce(t *testing.T) {
	h := newHarness(t, apptest.Options{Catalog: noAllowance(t)})
	h.account(t, "acct_1", "customer_1", "")
	failed := kindeEvent{id: "event_failed", typ: "customer.payment_failed", at: start.Add(time.Minute), customer: "customer_1"}
	paid := kindeEvent{id: "event_paid", typ: "customer.payment_succeeded", at: start.Add(2 * time.Minute), customer: "customer_1"}
	failedID := h.deliver(t, failed, false)
	h.settle(t)
	paidID := h.deliver(t, paid, false)
	h.settle(t)
	h.deliver(t, failed, true)
	h.deliver(t, paid, true)
	overdue := h.deliver(t, kindeEvent{id: "event_overdue", typ: "customer.invoice_overdue", at: start, customer: "customer_1"}, false)
	h.settle(t)
	if e := h.event(t, overdue); e.Status != inbox.Ignored {
		t.Fatalf("the older overdue invoice is %s; want IGNORED", e.Status)
	}
	want := []string{
		"acct_1 " + failedID + " customer.payment_failed active→past_due",
		"acct_1 " + paidID + " customer.payment_succeeded past_due→active",
	}
	sort.Strings(want)
	if got := changes(h.told(t, notify.StatusChanged)); got != strings.Join(want, "; ") {
		t.Errorf("told [%s]\nwant [%s]", got, strings.Join(want, "; "))
	}
}

// An event replayed after its customer was linked to another account changes that account, and
// tells it: the notification is keyed by the event and the account, so it does not meet the
// first account's (which would cancel the transaction on every attempt until the event is DEAD).
func TestNotify_EventReplayedForAnotherAccount_TellsThatAccountToo(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	h.account(t, "acct_2", "", "")
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Applied {
		t.Fatalf("%+v %v", out, err)
	}
	for _, relink := range []struct {
		account string
		link    any
	}{{"acct_1", nil}, {"acct_2", "customer_1"}} {
		if r := h.Do(t, http.MethodPatch, "/v1/accounts/"+relink.account, apptest.AdminKey, map[string]any{"kindeCustomerId": relink.link}); r.Status != http.StatusOK {
			t.Fatalf("relink %s: %d %s", relink.account, r.Status, r.Body)
		}
	}
	h.replay(t, id)
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Applied {
		t.Fatalf("replayed: %+v %v; want APPLIED at the first attempt", out, err)
	}
	if acct, _ := h.accounts().Get(context.Background(), "acct_2"); acct.Plan != "plus" {
		t.Fatalf("acct_2 is on %s; want plus", acct.Plan)
	}
	want := "acct_1 " + id + " customer.plan_changed free→plus; acct_2 " + id + " customer.plan_changed free→plus"
	if got := changes(h.told(t, notify.PlanChanged)); got != want {
		t.Errorf("told [%s]\nwant [%s]", got, want)
	}
}

// failing makes every Kinde event's attempt fail, as a provider that cannot be read does.
func failing(h *harness) {
	h.worker().Interpreters[inbox.Kinde] = inbox.InterpreterFunc(func(context.Context, []byte) (inbox.Facts, error) {
		return inbox.Facts{}, errors.New("the provider cannot be read")
	})
}

// failUntilDead runs the attempts of an event that fail, until the last one makes it DEAD.
func (h *harness) failUntilDead(t *testing.T, id string) {
	t.Helper()
	for attempt := 1; attempt <= inbox.MaxAttempts; attempt++ {
		if _, err := h.process(t, id); err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		h.Clock.Advance(2 * time.Hour) // past any backoff
	}
	if e := h.event(t, id); e.Status != inbox.Dead {
		t.Fatalf("%s after %d attempts; want DEAD", e.Status, e.Attempts)
	}
}

// A DEAD event of a known account (here: applied once, then replayed, and failing every attempt
// since) is told once, with its type and why; a worker nudged for it again tells nothing more.
// Replayed again and dead again, it is told again: a second death is news.
func TestNotify_DeadEvent_ToldOncePerDeath(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Applied {
		t.Fatalf("%+v %v", out, err)
	}
	failing(h)
	h.replay(t, id)
	h.failUntilDead(t, id)
	h.process(t, id) // a late nudge: DEAD is final
	got := h.told(t, notify.BillingEventDead)
	if len(got) != 1 {
		t.Fatalf("told %d times; want once", len(got))
	}
	m := got[0]
	if m.Data.Account != "acct_1" || m.Data.Event != id || m.Data.EventType != "customer.plan_changed" ||
		!strings.Contains(m.Data.Reason, "attempt 6 of 6 failed: read the event: the provider cannot be read") {
		t.Errorf("data %+v", m.Data)
	}
	h.replay(t, id)
	h.failUntilDead(t, id)
	if got := h.told(t, notify.BillingEventDead); len(got) != 2 || got[0].ID == got[1].ID {
		t.Errorf("after a second death told %d notifications; want 2, distinct", len(got))
	}
}

// An event whose last attempt resolved its customer to an account before failing is told for
// that account, though nothing of it was ever applied.
func TestNotify_DeadAfterTheAttemptResolvedTheAccount_ToldForIt(t *testing.T) {
	faults := instrument.NewFaults(nil)
	h := newHarness(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	h.account(t, "acct_1", "customer_1", "")
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.payment_failed", at: start, customer: "customer_1"}, false)
	// Every apply transaction fails (the worker stays alive, and records the failure).
	faults.SetPlan(func(op string, _, _ int) instrument.Fault {
		if op == "TransactWriteItems" {
			return instrument.CrashBefore
		}
		return instrument.NoFault
	})
	h.failUntilDead(t, id)
	faults.SetPlan(nil)
	got := h.told(t, notify.BillingEventDead)
	if len(got) != 1 || got[0].Data.Account != "acct_1" || got[0].Data.Event != id || got[0].Data.EventType != "customer.payment_failed" {
		t.Fatalf("told %+v; want billing_event.dead once for acct_1", got)
	}
	if got := h.told(t, notify.StatusChanged); len(got) != 0 {
		t.Errorf("a DEAD event told its status change: [%s]", changes(got))
	}
}

// A DEAD event whose account is not known when it dies is not told (the message names an
// account; the InboxDead alarm is what the operator sees): one whose customer is linked to no
// account, and one whose last worker resolved it and then died — its telling and its DEAD
// write failed with it — so that the worker that gives up after the lease, which does not
// interpret the payload again, knows no account.
func TestNotify_DeadEventOfNoKnownAccount_TellsNothing(t *testing.T) {
	faults := instrument.NewFaults(nil)
	h := newHarness(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	h.account(t, "acct_1", "customer_1", "")
	killed := h.deliver(t, kindeEvent{id: "event_killed", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
	for attempt := 1; attempt <= inbox.MaxAttempts; attempt++ {
		// Attempts 1–5: the apply fails and the worker records it. Attempt 6: every write after
		// the claim fails, as for a worker that dies there.
		faults.SetPlan(func(op string, _, write int) instrument.Fault {
			if op == "TransactWriteItems" || (attempt == inbox.MaxAttempts && write >= 2) {
				return instrument.CrashBefore
			}
			return instrument.NoFault
		})
		_, err := h.process(t, killed)
		if attempt == inbox.MaxAttempts && !errors.Is(err, instrument.ErrInjectedCrash) {
			t.Fatalf("the last attempt: %v; want it stopped by the failed telling", err)
		}
		h.Clock.Advance(2 * time.Hour)
	}
	faults.SetPlan(nil)
	if e := h.event(t, killed); e.Status != inbox.Processing {
		t.Fatalf("after the last worker died the event is %s; want PROCESSING", e.Status)
	}
	if out, err := h.process(t, killed); err != nil || out.Status != inbox.Dead {
		t.Fatalf("the worker that gives up: %+v %v; want DEAD", out, err)
	}
	unlinked := h.deliver(t, kindeEvent{id: "event_nobody", typ: "customer.plan_changed", at: start, customer: "customer_x", plan: "customer_pro_plan"}, false)
	failing(h)
	h.failUntilDead(t, unlinked)
	if got := h.told(t, notify.BillingEventDead); len(got) != 0 {
		t.Errorf("told %+v; want nothing", got)
	}
}

// The DEAD write fails after the notification was told (the worker dies there), or commits and
// its answer is lost: the event ends DEAD, told once either way — the worker that gives up
// after the lease tells the same notification again, which is no second one.
func TestNotify_DeadWriteFailsOrItsAnswerIsLost_ToldOnce(t *testing.T) {
	for _, fault := range []instrument.Fault{instrument.CrashBefore, instrument.CrashAfter} {
		t.Run(map[instrument.Fault]string{instrument.CrashBefore: "the write fails", instrument.CrashAfter: "the answer is lost"}[fault], func(t *testing.T) {
			faults := instrument.NewFaults(nil)
			h := newHarness(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
			h.account(t, "acct_1", "customer_1", "")
			id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
			if out, err := h.process(t, id); err != nil || out.Status != inbox.Applied {
				t.Fatalf("%+v %v", out, err)
			}
			failing(h)
			h.replay(t, id)
			for attempt := 1; attempt < inbox.MaxAttempts; attempt++ {
				h.process(t, id)
				h.Clock.Advance(2 * time.Hour)
			}
			// The last attempt's writes: its claim, the notification, the DEAD mark.
			faults.SetPlan(func(_ string, _, write int) instrument.Fault {
				if write == 3 {
					return fault
				}
				return instrument.NoFault
			})
			if _, err := h.process(t, id); !errors.Is(err, instrument.ErrInjectedCrash) {
				t.Fatalf("the DEAD write was not hit: %v (fired %v)", err, faults.Fired())
			}
			faults.SetPlan(nil)
			first := h.told(t, notify.BillingEventDead)
			if len(first) != 1 || first[0].Data.Account != "acct_1" || !strings.Contains(first[0].Data.Reason, "attempt 6 of 6 failed") {
				t.Fatalf("told %+v before the DEAD write; want once, for acct_1", first)
			}
			if fault == instrument.CrashBefore {
				if e := h.event(t, id); e.Status != inbox.Processing {
					t.Fatalf("after the failed DEAD write the event is %s; want PROCESSING", e.Status)
				}
				h.Clock.Advance(inbox.LeaseDuration)
				if out, err := h.process(t, id); err != nil || out.Status != inbox.Dead {
					t.Fatalf("the worker that gives up: %+v %v; want DEAD", out, err)
				}
			}
			if e := h.event(t, id); e.Status != inbox.Dead {
				t.Fatalf("the event is %s; want DEAD", e.Status)
			}
			// The worker that gave up told the same notification, which was not written again:
			// its message is still the first one's (the last attempt's reason, at its instant).
			if got := h.told(t, notify.BillingEventDead); len(got) != 1 || got[0] != first[0] {
				t.Errorf("told %+v; want only %+v", got, first[0])
			}
		})
	}
}
