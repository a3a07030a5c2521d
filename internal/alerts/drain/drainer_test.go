package drain_test

import (
	"bytes"
	"context"
	"errors"
	mathrand "math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/alerts/drain"
	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// A notification goes to every endpoint that wants its kind and its account, and to no other:
// not one that wants another kind, not one for other accounts, not a disabled one.
func TestFanOut_OnlyToEndpointsThatWantTheKindAndAccount(t *testing.T) {
	r := newRig(t)
	r.endpoint(t, epID("all"), nil, nil, secretA)
	r.endpoint(t, epID("limits"), []string{string(notify.LimitReached)}, nil, secretA)
	r.endpoint(t, epID("other_account"), nil, []string{"acct_2"}, secretA)
	r.endpoint(t, epID("this_account"), []string{string(notify.ThresholdCrossed)}, []string{"acct_1"}, secretA)
	r.endpointAt(t, endpoints.Endpoint{ID: epID("disabled"), URL: r.rcv.url(epID("disabled")), Disabled: true}, secretA)
	n := r.notification(t, "acct_1", 800)

	res := r.run(t, r.d)
	if res.Fanned != 1 || res.Created != 2 || res.Delivered != 2 {
		t.Fatalf("result %+v; want 1 fanned out, 2 deliveries written and delivered", res)
	}
	for _, ep := range sorted(epID("all"), epID("this_account")) {
		if got := r.rcv.requests(ep); len(got) != 1 || got[0].id != n.ID() {
			t.Errorf("%s received %+v; want one delivery of %s", ep, got, n.ID())
		}
	}
	for _, ep := range []string{epID("limits"), epID("other_account"), epID("disabled")} {
		if got := r.rcv.requests(ep); len(got) != 0 {
			t.Errorf("%s received %d deliveries; it does not want the notification", ep, len(got))
		}
		if _, err := r.store.Delivery(context.Background(), ep, n.ID()); !errors.Is(err, drain.ErrNoDelivery) {
			t.Errorf("%s has a delivery (%v); want none", ep, err)
		}
	}
	page, _, err := r.store.Notifications(context.Background(), "acct_1", "", 0)
	if err != nil || len(page) != 1 {
		t.Fatalf("notifications %+v, %v", page, err)
	}
	if got := page[0]; got.Status != notify.StatusFanned || !slices.Equal(got.FannedTo, sorted(epID("all"), epID("this_account"))) ||
		got.FannedAtMs != start.UnixMilli() {
		t.Errorf("notification %+v; want FANNED to the endpoints all and this_account", got)
	}
	// Off the due index: the next run finds nothing to do.
	if res := r.run(t, r.d); res.Fanned != 0 || res.Created != 0 || res.Due != 0 {
		t.Errorf("second run %+v; want nothing due", res)
	}
}

// A notification of no account (billing_event.dead of an event no account is known for) goes to
// the endpoints registered for every account, whatever kinds they chose, and to none registered
// for chosen accounts.
func TestFanOut_ANotificationOfNoAccount_OnlyToEndpointsForEveryAccount(t *testing.T) {
	r := newRig(t)
	r.endpoint(t, epID("all"), nil, nil, secretA)
	r.endpoint(t, epID("dead"), []string{string(notify.BillingEventDead)}, nil, secretA)
	r.endpoint(t, epID("dead_acct_1"), []string{string(notify.BillingEventDead)}, []string{"acct_1"}, secretA)
	n := notify.Notification{Kind: notify.BillingEventDead, AtMs: r.clock.Now().UnixMilli(), Subject: "bev_x#0",
		Detail: notify.Detail{Event: "bev_x", EventType: "customer.plan_changed", Reason: "attempt 6 of 6 failed"}}
	r.put(t, n.Item())

	res := r.run(t, r.d)
	if res.Fanned != 1 || res.Created != 2 || res.Delivered != 2 {
		t.Fatalf("result %+v; want 1 fanned out, 2 deliveries written and delivered", res)
	}
	for _, ep := range []string{epID("all"), epID("dead")} {
		if got := r.rcv.requests(ep); len(got) != 1 || got[0].id != n.ID() || !bytes.Equal(got[0].body, n.Body()) {
			t.Errorf("%s received %+v; want one delivery of %s", ep, got, n.ID())
		}
	}
	if got := r.rcv.requests(epID("dead_acct_1")); len(got) != 0 {
		t.Errorf("the endpoint for acct_1 received %d deliveries of a notification of no account", len(got))
	}
	if _, err := r.store.Delivery(context.Background(), epID("dead_acct_1"), n.ID()); !errors.Is(err, drain.ErrNoDelivery) {
		t.Errorf("the endpoint for acct_1 has a delivery (%v); want none", err)
	}
}

// A notification reaches an endpoint once, under the notification's id, with the body stored
// when it was decided, and its delivery says DELIVERED with the answer.
func TestDeliver_DeliveredOnceUnderTheNotificationsID(t *testing.T) {
	r := newRig(t)
	r.endpoint(t, epID("a"), nil, nil, secretA)
	n := r.notification(t, "acct_1", 800)
	r.clock.Advance(3 * time.Second)

	if res := r.run(t, r.d); res.Delivered != 1 {
		t.Fatalf("result %+v", res)
	}
	got := r.rcv.requests(epID("a"))
	if len(got) != 1 {
		t.Fatalf("received %d deliveries; want 1", len(got))
	}
	if got[0].id != n.ID() || !bytes.Equal(got[0].body, n.Body()) || !got[0].timestamp.Equal(r.clock.Now().Truncate(time.Second)) {
		t.Errorf("received id %s, timestamp %v, body %s; want %s, the attempt's instant, %s", got[0].id, got[0].timestamp, got[0].body, n.ID(), n.Body())
	}
	d := r.delivery(t, n, epID("a"))
	if d.Status != notify.DeliveryDelivered || d.Attempts != 1 || d.LastStatus != http.StatusNoContent ||
		d.DeliveredAtMs != r.clock.Now().UnixMilli() || d.Kind != notify.ThresholdCrossed || d.Account != "acct_1" {
		t.Errorf("delivery %+v", d)
	}
	if r.metrics.Get(metrics.NotificationsDelivered) != 1 {
		t.Errorf("metrics %v", r.metrics.Snapshot())
	}
	// Finished, it leaves the due index and expires after Retention.
	item := r.item(t, notify.Partition(n.ID()), notify.DeliveryPrefix+epID("a"))
	if dynamo.Has(item, resources.NotificationsAttrDueShard) || dynamo.Int(item, resources.NotificationsTTLAttribute) == 0 {
		t.Errorf("a delivered item still due, or without its expiry: %v", item)
	}
	r.clock.Advance(24 * time.Hour)
	if res := r.run(t, r.d); res.Due != 0 || r.rcv.total() != 1 {
		t.Errorf("a delivered notification was looked at again: %+v, %d requests", res, r.rcv.total())
	}
}

// An endpoint that keeps answering 500 is tried MaxAttempts times, each wait drawn with full
// jitter from a window that doubles (30 s, 1 min, 2 min…, at most an hour); after the last try the
// delivery is DEAD, counted by the alarmed metric, and never tried again. Every attempt carries
// the same webhook-id and body, and its own timestamp.
func TestDeliver_ReceiverDown_RetriesWithGrowingJitteredBackoff_ThenDead(t *testing.T) {
	r := newRig(t)
	r.endpoint(t, epID("a"), nil, nil, secretA)
	r.rcv.answerWith(epID("a"), http.StatusInternalServerError)
	n := r.notification(t, "acct_1", 800)
	// The same seed as the drainer's: the waits it must have drawn.
	twin := mathrand.NewPCG(jitterSeed1, jitterSeed2)

	for attempt := 1; attempt <= drain.MaxAttempts; attempt++ {
		res := r.run(t, r.d)
		d := r.delivery(t, n, epID("a"))
		if d.Attempts != attempt || d.LastStatus != http.StatusInternalServerError || d.LastError == "" {
			t.Fatalf("attempt %d: delivery %+v", attempt, d)
		}
		if attempt == drain.MaxAttempts {
			if res.Dead != 1 || d.Status != notify.DeliveryDead {
				t.Fatalf("last attempt: %+v, delivery %+v; want DEAD", res, d)
			}
			break
		}
		window := drain.BackoffWindow(attempt)
		wait := time.Duration(d.NextAttemptAtMs-r.clock.Now().UnixMilli()) * time.Millisecond
		if res.Retrying != 1 || d.Status != notify.DeliveryPending || wait != drain.Jitter(window, twin.Uint64()).Truncate(time.Millisecond) || wait > window {
			t.Fatalf("attempt %d: %+v, delivery %+v, wait %v; want PENDING after a wait drawn from [0, %v]", attempt, res, d, wait, window)
		}
		if attempt > 1 && window <= drain.BackoffWindow(attempt-1) && window < drain.BackoffCap {
			t.Fatalf("attempt %d: the window %v did not grow", attempt, window)
		}
		// Not before its wait is over.
		if wait > time.Millisecond {
			r.clock.Advance(wait - time.Millisecond)
			if res := r.run(t, r.d); res.Due != 0 {
				t.Fatalf("attempt %d: due before its backoff: %+v", attempt, res)
			}
			r.clock.Advance(time.Millisecond)
		}
		// The schedule runs the notifier once a minute, so an attempt starts up to one period later.
		r.clock.Advance(resources.NotifierEvery)
	}
	if got := r.metrics.Get(metrics.NotificationsDead); got != 1 {
		t.Errorf("NotificationsDead counted %d; want 1", got)
	}
	if got := r.metrics.Get(metrics.NotificationsRetried); got != drain.MaxAttempts-1 {
		t.Errorf("NotificationsRetried counted %d; want %d", got, drain.MaxAttempts-1)
	}
	got := r.rcv.requests(epID("a"))
	if len(got) != drain.MaxAttempts || r.rcv.distinctIDs(epID("a")) != 1 {
		t.Fatalf("received %d requests, %d ids; want %d requests of one id", len(got), r.rcv.distinctIDs(epID("a")), drain.MaxAttempts)
	}
	for i, g := range got {
		if !bytes.Equal(g.body, n.Body()) || (i > 0 && !g.timestamp.After(got[i-1].timestamp)) {
			t.Errorf("attempt %d: body %s, timestamp %v; want the stored body and a later timestamp than the attempt before", i+1, g.body, g.timestamp)
		}
	}
	r.clock.Advance(48 * time.Hour)
	if res := r.run(t, r.d); res.Due != 0 || r.rcv.total() != drain.MaxAttempts {
		t.Errorf("a DEAD delivery was tried again: %+v", res)
	}
	if !slices.ContainsFunc(metrics.Alarms, func(a metrics.Alarm) bool { return a.Metric == metrics.NotificationsDead }) {
		t.Error("NotificationsDead has no alarm")
	}
}

// A failure that would repeat on every attempt (here a forbidden address: the instance metadata
// service) makes the delivery DEAD at once, counted, with nothing sent.
func TestDeliver_NonRetryableFailure_DeadAtOnce(t *testing.T) {
	r := newRig(t)
	r.endpointAt(t, endpoints.Endpoint{ID: epID("metadata"), URL: "https://169.254.169.254/latest/meta-data"}, secretA)
	n := r.notification(t, "acct_1", 800)

	if res := r.run(t, r.d); res.Dead != 1 {
		t.Fatalf("result %+v; want DEAD at once", res)
	}
	d := r.delivery(t, n, epID("metadata"))
	if d.Status != notify.DeliveryDead || d.Attempts != 1 || d.LastStatus != 0 || d.LastError == "" {
		t.Errorf("delivery %+v", d)
	}
	if r.metrics.Get(metrics.NotificationsDead) != 1 || r.metrics.Get(metrics.NotificationsRetried) != 0 {
		t.Errorf("metrics %v", r.metrics.Snapshot())
	}
	if r.rcv.total() != 0 {
		t.Errorf("%d requests reached the receiver", r.rcv.total())
	}
}

// The notifier dies after the endpoint accepted the attempt and before the delivery says
// DELIVERED: once the claim lapses another notifier sends it again, under the same webhook-id,
// so a receiver that dedupes sees one message.
func TestDeliver_CrashAfterSendBeforeMark_ResentUnderTheSameWebhookID(t *testing.T) {
	r := newRig(t)
	r.endpoint(t, epID("a"), nil, nil, secretA)
	n := r.notification(t, "acct_1", 800)
	r.d.Hook = crashAt(drain.AfterSend)
	r.run(t, r.d)
	if d := r.delivery(t, n, epID("a")); d.Status != notify.DeliverySending || len(r.rcv.requests(epID("a"))) != 1 {
		t.Fatalf("after the crash: delivery %+v, %d requests", d, len(r.rcv.requests(epID("a"))))
	}

	other := r.drainer("notifier-two")
	r.clock.Advance(drain.ClaimFor - time.Second)
	if res := r.run(t, other); res.Delivered != 0 || len(r.rcv.requests(epID("a"))) != 1 {
		t.Fatalf("a live claim was taken over: %+v", res)
	}
	r.clock.Advance(time.Second)
	if res := r.run(t, other); res.Delivered != 1 {
		t.Fatalf("the lapsed claim was not taken over: %+v", res)
	}
	got := r.rcv.requests(epID("a"))
	if len(got) != 2 || r.rcv.distinctIDs(epID("a")) != 1 || got[1].id != n.ID() || !bytes.Equal(got[0].body, got[1].body) {
		t.Errorf("received %+v; want two requests of one id with one body", got)
	}
	if !got[1].timestamp.After(got[0].timestamp) {
		t.Errorf("the second attempt's timestamp %v is not its own (the first was %v)", got[1].timestamp, got[0].timestamp)
	}
	if d := r.delivery(t, n, epID("a")); d.Status != notify.DeliveryDelivered || d.Attempts != 2 {
		t.Errorf("delivery %+v", d)
	}
}

// Two notifiers read the same due delivery at once: only one claim is written, and the endpoint
// is sent the attempt once. (Without the revision condition both claims land and both send.)
func TestDeliver_TwoNotifiersRacing_OneSendPerAttempt(t *testing.T) {
	r := newRig(t)
	r.endpoint(t, epID("a"), nil, nil, secretA)
	n := r.notification(t, "acct_1", 800)
	if _, _, err := r.d.FanOut(context.Background(), drain.Ref{PK: notify.Partition(n.ID()), SK: notify.SKNotification}, r.endpoints(t)); err != nil {
		t.Fatal(err)
	}
	ref := drain.DeliveryRef(n.ID(), epID("a"))
	eps := r.byID(t)
	other := r.drainer("notifier-two")
	var otherOut drain.Outcome
	r.d.Hook = func(ctx context.Context, p drain.Point, _ drain.Ref) error {
		if p == drain.BeforeClaim && otherOut == "" {
			// The other notifier read the same delivery, and now claims and sends it first.
			out, err := other.Deliver(ctx, ref, eps)
			if err != nil {
				return err
			}
			otherOut = out
		}
		return nil
	}
	out, err := r.d.Deliver(context.Background(), ref, eps)
	if err != nil {
		t.Fatal(err)
	}
	if otherOut != drain.OutcomeDelivered || out != drain.OutcomeSkipped {
		t.Errorf("outcomes: other %s, this %s; want delivered and skipped", otherOut, out)
	}
	if got := len(r.rcv.requests(epID("a"))); got != 1 {
		t.Errorf("the endpoint was sent %d requests; want 1", got)
	}
	if d := r.delivery(t, n, epID("a")); d.Status != notify.DeliveryDelivered || d.Attempts != 1 {
		t.Errorf("delivery %+v", d)
	}
}

// During a rotation an endpoint has two secrets and each delivery carries a signature under
// both, so a receiver holding either verifies it; once the old secret expires, deliveries are
// signed with the new one alone.
func TestDeliver_SecretRotation_BothSecretsVerify(t *testing.T) {
	r := newRig(t)
	r.endpoint(t, epID("a"), nil, nil, secretB, secretOld) // the receiver checks both
	n := r.notification(t, "acct_1", 800)
	if res := r.run(t, r.d); res.Delivered != 1 {
		t.Fatalf("result %+v", res)
	}
	// After the old secret's expiry (an hour), a replay is signed with the new secret only.
	r.clock.Advance(time.Hour + time.Minute)
	r.rcv.hold(epID("a"), secretB)
	if _, err := r.store.Replay(context.Background(), epID("a"), n.ID(), r.clock.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if res := r.run(t, r.d); res.Delivered != 1 {
		t.Fatalf("after the expiry: %+v", res)
	}
	got := r.rcv.requests(epID("a"))
	if len(got) != 2 || got[0].signatures != 2 || got[1].signatures != 1 {
		t.Errorf("received %+v; want a delivery signed twice, then one signed once", got)
	}
}

// A replay sends a delivery again under the same webhook-id, with a fresh set of attempts: a
// DEAD one once its receiver is fixed, and a DELIVERED one as well. A delivery being sent under
// a live claim is refused, and one that does not exist is not found.
func TestReplay_SameWebhookIDDeliveredAgain_AttemptsReset(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.endpointAt(t, endpoints.Endpoint{ID: epID("a"), URL: r.rcv.url(epID("a"))}, secretA)
	r.rcv.answerWith(epID("a"), http.StatusGone)
	n := r.notification(t, "acct_1", 800)
	for range drain.MaxAttempts {
		r.run(t, r.d)
		r.clock.Advance(drain.BackoffCap + resources.NotifierEvery)
	}
	if d := r.delivery(t, n, epID("a")); d.Status != notify.DeliveryDead || d.Attempts != drain.MaxAttempts {
		t.Fatalf("delivery %+v; want DEAD", d)
	}

	r.rcv.answerWith(epID("a"), http.StatusOK)
	d, err := r.store.Replay(ctx, epID("a"), n.ID(), r.clock.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != notify.DeliveryPending || d.Attempts != 0 || d.Replays != 1 || d.NextAttemptAtMs != r.clock.Now().UnixMilli() {
		t.Errorf("replayed delivery %+v; want PENDING, due now, no attempts, one replay", d)
	}
	if res := r.run(t, r.d); res.Delivered != 1 {
		t.Fatalf("after the replay: %+v", res)
	}
	if d := r.delivery(t, n, epID("a")); d.Status != notify.DeliveryDelivered || d.Attempts != 1 || d.Replays != 1 {
		t.Errorf("delivery %+v", d)
	}

	// A DELIVERED delivery is replayed too: the endpoint is sent the same message again.
	if _, err := r.store.Replay(ctx, epID("a"), n.ID(), r.clock.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	r.run(t, r.d)
	if got := r.rcv.requests(epID("a")); len(got) != drain.MaxAttempts+2 || r.rcv.distinctIDs(epID("a")) != 1 {
		t.Errorf("received %d requests of %d ids; want %d of one", len(got), r.rcv.distinctIDs(epID("a")), drain.MaxAttempts+2)
	}
	if d := r.delivery(t, n, epID("a")); d.Status != notify.DeliveryDelivered || d.Replays != 2 {
		t.Errorf("delivery %+v", d)
	}

	// Under a live claim, a replay is refused.
	if _, err := r.store.Replay(ctx, epID("a"), n.ID(), r.clock.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	r.d.Hook = crashAt(drain.AfterClaim)
	r.run(t, r.d)
	if _, err := r.store.Replay(ctx, epID("a"), n.ID(), r.clock.Now().UnixMilli()); !errors.Is(err, drain.ErrInFlight) || !drain.IsInFlight(err) {
		t.Errorf("replay under a live claim: %v; want ErrInFlight", err)
	}
	r.clock.Advance(drain.ClaimFor)
	if _, err := r.store.Replay(ctx, epID("a"), n.ID(), r.clock.Now().UnixMilli()); err != nil {
		t.Errorf("replay after the claim lapsed: %v", err)
	}
	for _, c := range []struct{ endpoint, notification string }{
		{epID("none"), n.ID()}, {epID("a"), notify.IDOf("nothing")}, {"ep#a", n.ID()}, {epID("a"), "ntf_bad"},
	} {
		if _, err := r.store.Replay(ctx, c.endpoint, c.notification, r.clock.Now().UnixMilli()); !drain.IsNoDelivery(err) {
			t.Errorf("replay %s to %s: %v; want ErrNoDelivery", c.notification, c.endpoint, err)
		}
	}
}

// A delivery whose endpoint was removed or disabled after the fan-out is DEAD without an attempt,
// with the reason in its log, and raises no alarm: the operator did it.
func TestDeliver_EndpointRemovedOrDisabled_DeadWithoutAnAttempt(t *testing.T) {
	r := newRig(t)
	r.endpoint(t, epID("a"), nil, nil, secretA)
	n := r.notification(t, "acct_1", 800)
	if _, _, err := r.d.FanOut(context.Background(), drain.Ref{PK: notify.Partition(n.ID()), SK: notify.SKNotification}, r.endpoints(t)); err != nil {
		t.Fatal(err)
	}
	r.endpointAt(t, endpoints.Endpoint{ID: epID("a"), URL: r.rcv.url(epID("a")), Disabled: true}, secretA)
	if res := r.run(t, r.d); res.Dead != 1 {
		t.Fatalf("result %+v", res)
	}
	if d := r.delivery(t, n, epID("a")); d.Status != notify.DeliveryDead || d.Attempts != 0 || d.LastError != "its endpoint is disabled" {
		t.Errorf("delivery %+v", d)
	}
	if r.rcv.total() != 0 || r.metrics.Get(metrics.NotificationsDead) != 0 {
		t.Errorf("%d requests, metrics %v; want none", r.rcv.total(), r.metrics.Snapshot())
	}
}

// A run stops taking claims once its budget is spent; what it did not reach is due at the next
// run.
func TestRun_StopsClaimingWhenItsBudgetIsSpent(t *testing.T) {
	r := newRig(t)
	r.endpoint(t, epID("a"), nil, nil, secretA)
	r.notification(t, "acct_1", 700)
	r.notification(t, "acct_1", 800)
	r.d.Hook = func(_ context.Context, p drain.Point, _ drain.Ref) error {
		if p == drain.AfterSend {
			r.clock.Advance(drain.RunBudget) // the first attempt took the whole run
		}
		return nil
	}
	res := r.run(t, r.d)
	if res.Delivered != 1 || res.Deferred != 1 {
		t.Fatalf("result %+v; want one delivered, one left for the next run", res)
	}
	r.d.Hook = nil
	if res := r.run(t, r.d); res.Delivered != 1 {
		t.Fatalf("next run %+v", res)
	}
	if r.rcv.distinctIDs(epID("a")) != 2 || r.rcv.total() != 2 {
		t.Errorf("%d requests of %d ids; want 2 of 2", r.rcv.total(), r.rcv.distinctIDs(epID("a")))
	}
}

// An endpoint's delivery log lists the newest notification first, a page at a time; a cursor the
// log did not hand out is refused.
func TestLog_NewestFirst_PagedByCursor(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.endpoint(t, epID("a"), nil, nil, secretA)
	var ids []string
	for i := range 5 {
		ids = append(ids, r.notification(t, "acct_1", int64(100*(i+1))).ID())
		r.clock.Advance(time.Second)
	}
	if res := r.run(t, r.d); res.Delivered != 5 {
		t.Fatalf("result %+v", res)
	}
	var got []string
	cursor := ""
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatal("the log does not end")
		}
		ds, next, err := r.store.Log(ctx, epID("a"), cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Endpoint != epID("a") || d.Status != notify.DeliveryDelivered {
				t.Errorf("log entry %+v", d)
			}
			got = append(got, d.Notification)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	slices.Reverse(ids)
	if !slices.Equal(got, ids) {
		t.Errorf("log %v; want newest first %v", got, ids)
	}
	for _, bad := range []string{"not-a-cursor", "MTIzI250Zl94"} {
		if _, _, err := r.store.Log(ctx, epID("a"), bad, 2); err == nil {
			t.Errorf("cursor %q accepted", bad)
		}
	}
	if _, _, err := r.store.Log(ctx, epID("a"), "", drain.MaxPageSize+1); err == nil {
		t.Error("a page over MaxPageSize accepted")
	}
	if ds, next, err := r.store.Log(ctx, epID("nobody"), "", 0); err != nil || len(ds) != 0 || next != "" {
		t.Errorf("the log of an endpoint without deliveries: %v, %q, %v", ds, next, err)
	}

	ns, next, err := r.store.Notifications(ctx, "acct_1", "", 3)
	if err != nil || len(ns) != 3 || next == "" || ns[0].ID != ids[0] {
		t.Fatalf("notifications %+v, %q, %v", ns, next, err)
	}
	rest, next, err := r.store.Notifications(ctx, "acct_1", next, 3)
	if err != nil || len(rest) != 2 || next != "" || rest[1].ID != ids[4] {
		t.Errorf("second page %+v, %q, %v", rest, next, err)
	}
}

// endpoints lists the registered endpoints as a run reads them.
func (r *rig) endpoints(t *testing.T) []endpoints.Endpoint {
	t.Helper()
	eps, err := r.eps.All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

func (r *rig) byID(t *testing.T) map[string]endpoints.Endpoint {
	t.Helper()
	m := map[string]endpoints.Endpoint{}
	for _, ep := range r.endpoints(t) {
		m[ep.ID] = ep
	}
	return m
}
