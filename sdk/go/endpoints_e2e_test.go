package ferry

// The notifications end to end (see e2e_test.go for how these tests find a stack): a receiver
// on 127.0.0.1 registered as a webhook endpoint, an account driven past its thresholds and its
// limit through the fault proxy, every delivery verified with the SDK's verifier, and the
// delivery log read and replayed through the SDK. ferry dev takes http://127.0.0.1 endpoints
// and runs the notifier every 2 s.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

const (
	// notificationWait bounds each wait for a delivery: the notifier runs every 2 s under ferry
	// dev, and a delivery is one POST to a receiver on loopback.
	notificationWait = 30 * time.Second
	// notificationQuiet is how long a test listens on after the deliveries it waited for, so that
	// one more (a duplicate notification, a second replay) would arrive: two notifier runs and a
	// little.
	notificationQuiet = 5 * time.Second
	// maxReceivedBytes bounds the body a receiver keeps (Ferry's messages are far smaller).
	maxReceivedBytes = 1 << 20
)

// receiver stands in for the platform: an HTTP server on 127.0.0.1 that keeps every delivery as
// it arrived (the raw body and the headers) and answers 204 at once, as a receiver should.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []received
}

// received is one delivery as it arrived.
type received struct {
	body   []byte
	header http.Header
	at     time.Time
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, maxReceivedBytes))
		if err != nil {
			http.Error(w, "unreadable", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, received{body: body, header: req.Header.Clone(), at: time.Now()})
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	// ferry dev takes http endpoints on loopback only: listen on 127.0.0.1 whatever the host
	// prefers.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.srv.Listener = l
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) url() string { return r.srv.URL + "/ferry/notifications" }

func (r *receiver) deliveries() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// byID counts the deliveries of each webhook-id.
func byID(ds []received) map[string]int {
	n := map[string]int{}
	for _, d := range ds {
		n[d.header.Get("webhook-id")]++
	}
	return n
}

