package inbox_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// Every copy adds one to the seen count and writes its receipt, with the unsigned webhook-id;
// the copy never resets what the stored event became.
func TestIntake_CopiesAreCountedAndNeverOverwriteTheEvent(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	e := kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}
	id := h.deliver(t, e, false)
	if _, err := h.process(t, id); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		h.Clock.Advance(5 * time.Second)
		h.deliver(t, e, true)
	}
	got := h.event(t, id)
	if got.Status != inbox.Applied || got.SeenCount != 4 || got.Attempts != 1 {
		t.Errorf("after three copies: %s, seen %d, %d attempts; want APPLIED, seen 4, 1 attempt", got.Status, got.SeenCount, got.Attempts)
	}
	receipts := h.receipts(t, id)
	if len(receipts) != 4 {
		t.Fatalf("%d receipts; want 4", len(receipts))
	}
	for i, r := range receipts {
		if r.Duplicate != (i > 0) || r.WebhookID != "wh_event_1" || r.PayloadSHA256 == "" || r.KeyID == "" {
			t.Errorf("receipt %d: %+v", i, r)
		}
	}
}

// The dedupe key is the signed event_id: the unsigned webhook-id header cannot merge two events
// or split one.
func TestIntake_DedupesOnTheSignedEventIDNotTheHeader(t *testing.T) {
	h := newHarness(t)
	a := kindeEvent{id: "event_a", typ: "customer.plan_changed", at: start, customer: "c", plan: "customer_pro_plan"}
	b := kindeEvent{id: "event_b", typ: "customer.plan_changed", at: start, customer: "c", plan: "customer_pro_plan"}
	post := func(e kindeEvent, webhookID string) string {
		r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(h.token(t, e)), "Content-Type", "application/jwt", "webhook-id", webhookID)
		if r.Status != http.StatusOK {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		return r.JSON(t)["id"].(string)
	}
	ida := post(a, "msg_same")
	idb := post(b, "msg_same")
	idb2 := post(b, "msg_other")
	if ida == idb || idb != idb2 {
		t.Errorf("ids %s %s %s: the two events must differ, the copies of b agree", ida, idb, idb2)
	}
	if got := h.event(t, idb); got.SeenCount != 2 {
		t.Errorf("b seen %d; want 2", got.SeenCount)
	}
}

// The copy's condition: a copy of an event that no longer exists (expired) writes nothing and
// says so; it must not leave a stray half item.
func TestIntake_CopyOfAMissingEventWritesNothing(t *testing.T) {
	h := newHarness(t)
	id := inbox.ID(inbox.Kinde, "event_gone")
	err := h.store().AddCopy(context.Background(), id, inbox.Receipt{ReceivedAtMs: 1, Duplicate: true, PayloadSHA256: "x"})
	if !errors.Is(err, inbox.ErrCancelled) {
		t.Fatalf("AddCopy of a missing event: %v; want ErrCancelled", err)
	}
	h.assertNothingStored(t)
}

// A store failure answers 503 so the provider retries, and stores nothing; the retry stores it.
func TestIntake_StoreFailureIs503AndTheRetryStores(t *testing.T) {
	if testenv.External() {
		t.Skip("injects faults at the client")
	}
	faults := instrument.NewFaults(nil)
	h := newHarness(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	e := kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "c", plan: "customer_pro_plan"}
	token := h.token(t, e)
	faults.SetPlan(func(op string, _, _ int) instrument.Fault {
		if op == "TransactWriteItems" {
			return instrument.CrashBefore
		}
		return instrument.NoFault
	})
	r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(token), "Content-Type", "application/jwt")
	faults.SetPlan(nil)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("%d %s; want 503 with Retry-After", r.Status, r.Body)
	}
	h.assertNothingStored(t)
	if r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(token), "Content-Type", "application/jwt"); r.Status != http.StatusOK || r.JSON(t)["duplicate"] != false {
		t.Fatalf("the retry: %d %s; want 200, not a duplicate", r.Status, r.Body)
	}
	if n := h.tableItems(t, resources.TableInbox); n != 3 {
		t.Errorf("%d items; want the event, its payload and one receipt", n)
	}
}

// A store that committed but whose answer was lost (the function died after the write) leaves
// the event stored; the provider's retry is counted as a copy, and the event applies once.
func TestIntake_AnsweredLostAfterTheWrite_RetryIsACopy(t *testing.T) {
	if testenv.External() {
		t.Skip("injects faults at the client")
	}
	faults := instrument.NewFaults(nil)
	h := newHarness(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	key := h.account(t, "acct_1", "customer_1", "")
	e := kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}
	token := h.token(t, e)
	faults.SetPlan(func(op string, _, _ int) instrument.Fault {
		if op == "TransactWriteItems" {
			return instrument.CrashAfter
		}
		return instrument.NoFault
	})
	r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(token), "Content-Type", "application/jwt")
	faults.SetPlan(nil)
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("%d %s; want 503 (the write's answer was lost)", r.Status, r.Body)
	}
	if r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(token), "Content-Type", "application/jwt"); r.Status != http.StatusOK || r.JSON(t)["duplicate"] != true {
		t.Fatalf("the retry: %d %s; want 200 duplicate", r.Status, r.Body)
	}
	h.Clock.Advance(time.Second)
	h.settle(t)
	id := inbox.ID(inbox.Kinde, "event_1")
	got := h.stateOf(t, key, "acct_1", []string{id})
	if got.Plan != "plus" || got.Grants != "free 10, plus 490" || got.Seen != "2" || got.Receipts != 2 {
		t.Errorf("end state: %s", got)
	}
}
