package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/notifytest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// calls are n plain events of an account, ids prefix00, prefix01, …
func calls(prefix string, from, n int) []ev {
	var es []ev
	for i := from; i < from+n; i++ {
		es = append(es, ev{id: fmt.Sprintf("%s%03d", prefix, i), typ: "api.call"})
	}
	return es
}

// notes are the account's notifications as stored, by a key of the test's: "t80" for a
// threshold at 80 crossed, "r80" for it resolved, "limit100" for limit.reached at a limit of 100.
func notes(t testing.TB, h *apptest.Harness, account string) map[string][]notify.Stored {
	t.Helper()
	out := map[string][]notify.Stored{}
	for _, n := range notifytest.Read(t, h.Env) {
		if n.Stored.Account != account {
			continue
		}
		d := n.Message.Data
		var key string
		switch n.Stored.Kind {
		case notify.ThresholdCrossed:
			key = fmt.Sprintf("t%d", *d.Threshold)
		case notify.ThresholdResolved:
			key = fmt.Sprintf("r%d", *d.Threshold)
		case notify.LimitReached:
			key = fmt.Sprintf("limit%d", *d.Limit)
		default:
			t.Fatalf("the worker decided a %s notification", n.Stored.Kind)
		}
		out[key] = append(out[key], n.Stored)
	}
	return out
}

func mustJSON(t testing.TB, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
}

// wantNotes fails unless the account has exactly one notification of each key and no other.
func wantNotes(t testing.TB, h *apptest.Harness, account string, keys ...string) map[string]notify.Stored {
	t.Helper()
	got := notes(t, h, account)
	one := map[string]notify.Stored{}
	var gotKeys []string
	for k, ns := range got {
		gotKeys = append(gotKeys, k)
		if len(ns) != 1 {
			t.Errorf("%s: %d notifications %s; want one", account, len(ns), k)
		}
		one[k] = ns[0]
	}
	slices.Sort(gotKeys)
	slices.Sort(keys)
	if !slices.Equal(gotKeys, keys) {
		t.Fatalf("%s: notifications %v; want %v", account, gotKeys, keys)
	}
	return one
}

// The reference scenario: a free account limited to 100 events crosses 80% with its 80th event
// and is told once; its 100th tells it 100%, and the first event refused tells it the limit is
// reached, once however many more are refused. Redeliveries change nothing, and each message is
// what Standard Webhooks receivers expect: type, timestamp, data.
func TestAlerts_ThresholdsAndTheLimit_EachDecidedOnce(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_alert", "free", map[string]any{"events": 100})
	first := messages(t, h, "acct_alert", calls("evt_a", 0, 85)...)
	for _, group := range split(first, 7) {
		if failed := invoke(t, w, group); len(failed) != 0 {
			t.Fatalf("failed: %v", failed)
		}
	}
	got := wantNotes(t, h, "acct_alert", "t80")
	var m notify.Message
	mustJSON(t, got["t80"].Body, &m)
	if m.Type != notify.ThresholdCrossed || m.ID != got["t80"].ID || *m.Data.Threshold != 80 || *m.Data.Percent != 80 ||
		*m.Data.Limit != 100 || *m.Data.Used < 80 || *m.Data.Used > 85 || m.Data.Feature != "events" || m.Data.Cycle != "2026-11" {
		t.Fatalf("the 80%% notification reads %s", got["t80"].Body)
	}
	if failed := invoke(t, w, first); len(failed) != 0 {
		t.Fatalf("redelivery failed: %v", failed)
	}
	wantNotes(t, h, "acct_alert", "t80")

	more := messages(t, h, "acct_alert", calls("evt_b", 0, 20)...)
	for _, group := range split(more, 3) {
		if failed := invoke(t, w, group); len(failed) != 0 {
			t.Fatalf("failed: %v", failed)
		}
	}
	if u := used(t, h, "acct_alert"); u != 100 {
		t.Fatalf("used %d; want the limit, 100", u)
	}
	got = wantNotes(t, h, "acct_alert", "t80", "t100", "limit100")
	m = notify.Message{}
	mustJSON(t, got["limit100"].Body, &m)
	if m.Type != notify.LimitReached || *m.Data.Limit != 100 || *m.Data.Used != 100 || m.Data.Threshold != nil {
		t.Fatalf("limit.reached reads %s", got["limit100"].Body)
	}
	all := map[string]string{}
	for k, v := range first {
		all[k] = v
	}
	for k, v := range more {
		all[k] = v
	}
	if failed := invoke(t, w, all); len(failed) != 0 {
		t.Fatalf("redelivery failed: %v", failed)
	}
	if again := wantNotes(t, h, "acct_alert", "t80", "t100", "limit100"); again["limit100"].AtMs != got["limit100"].AtMs {
		t.Fatalf("a redelivery rewrote limit.reached")
	}
	// A plan that is not capped has no thresholds: plus crosses nothing.
	h.CreateAccount(t, "acct_plus", "plus", nil)
	if failed := invoke(t, w, messages(t, h, "acct_plus", calls("evt_p", 0, 10)...)); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	wantNotes(t, h, "acct_plus")
}

