package stripe_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/stripe"
)

// stripeMock starts stripe-mock (FERRY_STRIPE_MOCK, which make installs under _tools/bin), which
// checks every request against Stripe's OpenAPI description and answers from fixtures. It keeps
// no state, so it proves the requests' shape, not the meters' arithmetic (the stand-in's job).
func stripeMock(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("FERRY_STRIPE_MOCK")
	if bin == "" {
		t.Skip("FERRY_STRIPE_MOCK is not set (make test sets it to _tools/bin/stripe-mock)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("FERRY_STRIPE_MOCK=%s: %v (make tools installs it)", bin, err)
	}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Listening for HTTP at address: (\S+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(2 * time.Minute):
		// stripe-mock parses Stripe's whole OpenAPI description before it listens: seconds on
		// an idle machine, far longer on a loaded one. The bound only stops a hang.
		t.Fatal("stripe-mock did not start within 2 minutes")
	}
	return ""
}

// Every request Ferry's client sends is one Stripe's OpenAPI description accepts.
func TestClient_RequestsMatchStripesOpenAPI(t *testing.T) {
	base := stripeMock(t)
	c, err := stripe.New(stripe.Config{APIKey: "sk_test_ferry", APIBase: base})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	if err := c.Send(ctx, stripe.MeterEvent{
		Identifier: "acct_42:events:2026-10:8457", EventName: "ferry_events", Customer: "cus_1", Value: 2409, Timestamp: now,
	}); err != nil {
		t.Errorf("send: %v", err)
	}
	if err := c.Cancel(ctx, "ferry_events", "acct_42:events:2026-10:8457"); err != nil {
		t.Errorf("cancel: %v", err)
	}
	if _, err := c.Summary(ctx, "mtr_events", "cus_1", now.Add(-time.Hour), now); err != nil {
		t.Errorf("summary: %v", err)
	}

	// And stripe-mock does refuse what the description does not allow, so the above proves
	// something: a meter event without its payload.
	form := url.Values{"event_name": {"ferry_events"}, "identifier": {"x"}}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/billing/meter_events", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("sk_test_ferry", "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "payload") {
		t.Errorf("stripe-mock accepted a meter event without a payload: %d %s", resp.StatusCode, body)
	}
}