// waitFor polls the deliveries until done holds or the wait ends, and says whether it held.
func (r *receiver) waitFor(wait time.Duration, done func([]received) bool) bool {
	deadline := time.Now().Add(wait)
	for {
		if done(r.deliveries()) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// verifyAll verifies every delivery with v and returns the messages by webhook-id. A delivery
// that does not verify, whose message is not its webhook-id's, that is of another account, or
// that repeats a webhook-id with other bytes (every attempt and replay sends the same) fails the
// test.
func verifyAll(t *testing.T, v *WebhookVerifier, ds []received, account string) map[string]*NotificationMessage {
	t.Helper()
	out := map[string]*NotificationMessage{}
	bodies := map[string][]byte{}
	for i, d := range ds {
		msg, err := v.VerifyMessage(d.body, d.header)
		if err != nil {
			t.Fatalf("delivery %d (%s) did not verify: %v\n%s", i, d.header.Get("webhook-id"), err, d.body)
		}
		if msg.Id != d.header.Get("webhook-id") || msg.Data.Account == nil || *msg.Data.Account != account {
			t.Fatalf("delivery %d: webhook-id %q carries message %s of account %v", i, d.header.Get("webhook-id"), msg.Id, msg.Data.Account)
		}
		if prev, ok := bodies[msg.Id]; ok && !bytes.Equal(prev, d.body) {
			t.Fatalf("webhook-id %s sent as %s, then as %s", msg.Id, prev, d.body)
		}
		bodies[msg.Id] = d.body
		out[msg.Id] = msg
	}
	return out
}

// ofKind picks the messages of a kind, by their data's threshold (0 for none).
func ofKind(msgs map[string]*NotificationMessage, kind NotificationKind) map[int]*NotificationMessage {
	out := map[int]*NotificationMessage{}
	for _, m := range msgs {
		if m.Type != kind {
			continue
		}
		at := 0
		if m.Data.Threshold != nil {
			at = *m.Data.Threshold
		}
		out[at] = m
	}
	return out
}

// sendThroughBatcher sends n events through a batcher of c and closes it.
func sendThroughBatcher(t *testing.T, c *Client, n, first int) {
	t.Helper()
	ctx := context.Background()
	b, err := c.NewBatcher(BatcherConfig{MaxAge: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := b.Add(ctx, CloudEvent{Source: "/sdk/go/notifications", Type: "api.call", Data: map[string]int{"n": first + i}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// deliveryLog reads the endpoint's whole delivery log through the SDK, a page of one delivery at
// a time so that the iterator follows its cursors.
func deliveryLog(t *testing.T, op *Client, endpoint string) map[string]WebhookDelivery {
	t.Helper()
	one := 1
	out := map[string]WebhookDelivery{}
	for d, err := range op.WebhookDeliveries(context.Background(), endpoint, ListWebhookDeliveriesParams{Limit: &one}) {
		if err != nil {
			t.Fatalf("the delivery log: %v", err)
		}
		out[d.Notification] = d
	}
	return out
}

// waitLog reads the delivery log until done holds or notificationWait ends, and returns the last
// read.
func waitLog(t *testing.T, op *Client, endpoint string, done func(map[string]WebhookDelivery) bool) map[string]WebhookDelivery {
	t.Helper()
	deadline := time.Now().Add(notificationWait)
	for {
		log := deliveryLog(t, op, endpoint)
		if done(log) || time.Now().After(deadline) {
			return log
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func TestE2E_Notifications_ThresholdsLimitReplay_EachOnceAndSigned(t *testing.T) {
	env := e2e(t)
	ctx := context.Background()
	retries := &retryCounter{}
	// The operator's calls go through the faults too: a registration, rotation or replay whose
	// answer is lost is sent again under its Idempotency-Key, and must land once.
	op, err := New(Config{BaseURL: env.proxy, APIKey: env.adminKey, Timeout: 3 * time.Second, MaxAttempts: 12, MaxWait: 10 * time.Second,
		Logger: slog.New(retries)})
	if err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t)
	account := newAccountID("sdk-go-alerts")

	// The endpoint first, for the account about to be made (an account need not exist yet).
	kinds, accounts, description := WebhookKinds{ThresholdCrossed, LimitReached}, WebhookAccounts{account}, "sdk go e2e"
	ep, err := op.CreateWebhookEndpoint(ctx, CreateWebhookEndpointRequest{Url: rcv.url(), Kinds: &kinds, Accounts: &accounts, Description: &description})
	if err != nil {
		t.Fatalf("register %s: %v", rcv.url(), err)
	}
	listed := 0
	for e, err := range op.WebhookEndpoints(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Id == ep.Id {
			listed++
		}
	}
	if listed != 1 || ep.Url != rcv.url() || len(ep.Secrets) != 1 {
		t.Fatalf("registered %+v, listed %d times", ep, listed)
	}
	v, err := NewWebhookVerifier(ep.Secret)
	if err != nil {
		t.Fatal(err)
	}

	client, direct := env.accountNamed(t, account, Limits{"events": limitOf(100)}, retries)
	acct, err := op.GetAccount(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	var levels []int
	for _, th := range acct.Alerts["events"] {
		p, err := th.AsThreshold0()
		if err != nil {
			t.Fatal(err)
		}
		levels = append(levels, p.Percent)
	}
	if fmt.Sprint(levels) != "[80 100]" {
		t.Fatalf("the free plan's events thresholds are %v%%, want [80 100]", levels)
	}

	// 85 events: the 80% threshold is crossed, once.
	start := time.Now()
	sendThroughBatcher(t, client, 85, 0)
	u := waitUsed(t, direct, "events", 85)
	if u.Used != 85 {
		t.Fatalf("usage %d after 85 events", u.Used)
	}
	if !rcv.waitFor(notificationWait, func(ds []received) bool { return len(ds) > 0 }) {
		t.Fatalf("no delivery within %s of usage reaching 85", notificationWait)
	}
	first := rcv.deliveries()[0].at.Sub(start)
	time.Sleep(notificationQuiet)
	msgs := verifyAll(t, v, rcv.deliveries(), account)
	crossed := ofKind(msgs, ThresholdCrossed)
	if len(msgs) != 1 || len(crossed) != 1 || crossed[80] == nil {
		t.Fatalf("after 85 events: %d distinct notifications (%d threshold.crossed), want one threshold.crossed at 80", len(msgs), len(crossed))
	}
	at80 := crossed[80]
	if d := at80.Data; intOf(d.Percent) != 80 || intOf(d.Limit) != 100 || intOf(d.Used) < 80 || strOf(d.Feature) != "events" {
		t.Fatalf("threshold.crossed at 80: %+v", d)
	}

	// A body changed by one byte does not verify.
	d0 := rcv.deliveries()[0]
	tampered := append([]byte(nil), d0.body...)
	tampered[len(tampered)-2] ^= 1
	if _, err := v.VerifyMessage(tampered, d0.header); err == nil {
		t.Fatal("a tampered body verified")
	}

	// 20 more: 15 fit and cross 100%, 5 are refused at the limit, which is told once.
	sendThroughBatcher(t, client, 20, 85)
	u = waitUsed(t, direct, "events", 100)
	if u.Used != 100 {
		t.Fatalf("usage %d after 105 events against a limit of 100", u.Used)
	}
	if !rcv.waitFor(notificationWait, func(ds []received) bool { return len(byID(ds)) >= 3 }) {
		t.Fatalf("%d distinct notifications within %s of usage reaching 100, want 3", len(byID(rcv.deliveries())), notificationWait)
	}
	time.Sleep(notificationQuiet)
	msgs = verifyAll(t, v, rcv.deliveries(), account)
	crossed, reached := ofKind(msgs, ThresholdCrossed), ofKind(msgs, LimitReached)
	if len(msgs) != 3 || len(crossed) != 2 || crossed[80] == nil || crossed[100] == nil || len(reached) != 1 || reached[0] == nil {
		t.Fatalf("after 105 events: %d distinct notifications, %d threshold.crossed %v, %d limit.reached; want 80 and 100 crossed and the limit reached",
			len(msgs), len(crossed), crossed, len(reached))
	}
	if crossed[80].Id != at80.Id || intOf(crossed[100].Data.Percent) != 100 || intOf(reached[0].Data.Limit) != 100 || intOf(reached[0].Data.Used) != 100 {
		t.Fatalf("messages: 80 %+v, 100 %+v, limit %+v", crossed[80].Data, crossed[100].Data, reached[0].Data)
	}
	beforeReplay := len(rcv.deliveries())

	// The delivery log, through the SDK: three deliveries, each DELIVERED.
	log := waitLog(t, op, ep.Id, func(l map[string]WebhookDelivery) bool {
		n := 0
		for _, d := range l {
			if d.Status == WebhookDeliveryStatusDELIVERED {
				n++
			}
		}
		return n == 3
	})
	for id, d := range log {
		if _, ok := msgs[id]; !ok || d.Status != WebhookDeliveryStatusDELIVERED || d.Account == nil || *d.Account != account || d.Endpoint != ep.Id {
			t.Fatalf("the log has %d deliveries; %s is %+v", len(log), id, d)
		}
	}
	if len(log) != 3 {
		t.Fatalf("the log has %d deliveries, want 3", len(log))
	}

	// Rotate, then replay the 80% notification: it comes again with the same webhook-id,
	// signed with both secrets during the overlap, and the receiver still has 3 distinct ids.
	rotated, err := op.RotateWebhookEndpointSecret(ctx, ep.Id)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Secret == ep.Secret || rotated.PreviousSecretExpiresAt == nil || len(rotated.Secrets) != 2 {
		t.Fatalf("rotated %+v", rotated)
	}
	replayAt := time.Now()
	if _, err := op.ReplayWebhookDelivery(ctx, ep.Id, at80.Id); err != nil {
		t.Fatal(err)
	}
	if !rcv.waitFor(notificationWait, func(ds []received) bool { return byID(ds)[at80.Id] >= 2 }) {
		t.Fatalf("the replay of %s did not arrive within %s", at80.Id, notificationWait)
	}
	all := rcv.deliveries()
	again := all[len(all)-1].at.Sub(replayAt)
	time.Sleep(notificationQuiet)
	all = rcv.deliveries()
	ids := byID(all)
	if len(ids) != 3 || ids[at80.Id] != 2 || len(all) != beforeReplay+1 {
		t.Fatalf("after one replay: deliveries by webhook-id %v (%d in all, %d before), want 3 ids and %s twice", ids, len(all), beforeReplay, at80.Id)
	}
	verifyAll(t, v, all, account)
	newer, err := NewWebhookVerifier(rotated.Secret)
	if err != nil {
		t.Fatal(err)
	}
	replay := all[len(all)-1]
	if msg, err := newer.VerifyMessage(replay.body, replay.header); err != nil || msg.Id != at80.Id {
		t.Fatalf("the replay under the new secret: %v", err)
	}
	log = waitLog(t, op, ep.Id, func(l map[string]WebhookDelivery) bool {
		return l[at80.Id].Replays == 1 && l[at80.Id].Status == WebhookDeliveryStatusDELIVERED
	})
	if d := log[at80.Id]; d.Replays != 1 || d.Status != WebhookDeliveryStatusDELIVERED || len(log) != 3 {
		t.Fatalf("after the replay the log says %+v (%d deliveries)", d, len(log))
	}

	// Change, then delete the endpoint: a read after is a NotFoundError.
	off := true
	changed, err := op.UpdateWebhookEndpoint(ctx, ep.Id, UpdateWebhookEndpointRequest{Disabled: &off})
	if err != nil || !changed.Disabled || len(changed.Secrets) != 2 {
		t.Fatalf("disable: %+v, %v", changed, err)
	}
	if err := op.DeleteWebhookEndpoint(ctx, ep.Id); err != nil {
		t.Fatal(err)
	}
	var nf *NotFoundError
	if _, err := op.GetWebhookEndpoint(ctx, ep.Id); !errors.As(err, &nf) {
		t.Fatalf("read after delete: %v", err)
	}

	fmt.Printf("go e2e notifications: 85 events -> threshold.crossed 80 (used %d) first delivery %s after the first Add; 20 more -> threshold.crossed 100 (used %d) and limit.reached (used %d); "+
		"%d deliveries verified, %d distinct webhook-ids, log 3 DELIVERED; replay of %s after a rotation arrived %s after the replay call began, verified under both secrets, replays=1; %d operator/client retries\n",
		intOf(at80.Data.Used), first.Round(time.Millisecond), intOf(crossed[100].Data.Used), intOf(reached[0].Data.Used), len(all), len(ids), at80.Id, again.Round(time.Millisecond), retries.n.Load())
}