// split deals messages into n invocations, in id order.
func split(bodies map[string]string, n int) []map[string]string {
	ids := make([]string, 0, len(bodies))
	for id := range bodies {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]map[string]string, n)
	for i := range out {
		out[i] = map[string]string{}
	}
	size := (len(ids) + n - 1) / n
	for i, id := range ids {
		out[i/size][id] = bodies[id]
	}
	return out
}

// Invocations racing on one account — overlapping groupings of the same messages at once, then
// everything redelivered — decide each threshold and the limit exactly once.
func TestAlerts_RacingUnits_EachThresholdDecidedOnce(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_race", "free", map[string]any{"events": 100})
	all := messages(t, h, "acct_race", calls("evt_r", 0, 120)...)
	ids := make([]string, 0, len(all))
	for id := range all {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	groups := make([]map[string]string, 6)
	for g := range groups {
		groups[g] = map[string]string{}
	}
	for i, id := range ids {
		groups[i%6][id] = all[id]
		groups[(i*5+1)%6][id] = all[id]
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() { defer wg.Done(); _ = invokeQuiet(w, g) }()
	}
	wg.Wait()
	if failed := invoke(t, w, all); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if u := used(t, h, "acct_race"); u != 100 {
		t.Fatalf("used %d; want 100", u)
	}
	wantNotes(t, h, "acct_race", "t80", "t100", "limit100")
}

// gate parks the next TransactWriteItems call until it is opened, letting every other call by:
// the parked claim has read, planned and not yet committed.
type gate struct {
	mu      sync.Mutex
	armed   bool
	parked  chan struct{}
	release chan struct{}
}

func (g *gate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.parked, g.release = true, make(chan struct{}), make(chan struct{})
}

func (g *gate) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("test.Gate",
			func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
				if middleware.GetOperationName(ctx) == "TransactWriteItems" {
					g.mu.Lock()
					park := g.armed
					g.armed = false
					g.mu.Unlock()
					if park {
						close(g.parked)
						select {
						case <-g.release:
						case <-time.After(20 * time.Second):
						}
					}
				}
				return next.HandleInitialize(ctx, in)
			}), smithymw.After)
	})
}

// gated runs first until its claim is about to commit, then second to the end, then lets first
// commit, and returns what first's invocation failed.
func gated(t *testing.T, g *gate, w *worker.Worker, first, second map[string]string, between func()) []string {
	t.Helper()
	g.arm()
	done := make(chan []string)
	go func() { done <- invoke(t, w, first) }()
	select {
	case <-g.parked:
	case <-time.After(20 * time.Second):
		t.Fatal("the first invocation never reached its claim")
	}
	if failed := invoke(t, w, second); len(failed) != 0 {
		t.Fatalf("the second invocation failed: %v", failed)
	}
	if between != nil {
		between()
	}
	close(g.release)
	return <-done
}

