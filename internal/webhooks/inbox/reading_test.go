package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// An event for a customer no account is linked to is IGNORED with the reason; once the
// operator links the customer, a replay applies it. An account replays only its own events:
// another account's answers exactly as an unknown id.
func TestReplay_UnknownCustomerLinkedThenReplayed_OwnOnly(t *testing.T) {
	h := newHarness(t)
	key := h.account(t, "acct_1", "", "")
	otherKey := h.account(t, "acct_2", "customer_2", "")
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Ignored {
		t.Fatalf("%+v %v; want IGNORED", out, err)
	}
	if e := h.event(t, id); !strings.Contains(e.Reason, `no account is linked to kindeCustomerId "customer_1"`) {
		t.Errorf("reason %q", e.Reason)
	}
	// Nobody's yet: only the operator sees it.
	if r := h.Do(t, http.MethodGet, "/v1/billing-events/"+id, key, nil); r.Status != http.StatusNotFound {
		t.Errorf("an unattributed event to an account: %d", r.Status)
	}
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_1", apptest.AdminKey, map[string]any{"kindeCustomerId": "customer_1"}); r.Status != http.StatusOK {
		t.Fatalf("link: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, http.MethodPost, "/v1/billing-events/"+id+"/replay", apptest.AdminKey, nil); r.Status != http.StatusAccepted || r.JSON(t)["status"] != "RECEIVED" {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Applied {
		t.Fatalf("replayed: %+v %v", out, err)
	}
	// Now it is acct_1's: acct_1 reads and replays it, acct_2 gets what an unknown id gets.
	if r := h.Do(t, http.MethodGet, "/v1/billing-events/"+id, key, nil); r.Status != http.StatusOK || len(r.JSON(t)["receipts"].([]any)) != 1 {
		t.Errorf("own event: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, http.MethodPost, "/v1/billing-events/"+id+"/replay", key, nil); r.Status != http.StatusAccepted {
		t.Errorf("own replay: %d %s", r.Status, r.Body)
	}
	h.settle(t)
	unknown := inbox.ID(inbox.Kinde, "event_never")
	for _, path := range []string{"/v1/billing-events/%s", "/v1/billing-events/%s/replay"} {
		method := http.MethodGet
		if strings.HasSuffix(path, "replay") {
			method = http.MethodPost
		}
		theirs := h.Do(t, method, fmt.Sprintf(path, id), otherKey, nil)
		none := h.Do(t, method, fmt.Sprintf(path, unknown), otherKey, nil)
		if theirs.Status != http.StatusNotFound || string(theirs.Body) != string(none.Body) {
			t.Errorf("%s another account's: %d %s; unknown: %d %s; want identical 404s", method, theirs.Status, theirs.Body, none.Status, none.Body)
		}
	}
	// A replay's body, if any, is an empty object, read by the strict decoder: anything else is
	// refused and the event is left as it is.
	for _, body := range []string{`{"status":"RECEIVED"}`, `{} {}`, `[]`} {
		if r := h.Do(t, http.MethodPost, "/v1/billing-events/"+id+"/replay", key, []byte(body)); r.Status != http.StatusBadRequest {
			t.Errorf("replay with %s: %d %s; want 400", body, r.Status, r.Body)
		}
	}
	if e := h.event(t, id); e.Status != inbox.Applied {
		t.Errorf("after refused replays: %s", e.Status)
	}
	// The replays changed nothing: the grant is still once.
	if c := h.grants(t, "acct_1", "2026-11"); c.Total() != 500 || len(c.Grants) != 2 {
		t.Errorf("after replays: %+v", c.Grants)
	}
	if e := h.event(t, id); e.Status != inbox.Applied || !strings.Contains(e.Result, "already applied") {
		t.Errorf("the second replay: %s %q", e.Status, e.Result)
	}
}

func TestUnhandledType_Ignored(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.trial_started", at: start, customer: "customer_1"}, false)
	if out, err := h.process(t, id); err != nil || out.Status != inbox.Ignored {
		t.Fatalf("%+v %v", out, err)
	}
	if e := h.event(t, id); e.Reason != "Ferry does not handle customer.trial_started events" || e.AccountID != "acct_1" {
		t.Errorf("%q for %q", e.Reason, e.AccountID)
	}
}

// A customer.meter_usage_updated event is recorded, APPLIED, and leaves a mark for the
// reconciler; the reconciler clears a mark only at the revision it listed.
func TestMeterUsage_MarksTheCycleForTheReconciler(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	meter := func(id, feature string, at time.Time) string {
		return h.deliver(t, kindeEvent{id: id, typ: "customer.meter_usage_updated", at: at, customer: "customer_1",
			extraData: map[string]any{"feature_code": feature, "customer_agreement_id": "agreement_1"}}, false)
	}
	first := meter("event_m1", "tokens", start)
	h.settle(t)
	if e := h.event(t, first); e.Status != inbox.Applied || !strings.Contains(e.Result, "tokens of 2026-11 marked") {
		t.Fatalf("%s %q", e.Status, e.Result)
	}
	marks := h.meterMarks()
	listed, next, err := marks.List(context.Background(), "", 10)
	if err != nil || next != "" || len(listed) != 1 {
		t.Fatalf("marks %+v next %q err %v", listed, next, err)
	}
	m := listed[0]
	if m.AccountID != "acct_1" || m.Feature != "tokens" || m.Cycle != "2026-11" || m.EventID != first || m.Rev != 1 {
		t.Errorf("mark %+v", m)
	}
	// Marked again before the reconciler clears the first listing: the stale clear keeps it.
	meter("event_m2", "tokens", start.Add(time.Minute))
	h.settle(t)
	if cleared, err := marks.Clear(context.Background(), m); err != nil || cleared {
		t.Fatalf("a clear at a stale revision: %v %v; want kept", cleared, err)
	}
	listed, _, _ = marks.List(context.Background(), "", 10)
	if len(listed) != 1 || listed[0].Rev != 2 {
		t.Fatalf("marks %+v; want the one mark at revision 2", listed)
	}
	if cleared, err := marks.Clear(context.Background(), listed[0]); err != nil || !cleared {
		t.Fatalf("clear: %v %v", cleared, err)
	}
	if listed, _, _ = marks.List(context.Background(), "", 10); len(listed) != 0 {
		t.Errorf("marks after the clear: %+v", listed)
	}
	// An unknown feature code marks every feature of the cycle.
	meter("event_m3", "not_a_feature", start)
	h.settle(t)
	if listed, _, _ = marks.List(context.Background(), "", 10); len(listed) != 1 || listed[0].Feature != "" {
		t.Errorf("marks %+v; want one for every feature", listed)
	}
}

// The meter marks page through their shards with a cursor.
func TestMeterMarks_PageThroughShards(t *testing.T) {
	h := newHarness(t)
	const accounts = 12
	for i := range accounts {
		acct, customer := fmt.Sprintf("acct_%d", i), fmt.Sprintf("customer_%d", i)
		h.account(t, acct, customer, "")
		h.deliver(t, kindeEvent{id: "event_" + acct, typ: "customer.meter_usage_updated", at: start, customer: customer,
			extraData: map[string]any{"feature_code": "events"}}, false)
	}
	h.settle(t)
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		marks, next, err := h.meterMarks().List(context.Background(), cursor, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range marks {
			if seen[m.AccountID] {
				t.Errorf("%s listed twice", m.AccountID)
			}
			seen[m.AccountID] = true
		}
		if next == "" {
			break
		}
		if page > 20 {
			t.Fatal("no end to the pages")
		}
		cursor = next
	}
	if len(seen) != accounts {
		t.Errorf("%d accounts' marks listed; want %d", len(seen), accounts)
	}
}

// GET /v1/billing-events pages with a cursor, newest first; filters by status and (operator)
// by account; an account lists only its own.
func TestList_PagesFiltersAndScopes(t *testing.T) {
	h := newHarness(t)
	key := h.account(t, "acct_1", "customer_1", "")
	otherKey := h.account(t, "acct_2", "customer_2", "")
	var ids []string
	for i := range 5 {
		h.Clock.Advance(time.Second)
		ids = append(ids, h.deliver(t, kindeEvent{id: fmt.Sprintf("event_%d", i), typ: "customer.plan_changed",
			at: start.Add(time.Duration(i) * time.Minute), customer: "customer_1", plan: "customer_pro_plan"}, false))
	}
	h.deliver(t, kindeEvent{id: "event_other", typ: "customer.payment_failed", at: start, customer: "customer_2"}, false)
	h.deliver(t, kindeEvent{id: "event_nobody", typ: "customer.payment_failed", at: start, customer: "customer_9"}, false)
	h.settle(t)

	list := func(key, query string) (items []map[string]any, next string) {
		t.Helper()
		r := h.Do(t, http.MethodGet, "/v1/billing-events"+query, key, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", query, r.Status, r.Body)
		}
		var body struct {
			Items []map[string]any
			Next  *string
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		if body.Next != nil {
			next = *body.Next
		}
		return body.Items, next
	}
	// acct_1's five, newest first, two a page.
	var got []string
	cursor := ""
	for range 5 {
		q := "?limit=2"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		items, next := list(key, q)
		for _, it := range items {
			got = append(got, it["id"].(string))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("pages:\n got  %v\n want %v", got, want)
	}
	if items, _ := list(otherKey, ""); len(items) != 1 || items[0]["type"] != "customer.payment_failed" {
		t.Errorf("acct_2 lists %v", items)
	}
	if items, _ := list(apptest.AdminKey, ""); len(items) != 7 {
		t.Errorf("the operator lists %d; want all 7", len(items))
	}
	if items, _ := list(apptest.AdminKey, "?account=acct_2"); len(items) != 1 {
		t.Errorf("the operator's acct_2 list: %v", items)
	}
	// acct_1's plan changes were applied in the order they came, each newer than the one before,
	// so all five are APPLIED; the unattributed one is IGNORED.
	if items, _ := list(apptest.AdminKey, "?status=IGNORED"); len(items) != 1 || items[0]["accountId"] != nil {
		t.Errorf("IGNORED: %v", items)
	}
	if items, _ := list(key, "?status=APPLIED"); len(items) != 5 {
		t.Errorf("acct_1 APPLIED: %d", len(items))
	}
	if items, _ := list(key, "?status=DEAD"); len(items) != 0 {
		t.Errorf("acct_1 DEAD: %v", items)
	}
	// Another account, named by an account key, is not found, as its resources are.
	if r := h.Do(t, http.MethodGet, "/v1/billing-events?account=acct_2", key, nil); r.Status != http.StatusNotFound {
		t.Errorf("?account=acct_2: %d %s; want 404", r.Status, r.Body)
	}
	for _, c := range []struct{ key, query, want string }{
		{key, "?status=DONE", "status must be one of"},
		{key, "?limit=101", "limit must be"},
		{key, "?limit=0", "limit must be"},
		{key, "?cursor=bm9wZQ", "cursor is not one this API returned"},
		{key, "?colour=red", `unknown query parameter`},
		{key, "?status=APPLIED&status=IGNORED", "given 2 times"},
		{key, "?status=", "is empty"},
	} {
		if r := h.Do(t, http.MethodGet, "/v1/billing-events"+c.query, c.key, nil); r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), c.want) {
			t.Errorf("%s: %d %s; want 400 saying %q", c.query, r.Status, r.Body, c.want)
		}
	}
}
