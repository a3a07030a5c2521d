package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	notifierfn "github.com/ferrymeter/ferry/functions/notifier"
	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/alerts/drain"
	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/inboxfault"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/notifytest"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// told reads every stored notification of a kind as the message its deliveries send, ordered
// by account and then event.
func (h *harness) told(t *testing.T, kind notify.Kind) []notify.Message {
	t.Helper()
	var out []notify.Message
	for _, n := range notifytest.Read(t, h.Env) {
		if n.Stored.Kind == kind {
			out = append(out, n.Message)
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

// operatorSets changes the account as the operator does (PATCH /v1/accounts/{id}).
func (h *harness) operatorSets(t *testing.T, account string, body map[string]any) {
	t.Helper()
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/"+account, apptest.AdminKey, body); r.Status != http.StatusOK {
		t.Fatalf("update %s: %d %s", account, r.Status, r.Body)
	}
}

// A change decided from the plan (or status) as read, and then, before its commit, an operator
// sets another one (which leaves the change key alone): the commit is held to the value it was
// decided from, so it is cancelled, and the decision made again tells the value the event does
// replace — the operator's, not the one read first. Each case fails without its guard
// (accounts.billing.plan-as-read, accounts.billing.status-as-read).
func TestNotify_OperatorChangeBetweenReadAndCommit_FromIsTheValueReplaced(t *testing.T) {
	for _, c := range []struct {
		name, typ string
		operator  map[string]any
		kind      notify.Kind
		want      func(accounts.Account) bool
		told      string
	}{
		{"plan", "customer.plan_changed", map[string]any{"plan": "internal"}, notify.PlanChanged,
			func(a accounts.Account) bool { return a.Plan == "plus" }, "customer.plan_changed internal→plus"},
		{"status", "customer.payment_failed", map[string]any{"status": "inactive"}, notify.StatusChanged,
			func(a accounts.Account) bool { return a.Status == accounts.PastDue }, "customer.payment_failed inactive→past_due"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := inbox.ID(inbox.Kinde, "event_1")
			gate := inboxfault.NewGate(id)
			h := newGatedHarness(t, gate, noAllowance(t))
			h.account(t, "acct_1", "customer_1", "")
			h.deliver(t, kindeEvent{id: "event_1", typ: c.typ, at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
			finish := h.held(t, gate, id)
			h.operatorSets(t, "acct_1", c.operator)
			if out, err := finish(); err != nil || out.Status != inbox.Applied {
				t.Fatalf("%+v %v; want APPLIED", out, err)
			}
			if acct, _ := h.accounts().Get(context.Background(), "acct_1"); !c.want(acct) {
				t.Fatalf("acct_1 is %s, %s: the event's change did not land after the operator's update", acct.Plan, acct.Status)
			}
			if got, want := changes(h.told(t, c.kind)), "acct_1 "+id+" "+c.told; got != want {
				t.Errorf("told [%s]; want [%s]", got, want)
			}
		})
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

// wantDeadOfNoAccount fails unless billing_event.dead is stored once, for the event, with no
// account: none on the notification, and no account member in its message's data.
func (h *harness) wantDeadOfNoAccount(t *testing.T, id string) notifytest.Note {
	t.Helper()
	var dead []notifytest.Note
	for _, n := range notifytest.Read(t, h.Env) {
		if n.Stored.Kind == notify.BillingEventDead {
			dead = append(dead, n)
		}
	}
	if len(dead) != 1 || dead[0].Message.Data.Event != id {
		t.Fatalf("told %+v; want billing_event.dead once, for %s", dead, id)
	}
	n := dead[0]
	var body struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(n.Stored.Body, &body); err != nil {
		t.Fatal(err)
	}
	if account, ok := body.Data["account"]; n.Stored.Account != "" || (ok && string(account) != "null") {
		t.Errorf("told for account %q, its message's data.account %s; want no account", n.Stored.Account, account)
	}
	// In no account's list: DynamoDB refuses an empty string as an index key (the emulator
	// takes one), so the item must leave the account index's key out.
	if key, ok := n.Item[resources.NotificationsAttrAccount]; ok {
		t.Errorf("the notification carries the account index's key %s = %v; want none", resources.NotificationsAttrAccount, key)
	}
	if n.Message.Data.EventType != "customer.plan_changed" || n.Message.Data.Reason == "" {
		t.Errorf("data %+v", n.Message.Data)
	}
	return n
}

// An event that goes DEAD with no account known for it is told all the same, once, with no
// account: its payload unreadable, its customer linked to no account, or its last worker killed
// after resolving it (the worker that gives up after the lease does not read the payload again,
// so it knows no account). A repeat tells nothing more: the worker that gives up after a DEAD
// write that failed tells the same notification, and so does a late nudge (DEAD is final).
func TestNotify_DeadEventOfNoKnownAccount_ToldOnceWithNoAccount(t *testing.T) {
	for _, c := range []struct {
		name     string
		customer string
		// die runs the event's attempts until it is DEAD.
		die func(t *testing.T, h *harness, faults *instrument.Faults, id string)
	}{
		{"its payload unreadable, its DEAD write failed once", "customer_x", func(t *testing.T, h *harness, faults *instrument.Faults, id string) {
			failing(h)
			for attempt := 1; attempt < inbox.MaxAttempts; attempt++ {
				h.process(t, id)
				h.Clock.Advance(2 * time.Hour)
			}
			// The last attempt's writes: its claim, the notification, the DEAD mark.
			faults.SetPlan(func(_ string, _, write int) instrument.Fault {
				if write == 3 {
					return instrument.CrashBefore
				}
				return instrument.NoFault
			})
			if _, err := h.process(t, id); !errors.Is(err, instrument.ErrInjectedCrash) {
				t.Fatalf("the DEAD write was not hit: %v (fired %v)", err, faults.Fired())
			}
			faults.SetPlan(nil)
			h.wantDeadOfNoAccount(t, id)
			h.Clock.Advance(inbox.LeaseDuration)
			if out, err := h.process(t, id); err != nil || out.Status != inbox.Dead {
				t.Fatalf("the worker that gives up: %+v %v; want DEAD", out, err)
			}
		}},
		{"its customer linked to no account", "customer_x", func(t *testing.T, h *harness, faults *instrument.Faults, id string) {
			// Every apply transaction fails (the worker stays alive, and records the failure).
			faults.SetPlan(func(op string, _, _ int) instrument.Fault {
				if op == "TransactWriteItems" {
					return instrument.CrashBefore
				}
				return instrument.NoFault
			})
			h.failUntilDead(t, id)
			faults.SetPlan(nil)
		}},
		{"its last worker killed after resolving it", "customer_1", func(t *testing.T, h *harness, faults *instrument.Faults, id string) {
			for attempt := 1; attempt <= inbox.MaxAttempts; attempt++ {
				// Attempts 1–5: the apply fails and the worker records it. Attempt 6: every write
				// after the claim fails, as for a worker that dies there.
				faults.SetPlan(func(op string, _, write int) instrument.Fault {
					if op == "TransactWriteItems" || (attempt == inbox.MaxAttempts && write >= 2) {
						return instrument.CrashBefore
					}
					return instrument.NoFault
				})
				_, err := h.process(t, id)
				if attempt == inbox.MaxAttempts && !errors.Is(err, instrument.ErrInjectedCrash) {
					t.Fatalf("the last attempt: %v; want it stopped by the failed telling", err)
				}
				h.Clock.Advance(2 * time.Hour)
			}
			faults.SetPlan(nil)
			if e := h.event(t, id); e.Status != inbox.Processing {
				t.Fatalf("after the last worker died the event is %s; want PROCESSING", e.Status)
			}
			if out, err := h.process(t, id); err != nil || out.Status != inbox.Dead {
				t.Fatalf("the worker that gives up: %+v %v; want DEAD", out, err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			faults := instrument.NewFaults(nil)
			h := newHarness(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
			h.account(t, "acct_1", "customer_1", "")
			id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: c.customer, plan: "customer_pro_plan"}, false)
			c.die(t, h, faults, id)
			if e := h.event(t, id); e.Status != inbox.Dead {
				t.Fatalf("the event is %s; want DEAD", e.Status)
			}
			first := h.wantDeadOfNoAccount(t, id)
			h.process(t, id) // a late nudge: DEAD is final
			if again := h.wantDeadOfNoAccount(t, id); !bytes.Equal(again.Stored.Body, first.Stored.Body) {
				t.Errorf("the notification was rewritten: %s, then %s", first.Stored.Body, again.Stored.Body)
			}
		})
	}
}

// billing_event.dead with no account goes to the endpoints registered for every account (any
// kind, or this kind) and not to one registered for chosen accounts: the notifier's fan-out of
// the stored notification writes a delivery for the first two only.
func TestNotify_DeadEventOfNoKnownAccount_NotForEndpointsOfChosenAccounts(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	ctx := context.Background()
	ids := map[string]string{}
	for name, reg := range map[string]map[string]any{
		"every":          {"url": "https://hooks.example.com/every"},
		"dead":           {"url": "https://hooks.example.com/dead", "kinds": []string{string(notify.BillingEventDead)}},
		"dead of acct_1": {"url": "https://hooks.example.com/acct_1", "kinds": []string{string(notify.BillingEventDead)}, "accounts": []string{"acct_1"}},
	} {
		r := h.Do(t, http.MethodPost, "/v1/webhook-endpoints", apptest.AdminKey, reg)
		if r.Status != http.StatusCreated {
			t.Fatalf("register %s: %d %s", name, r.Status, r.Body)
		}
		ids[name] = r.JSON(t)["id"].(string)
	}
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_x", plan: "customer_pro_plan"}, false)
	failing(h)
	h.failUntilDead(t, id)
	n := h.wantDeadOfNoAccount(t, id)

	// The fan-out only: the notifier's drainer, given every endpoint (read with the operator's
	// client: no function's grant allows the Scan that lists them).
	eps, err := (&endpoints.Store{DB: h.Env.Clients.DynamoDB, Table: h.Env.Names.Table(resources.TableWebhookEndpoints)}).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	notifier := notifierfn.PartsOf(h.Fn(resources.FunctionNotifier))
	created, marked, err := notifier.Drainer.FanOut(ctx, drain.Ref{PK: notify.Partition(n.Stored.ID), SK: notify.SKNotification}, eps)
	if err != nil || created != 2 || !marked {
		t.Fatalf("fan-out: %d deliveries, marked %v, %v; want 2, marked", created, marked, err)
	}
	for _, name := range []string{"every", "dead"} {
		if _, err := notifier.Store.Delivery(ctx, ids[name], n.Stored.ID); err != nil {
			t.Errorf("the endpoint %s has no delivery: %v", name, err)
		}
	}
	if _, err := notifier.Store.Delivery(ctx, ids["dead of acct_1"], n.Stored.ID); !errors.Is(err, drain.ErrNoDelivery) {
		t.Errorf("the endpoint for acct_1 has a delivery (%v); want none", err)
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