// Two units that each cross nothing from the usage they read, but cross 80% together: the one
// that commits second is cancelled by its alert condition, reads again and decides the
// threshold (usage.consume.alert-below). Without the condition both commit and 80% is never
// told.
func TestAlerts_TwoUnitsSteppingOverAThresholdTogether_OneDecidesIt(t *testing.T) {
	g := &gate{}
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){g.option}})
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_step", "free", map[string]any{"events": 100})
	if failed := invoke(t, w, map[string]string{"prime": pack(t, h, "acct_step", calls("evt_p", 0, 70)...)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	wantNotes(t, h, "acct_step")
	a := map[string]string{"a": pack(t, h, "acct_step", calls("evt_a", 0, 5)...)}
	b := map[string]string{"b": pack(t, h, "acct_step", calls("evt_b", 0, 5)...)}
	if failed := gated(t, g, w, a, b, nil); len(failed) != 0 {
		t.Fatalf("the first invocation failed: %v", failed)
	}
	if u := used(t, h, "acct_step"); u != 80 {
		t.Fatalf("used %d; want 80", u)
	}
	wantNotes(t, h, "acct_step", "t80")
}

// Two units refused at the limit, the second committing after the first's limit.reached was
// already fanned out: the second is cancelled by the notification's condition, reads again and
// decides nothing (notify.put.once). Without the condition it would write the notification again,
// NEW, over the one the notifier had finished.
func TestAlerts_TwoUnitsRefusedAtTheLimit_TheNotificationIsWrittenOnce(t *testing.T) {
	g := &gate{}
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){g.option}})
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_full", "free", map[string]any{"events": 10})
	if failed := invoke(t, w, map[string]string{"prime": pack(t, h, "acct_full", calls("evt_p", 0, 10)...)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	wantNotes(t, h, "acct_full", "t8", "t10")
	a := map[string]string{"a": pack(t, h, "acct_full", calls("evt_a", 0, 2)...)}
	b := map[string]string{"b": pack(t, h, "acct_full", calls("evt_b", 0, 2)...)}
	fanned := func() {
		n := wantNotes(t, h, "acct_full", "t8", "t10", "limit10")["limit10"]
		_, err := h.Env.Clients.DynamoDB.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
			TableName: aws.String(h.Env.Names.Table(resources.TableNotifications)), Key: notify.ItemKey(n.ID),
			UpdateExpression:          aws.String("SET #s = :fanned REMOVE #due, #dueAt"),
			ExpressionAttributeNames:  map[string]string{"#s": notify.AttrStatus, "#due": resources.NotificationsAttrDueShard, "#dueAt": resources.NotificationsAttrDueAtMs},
			ExpressionAttributeValues: map[string]types.AttributeValue{":fanned": dynamo.S(notify.StatusFanned)},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if failed := gated(t, g, w, a, b, fanned); len(failed) != 0 {
		t.Fatalf("the first invocation failed: %v", failed)
	}
	for _, id := range []string{"evt_a000", "evt_a001", "evt_b000", "evt_b001"} {
		if e := entry(t, h, "acct_full", id); e.Status != ledger.Rejected {
			t.Fatalf("%s is %s; want REJECTED", id, e.Status)
		}
	}
	if n := wantNotes(t, h, "acct_full", "t8", "t10", "limit10")["limit10"]; n.Status != notify.StatusFanned {
		t.Fatalf("limit.reached is %s again after the notifier finished it", n.Status)
	}
}

// The worker dies before, inside and after the claim that crosses a threshold, and the messages
// are delivered again: the threshold is decided exactly once.
func TestAlerts_CrashWindows_TheCrossingDecidedOnce(t *testing.T) {
	faults := instrument.NewFaults(nil)
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	w := h.Worker().Worker
	type crash struct {
		name string
		hook worker.Hook
		plan instrument.FaultPlan
	}
	crashes := []crash{
		{name: "before archive", hook: killAt(worker.Point{Before: true, Stage: ledger.StageArchive})},
		{name: "after claim", hook: killAt(worker.Point{Stage: worker.StageClaim})},
		{name: "before mark", hook: killAt(worker.Point{Before: true, Stage: ledger.StageMark})},
	}
	for _, kind := range []instrument.Fault{instrument.CrashBefore, instrument.CrashAfter} {
		crashes = append(crashes, crash{name: fmt.Sprintf("claim transaction %v", kind), plan: func(op string, _, _ int) instrument.Fault {
			if op == "TransactWriteItems" {
				return kind
			}
			return instrument.NoFault
		}})
	}
	for i, cr := range crashes {
		t.Run(strings.ReplaceAll(cr.name, " ", "_"), func(t *testing.T) {
			acct := fmt.Sprintf("acct_crash_%d", i)
			h.CreateAccount(t, acct, "free", map[string]any{"events": 100})
			if failed := invoke(t, w, map[string]string{"prime": pack(t, h, acct, calls("evt_p", 0, 75)...)}); len(failed) != 0 {
				t.Fatalf("failed: %v", failed)
			}
			bodies := map[string]string{"cross": pack(t, h, acct, calls("evt_c", 0, 10)...)}
			w.Hook = cr.hook
			faults.SetPlan(cr.plan)
			failed := invoke(t, w, bodies)
			w.Hook = nil
			faults.SetPlan(nil)
			if len(failed) == 0 {
				t.Fatalf("killed %s, yet nothing failed", cr.name)
			}
			for range 2 {
				if failed := invoke(t, w, bodies); len(failed) != 0 {
					t.Fatalf("redelivery failed: %v", failed)
				}
			}
			if u := used(t, h, acct); u != 85 {
				t.Fatalf("used %d; want 85", u)
			}
			wantNotes(t, h, acct, "t80")
		})
	}
}

// A unit as large as its transaction allows crosses two thresholds at once: the two
// notifications do not fit beside its 95 entries, so the claim leaves its last members for the
// next lap, which claims them on what the first left. Every event is billed once and each
// threshold is decided once.
func TestAlerts_AFullUnitCrossingTwoThresholds_LeavesItsLastMembersForTheNextLap(t *testing.T) {
	counter := instrument.NewCallCounter()
	h := apptest.New(t, apptest.Options{DynamoDB: counter.Options().DynamoDB})
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_full_unit", "free", map[string]any{"events": 95})
	counter.Reset()
	body := pack(t, h, "acct_full_unit", calls("evt_f", 0, 95)...)
	if failed := invoke(t, w, map[string]string{"full": body}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if got := counter.Snapshot()["DynamoDB TransactWriteItems"]; got < 2 {
		t.Fatalf("%d claim transactions; the unit's notifications cannot fit beside all its members in one", got)
	}
	if u := used(t, h, "acct_full_unit"); u != 95 {
		t.Fatalf("used %d; want 95", u)
	}
	for i := range 95 {
		if e := entry(t, h, "acct_full_unit", fmt.Sprintf("evt_f%03d", i)); e.Status != ledger.Inserted {
			t.Fatalf("%s is %s", e.EventID, e.Status)
		}
	}
	wantNotes(t, h, "acct_full_unit", "t76", "t95")
	if failed := invoke(t, w, map[string]string{"full": body}); len(failed) != 0 || used(t, h, "acct_full_unit") != 95 {
		t.Fatalf("a redelivery failed (%v) or moved the meter", failed)
	}
	wantNotes(t, h, "acct_full_unit", "t76", "t95")
}

// An account's own thresholds replace its plan's, through the accounts API, and are what its
// claims decide; a bad one is refused whole, naming every problem, and nothing is stored.
func TestAlerts_AnAccountsOwnThresholds_ReplaceItsPlans(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	resp := h.Do(t, "POST", "/v1/accounts", apptest.AdminKey, map[string]any{
		"id": "acct_own", "plan": "free", "limits": map[string]any{"events": 10},
		"alerts": map[string]any{"events": []any{map[string]any{"percent": 50}, map[string]any{"value": 9}}},
	})
	if resp.Status != 201 {
		t.Fatalf("create: %d %s", resp.Status, resp.Body)
	}
	if got := fmt.Sprint(resp.JSON(t)["alerts"].(map[string]any)["events"]); got != "[map[percent:50] map[value:9]]" {
		t.Fatalf("the account shows its thresholds as %s", got)
	}
	for _, bad := range []map[string]any{
		{"alerts": map[string]any{"events": []any{map[string]any{"percent": 0}}, "nope": []any{}}},
		{"alerts": map[string]any{"events": []any{map[string]any{"percent": 50, "extra": 1}}}},
		{"alerts": map[string]any{"credits": []any{map[string]any{"value": 1}}}},
	} {
		if r := h.Do(t, "PATCH", "/v1/accounts/acct_own", apptest.AdminKey, bad); r.Status != 400 {
			t.Fatalf("PATCH %v: %d %s; want 400", bad, r.Status, r.Body)
		}
	}
	if failed := invoke(t, w, messages(t, h, "acct_own", calls("evt_o", 0, 10)...)); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	wantNotes(t, h, "acct_own", "t5", "t9")
	// No overrides at all, and an account created with an empty list for a feature, are stored
	// as they are.
	if r := h.Do(t, "POST", "/v1/accounts", apptest.AdminKey, map[string]any{"id": "acct_none", "alerts": map[string]any{}}); r.Status != 201 {
		t.Fatalf("create with no overrides: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, "POST", "/v1/accounts", apptest.AdminKey, map[string]any{"id": "acct_off", "alerts": map[string]any{"tokens": []any{}}}); r.Status != 201 ||
		fmt.Sprint(r.JSON(t)["alerts"].(map[string]any)["tokens"]) != "[]" {
		t.Fatalf("create with tokens' thresholds off: %d %s", r.Status, r.Body)
	}
	// An empty list turns the account's thresholds off; its next cycle would decide none.
	if r := h.Do(t, "PATCH", "/v1/accounts/acct_own", apptest.AdminKey, map[string]any{"alerts": map[string]any{"events": []any{}}}); r.Status != 200 ||
		fmt.Sprint(r.JSON(t)["alerts"].(map[string]any)["events"]) != "[]" {
		t.Fatalf("PATCH alerts off: %d %s", r.Status, r.Body)
	}
}

// A limit raised mid-cycle moves the percent thresholds with it: the thresholds of the new limit
// are told when the usage reaches them, and those told before stay told.
func TestAlerts_ARaisedLimit_ResolvesAndMovesThePercentThresholds(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_raise", "free", map[string]any{"events": 10})
	if failed := invoke(t, w, map[string]string{"first": pack(t, h, "acct_raise", calls("evt_a", 0, 10)...)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	wantNotes(t, h, "acct_raise", "t8", "t10")
	if r := h.Do(t, "PATCH", "/v1/accounts/acct_raise", apptest.AdminKey, map[string]any{"limits": map[string]any{"events": 20}}); r.Status != 200 {
		t.Fatalf("raise: %d %s", r.Status, r.Body)
	}
	// The raise moves 80% to 16 and 100% to 20: the next claim finds the account (10) under
	// both again and resolves them, and its own 5 events cross neither.
	if failed := invoke(t, w, map[string]string{"second": pack(t, h, "acct_raise", calls("evt_b", 0, 5)...)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	got := wantNotes(t, h, "acct_raise", "t8", "t10", "r16", "r20")
	for _, k := range []string{"r16", "r20"} {
		var m notify.Message
		mustJSON(t, got[k].Body, &m)
		if m.Type != notify.ThresholdResolved || *m.Data.Used != 10 || *m.Data.Limit != 20 || m.Data.Percent == nil {
			t.Fatalf("%s reads %s", k, got[k].Body)
		}
	}
	// A redelivery resolves nothing again.
	if failed := invoke(t, w, map[string]string{"second": pack(t, h, "acct_raise", calls("evt_b", 0, 5)...)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	wantNotes(t, h, "acct_raise", "t8", "t10", "r16", "r20")
	// Crossing the moved thresholds tells them again, as new notifications.
	if failed := invoke(t, w, map[string]string{"third": pack(t, h, "acct_raise", calls("evt_c", 0, 6)...)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if u := used(t, h, "acct_raise"); u != 20 {
		t.Fatalf("used %d; want 20", u)
	}
	wantNotes(t, h, "acct_raise", "t8", "t10", "r16", "r20", "t16", "t20", "limit20")
}

// A raise the account's usage has already passed resolves nothing: 80% of 12 stands at 10,
// under the usage; 100% moves to 12, over it, and is resolved. Lowered back to 10, 100% is
// crossed again (a third change, a new notification) when the next claim finds the usage at it.
func TestAlerts_ASmallRaise_ResolvesOnlyWhatMovedAboveTheUsage(t *testing.T) {
	h := apptest.New(t)
	w := h.Worker().Worker
	h.CreateAccount(t, "acct_small", "free", map[string]any{"events": 10})
	limit := func(n int) {
		t.Helper()
		if r := h.Do(t, "PATCH", "/v1/accounts/acct_small", apptest.AdminKey, map[string]any{"limits": map[string]any{"events": n}}); r.Status != 200 {
			t.Fatalf("limit %d: %d %s", n, r.Status, r.Body)
		}
	}
	if failed := invoke(t, w, map[string]string{"first": pack(t, h, "acct_small", calls("evt_a", 0, 11)...)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	wantNotes(t, h, "acct_small", "t8", "t10", "limit10")
	limit(12)
	if failed := invoke(t, w, map[string]string{"second": pack(t, h, "acct_small", calls("evt_b", 0, 1)...)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	wantNotes(t, h, "acct_small", "t8", "t10", "limit10", "r12")
	limit(10)
	if failed := invoke(t, w, map[string]string{"third": pack(t, h, "acct_small", calls("evt_c", 0, 1)...)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	// 100% at 10 was crossed, resolved (at 12), and is crossed again: "t10" twice, two ids.
	got := notes(t, h, "acct_small")
	if n := got["t10"]; len(n) != 2 || n[0].ID == n[1].ID {
		t.Fatalf("100%% of 10 told %d times (%v); want twice, two ids", len(n), n)
	}
	if len(got["r12"]) != 1 || len(got["t8"]) != 1 || len(got["limit10"]) != 1 || len(got) != 4 {
		t.Fatalf("notifications %v", got)
	}
}
