package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/alerts/send"
)

var (
	listenSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("ferry-listen-test-key-0123456789"))
	otherSecret  = "whsec_" + base64.StdEncoding.EncodeToString([]byte("ferry-listen-other-key-012345678"))
)

// syncBuffer is a buffer the receiver writes from its handlers while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startListen runs ferry listen's receiver on a free loopback port until it has seen want
// distinct deliveries; the returned channel yields serve's error.
func startListen(t *testing.T, asJSON bool, want int) (url string, out, errOut *syncBuffer, served chan error) {
	t.Helper()
	out, errOut = &syncBuffer{}, &syncBuffer{}
	rcv, err := newWebhookReceiver([]string{listenSecret}, asJSON, want, out, errOut)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served = make(chan error, 1)
	go func() { served <- rcv.serve(ctx, ln) }()
	t.Cleanup(cancel)
	return "http://" + ln.Addr().String() + "/hooks", out, errOut, served
}

func deliverTo(t *testing.T, url, secret, id, body string) send.Outcome {
	t.Helper()
	return send.New(send.Config{Policy: send.Policy{AllowLoopback: true}}).Send(context.Background(),
		send.Endpoint{URL: url, Secrets: []string{secret}}, send.Message{ID: id, Timestamp: time.Now(), Body: []byte(body)})
}

const (
	bodyOne = `{"id":"ntf_one","type":"threshold.crossed","timestamp":"2026-11-20T09:00:00Z","data":{"account":"acct_1","feature":"events","cycle":"2026-11","threshold":800,"percent":80,"limit":1000,"used":812}}`
	bodyTwo = `{"id":"ntf_two","type":"limit.reached","timestamp":"2026-11-20T09:05:00Z","data":{"account":"acct_2","feature":"events","cycle":"2026-11","limit":1000,"used":1000}}`
)

// Deliveries signed by Ferry's sender verify and are answered 204, one line each; a retry of one
// is printed as a repeat and not counted again; a delivery signed with another secret is refused
// with 401 and not printed. With -count 2 the receiver stops after the second distinct one.
func TestListen_VerifiesPrintsAndCountsDistinctDeliveries(t *testing.T) {
	url, out, errOut, served := startListen(t, false, 2)
	for _, c := range []struct {
		secret, id, body string
		status           int
	}{
		{listenSecret, "ntf_one", bodyOne, http.StatusNoContent},
		{listenSecret, "ntf_one", bodyOne, http.StatusNoContent}, // a retry
		{otherSecret, "ntf_forged", bodyTwo, http.StatusUnauthorized},
		{listenSecret, "ntf_two", bodyTwo, http.StatusNoContent},
	} {
		if got := deliverTo(t, url, c.secret, c.id, c.body); got.Status != c.status {
			t.Fatalf("delivery %s: %d (%v); want %d", c.id, got.Status, got.Err, c.status)
		}
	}
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	want := []string{
		`ntf_one threshold.crossed account=acct_1 data={"account":"acct_1","feature":"events","cycle":"2026-11","threshold":800,"percent":80,"limit":1000,"used":812}`,
		`ntf_one threshold.crossed account=acct_1 data={"account":"acct_1","feature":"events","cycle":"2026-11","threshold":800,"percent":80,"limit":1000,"used":812} (repeat)`,
		`ntf_two limit.reached account=acct_2 data={"account":"acct_2","feature":"events","cycle":"2026-11","limit":1000,"used":1000}`,
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if e := errOut.String(); !strings.Contains(e, `refused "ntf_forged"`) || !strings.Contains(e, "2 distinct deliveries in 3 verified requests; 1 refused") {
		t.Errorf("stderr %q", e)
	}
}

// With -json each verified delivery is its body, one JSON document a line.
func TestListen_JSON_PrintsEachBodyOnALine(t *testing.T) {
	url, out, _, served := startListen(t, true, 1)
	if got := deliverTo(t, url, listenSecret, "ntf_one", bodyOne); got.Status != http.StatusNoContent {
		t.Fatalf("delivery: %d (%v)", got.Status, got.Err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	var m map[string]any
	if line := strings.TrimSpace(out.String()); strings.Contains(line, "\n") || json.Unmarshal([]byte(line), &m) != nil || m["id"] != "ntf_one" {
		t.Errorf("printed %q; want the body as one JSON line", out.String())
	}
}

// Without a usable secret ferry listen does not start.
func TestListen_RefusesToStartWithoutAUsableSecret(t *testing.T) {
	for name, args := range map[string][]string{
		"no secret":        {},
		"not whsec_":       {"-secret", "sk_live_123"},
		"not base64":       {"-secret", "whsec_***"},
		"three secrets":    {"-secret", listenSecret, "-secret", listenSecret, "-secret", listenSecret},
		"a negative count": {"-secret", listenSecret, "-count", "-1"},
	} {
		var stderr bytes.Buffer
		if err := runListen(context.Background(), append(args, "-addr", "127.0.0.1:0"), &bytes.Buffer{}, &stderr); err == nil {
			t.Errorf("%s: started", name)
		}
	}
}
