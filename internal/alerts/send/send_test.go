package send

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Test secrets: fixed keys, so every run signs the same way.
var (
	secretNew   = "whsec_" + base64.StdEncoding.EncodeToString([]byte("ferry-test-key-new-0123456789abc"))
	secretOld   = "whsec_" + base64.StdEncoding.EncodeToString([]byte("ferry-test-key-old-0123456789abc"))
	secretOther = "whsec_" + base64.StdEncoding.EncodeToString([]byte("ferry-test-key-xxx-0123456789abc"))
)

var devPolicy = Policy{AllowLoopback: true}

// receiver is a platform's endpoint on 127.0.0.1 that records what reaches it.
type receiver struct {
	srv      *httptest.Server
	conns    atomic.Int64
	requests atomic.Int64

	mu     sync.Mutex
	header http.Header
	body   []byte
}

// newReceiver starts a receiver that answers with handle. With cert set it serves https with
// that certificate.
func newReceiver(t *testing.T, cert *tls.Certificate, handle http.HandlerFunc) *receiver {
	t.Helper()
	rcv := &receiver{}
	rcv.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rcv.requests.Add(1)
		body, _ := io.ReadAll(r.Body)
		rcv.mu.Lock()
		rcv.header, rcv.body = r.Header.Clone(), body
		rcv.mu.Unlock()
		handle(w, r)
	}))
	rcv.srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			rcv.conns.Add(1)
		}
	}
	if cert != nil {
		rcv.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		rcv.srv.StartTLS()
	} else {
		rcv.srv.Start()
	}
	t.Cleanup(rcv.srv.Close)
	return rcv
}

// port is the receiver's port on 127.0.0.1.
func (rcv *receiver) port() string {
	_, port, _ := net.SplitHostPort(rcv.srv.Listener.Addr().String())
	return port
}

// received returns the last request's headers and body.
func (rcv *receiver) received() (http.Header, []byte) {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return rcv.header, rcv.body
}

// assertUntouched fails the test if anything connected to the receiver.
func (rcv *receiver) assertUntouched(t *testing.T) {
	t.Helper()
	if n := rcv.conns.Load(); n != 0 {
		t.Errorf("receiver accepted %d connections, want none", n)
	}
	if n := rcv.requests.Load(); n != 0 {
		t.Errorf("receiver got %d requests, want none", n)
	}
}

func answer(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }
}

// localhostCert makes a self-signed certificate for localhost, 127.0.0.1 and ::1, and a pool that
// trusts it.
func localhostCert(t *testing.T) (*tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// testMessage is a notification dated now, so the library's Verify (which checks the timestamp
// against the clock, five minutes either way) accepts it.
func testMessage() Message {
	return Message{
		ID:        "msg_2pXsZ6Yk9vLq",
		Timestamp: time.Now().Truncate(time.Second),
		Body:      []byte(`{"type":"usage.threshold","account":"acct_42","feature":"events","percent":80}`),
	}
}

func verify(t *testing.T, secret string, header http.Header, body []byte) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return wh.Verify(body, header)
}

func TestSend_LoopbackAllowed_DeliversSignedMessage(t *testing.T) {
	rcv := newReceiver(t, nil, answer(http.StatusNoContent))
	msg := testMessage()

	out := New(Config{Policy: devPolicy}).Send(context.Background(),
		Endpoint{URL: rcv.srv.URL + "/hooks/ferry?team=7", Secrets: []string{secretNew}}, msg)

	if !out.Delivered || out.Retryable || out.Err != nil || out.Status != http.StatusNoContent {
		t.Fatalf("outcome = %+v, want delivered with 204", out)
	}
	header, body := rcv.received()
	if err := verify(t, secretNew, header, body); err != nil {
		t.Errorf("receiver cannot verify the delivery: %v", err)
	}
	if err := verify(t, secretOther, header, body); err == nil {
		t.Errorf("a receiver with another secret verified the delivery")
	}
	for name, want := range map[string]string{
		"webhook-id":        msg.ID,
		"webhook-timestamp": strconv.FormatInt(msg.Timestamp.Unix(), 10),
		"Content-Type":      "application/json",
		"User-Agent":        "Ferry-Webhooks/1",
	} {
		if got := header.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	if !bytes.Equal(body, msg.Body) {
		t.Errorf("body = %s, want %s", body, msg.Body)
	}
}

func TestSend_SameMessageTwice_SameHeaders(t *testing.T) {
	rcv := newReceiver(t, nil, answer(http.StatusOK))
	s := New(Config{Policy: devPolicy})
	ep := Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew}}
	msg := testMessage()

	s.Send(context.Background(), ep, msg)
	first, _ := rcv.received()
	s.Send(context.Background(), ep, msg)
	second, _ := rcv.received()

	for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		if first.Get(name) == "" || first.Get(name) != second.Get(name) {
			t.Errorf("header %s: first %q, retry %q; want the same, non-empty", name, first.Get(name), second.Get(name))
		}
	}
}

func TestSend_RotationWithTwoSecrets_EitherVerifies(t *testing.T) {
	rcv := newReceiver(t, nil, answer(http.StatusOK))

	out := New(Config{Policy: devPolicy}).Send(context.Background(),
		Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew, secretOld}}, testMessage())

	if !out.Delivered {
		t.Fatalf("outcome = %+v, want delivered", out)
	}
	header, body := rcv.received()
	if entries := strings.Fields(header.Get("webhook-signature")); len(entries) != 2 {
		t.Errorf("signature header has %d entries, want one per secret: %q", len(entries), entries)
	}
	for name, secret := range map[string]string{"new": secretNew, "old": secretOld} {
		if err := verify(t, secret, header, body); err != nil {
			t.Errorf("receiver with the %s secret cannot verify: %v", name, err)
		}
	}
	if err := verify(t, secretOther, header, body); err == nil {
		t.Errorf("a receiver with an unrelated secret verified the delivery")
	}
}

// With the production policy, a receiver on 127.0.0.1 gets nothing, whether the URL names it by
// address or by name; the same URLs deliver under `ferry dev`'s policy, so the refusal is the
// policy's and not a TLS or connection failure.
func TestSend_LoopbackOutsideDev_RefusedNothingReachesReceiver(t *testing.T) {
	cert, roots := localhostCert(t)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		t.Run(host, func(t *testing.T) {
			rcv := newReceiver(t, cert, answer(http.StatusOK))
			ep := Endpoint{URL: "https://" + net.JoinHostPort(host, rcv.port()) + "/hook", Secrets: []string{secretNew}}

			out := New(Config{rootCAs: roots}).Send(context.Background(), ep, testMessage())

			if out.Delivered || out.Retryable || out.Status != 0 {
				t.Errorf("outcome = %+v, want refused, not retryable", out)
			}
			if !errors.Is(out.Err, ErrInvalidURL) && !errors.Is(out.Err, ErrForbiddenAddress) {
				t.Errorf("err = %v, want ErrInvalidURL or ErrForbiddenAddress", out.Err)
			}
			rcv.assertUntouched(t)

			out = New(Config{Policy: devPolicy, rootCAs: roots}).Send(context.Background(), ep, testMessage())
			if !out.Delivered {
				t.Errorf("under the dev policy: outcome = %+v, want delivered", out)
			}
		})
	}
}

// The dialer is the check that holds when a name resolves to a forbidden address (DNS
// rebinding). Send's URL check would stop "localhost" by its spelling first, so this drives the
// Sender's own transport, past that check, with a name the resolver maps to 127.0.0.1.
func TestSender_TransportRefusesNameResolvingToLoopback(t *testing.T) {
	cert, roots := localhostCert(t)
	rcv := newReceiver(t, cert, answer(http.StatusOK))
	url := "https://" + net.JoinHostPort("localhost", rcv.port()) + "/hook"

	roundTrip := func(s *Sender) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		return s.client.Transport.RoundTrip(req)
	}

	resp, err := roundTrip(New(Config{rootCAs: roots}))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("round trip to %s succeeded, want refused at connect", url)
	}
	if !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("err = %v, want ErrForbiddenAddress", err)
	}
	if retryable(0, err) {
		t.Errorf("retryable(%v) = true, want false", err)
	}
	rcv.assertUntouched(t)

	resp, err = roundTrip(New(Config{Policy: devPolicy, rootCAs: roots}))
	if err != nil {
		t.Fatalf("under the dev policy: %v", err)
	}
	resp.Body.Close()
}

func TestSend_ForbiddenIPLiteral_RefusedWithoutConnecting(t *testing.T) {
	cert, roots := localhostCert(t)
	rcv := newReceiver(t, cert, answer(http.StatusOK))
	s := New(Config{rootCAs: roots})
	port := rcv.port()

	for _, host := range []string{"169.254.169.254", "10.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "100.64.0.1", "[::ffff:169.254.169.254]", "0.0.0.0"} {
		t.Run(host, func(t *testing.T) {
			out := s.Send(context.Background(), Endpoint{URL: "https://" + host + ":" + port + "/hook", Secrets: []string{secretNew}}, testMessage())

			if out.Delivered || out.Retryable || out.Status != 0 {
				t.Errorf("outcome = %+v, want refused, not retryable", out)
			}
			if !errors.Is(out.Err, ErrInvalidURL) {
				t.Errorf("err = %v, want ErrInvalidURL", out.Err)
			}
		})
	}
	rcv.assertUntouched(t)
}

func TestSend_Redirect_NotFollowed(t *testing.T) {
	target := newReceiver(t, nil, answer(http.StatusOK))
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			redirector := newReceiver(t, nil, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.srv.URL+"/hook", status)
			})

			out := New(Config{Policy: devPolicy}).Send(context.Background(),
				Endpoint{URL: redirector.srv.URL, Secrets: []string{secretNew}}, testMessage())

			if out.Delivered || out.Status != status || !errors.Is(out.Err, ErrStatus) {
				t.Errorf("outcome = %+v, want not delivered, status %d, ErrStatus", out, status)
			}
			if redirector.requests.Load() != 1 {
				t.Errorf("redirector got %d requests, want 1", redirector.requests.Load())
			}
		})
	}
	target.assertUntouched(t)
}

func TestSend_LargeAnswer_CutToBound(t *testing.T) {
	cases := []struct {
		name    string
		size    int
		wantLen int
		wantCut bool
	}{
		{"small", 17, 17, false},
		{"exactly the bound", MaxAnswerBytes, MaxAnswerBytes, false},
		{"one byte over", MaxAnswerBytes + 1, MaxAnswerBytes, true},
		{"far over", 1 << 20, MaxAnswerBytes, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rcv := newReceiver(t, nil, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusOK)
				w.Write(bytes.Repeat([]byte("a"), c.size))
			})

			out := New(Config{Policy: devPolicy}).Send(context.Background(),
				Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew}}, testMessage())

			if !out.Delivered {
				t.Fatalf("outcome = %+v, want delivered", out)
			}
			if len(out.Answer) != c.wantLen || out.AnswerCut != c.wantCut {
				t.Errorf("kept %d bytes, cut=%v; want %d, cut=%v", len(out.Answer), out.AnswerCut, c.wantLen, c.wantCut)
			}
		})
	}
}

// countingReader is an answer body that counts the bytes taken from it.
type countingReader struct {
	r    io.Reader
	read int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

func TestKeepAnswer_ReadsNoFurtherThanTheBound(t *testing.T) {
	body := &countingReader{r: bytes.NewReader(bytes.Repeat([]byte("a"), 1<<20))}

	answer, cut := keepAnswer(body)

	if len(answer) != MaxAnswerBytes || !cut {
		t.Errorf("kept %d bytes, cut=%v; want %d, cut", len(answer), cut, MaxAnswerBytes)
	}
	if body.read > MaxAnswerBytes+1 {
		t.Errorf("read %d bytes of the answer, want at most %d", body.read, MaxAnswerBytes+1)
	}
}

func TestSend_ReceiverTooSlow_TimesOutRetryable(t *testing.T) {
	release := make(chan struct{})
	rcv := newReceiver(t, nil, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server's Close, which waits for handlers

	out := New(Config{Policy: devPolicy, Timeout: 200 * time.Millisecond}).Send(context.Background(),
		Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew}}, testMessage())

	if out.Delivered || !out.Retryable || out.Status != 0 {
		t.Errorf("outcome = %+v, want not delivered, retryable, no status", out)
	}
	if !errors.Is(out.Err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want a deadline", out.Err)
	}
}

func TestSend_ConnectionRefused_Retryable(t *testing.T) {
	rcv := newReceiver(t, nil, answer(http.StatusOK))
	url := rcv.srv.URL
	rcv.srv.Close() // nothing listens on the port any more

	out := New(Config{Policy: devPolicy}).Send(context.Background(), Endpoint{URL: url, Secrets: []string{secretNew}}, testMessage())

	if out.Delivered || !out.Retryable || out.Err == nil {
		t.Errorf("outcome = %+v, want not delivered, retryable", out)
	}
}

func TestSend_StatusClassification(t *testing.T) {
	cases := []struct {
		status               int
		delivered, retryable bool
	}{
		{http.StatusOK, true, false},
		{http.StatusAccepted, true, false},
		{http.StatusNoContent, true, false},
		{http.StatusInternalServerError, false, true},
		{http.StatusBadGateway, false, true},
		{http.StatusServiceUnavailable, false, true},
		{http.StatusTooManyRequests, false, true},
		{http.StatusRequestTimeout, false, true},
		// Ferry's choice: every answer but 2xx is retryable (see the package comment).
		{http.StatusBadRequest, false, true},
		{http.StatusUnauthorized, false, true},
		{http.StatusNotFound, false, true},
		{http.StatusGone, false, true},
	}
	rcv := newReceiver(t, nil, func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(status)
		fmt.Fprintf(w, "answered %d", status)
	})
	s := New(Config{Policy: devPolicy})
	for _, c := range cases {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			out := s.Send(context.Background(),
				Endpoint{URL: rcv.srv.URL + "/hook?status=" + strconv.Itoa(c.status), Secrets: []string{secretNew}}, testMessage())

			if out.Status != c.status || out.Delivered != c.delivered || out.Retryable != c.retryable {
				t.Errorf("outcome = %+v, want status %d, delivered=%v, retryable=%v", out, c.status, c.delivered, c.retryable)
			}
			if c.delivered != (out.Err == nil) {
				t.Errorf("err = %v with delivered=%v", out.Err, c.delivered)
			}
			if !c.delivered && !errors.Is(out.Err, ErrStatus) {
				t.Errorf("err = %v, want ErrStatus", out.Err)
			}
			if want := fmt.Sprintf("answered %d", c.status); string(out.Answer) != want && c.status != http.StatusNoContent {
				t.Errorf("answer = %q, want %q", out.Answer, want)
			}
		})
	}
}

// The error names the endpoint by host only: a URL's path and query can hold a token.
func TestSend_ErrorOmitsPathAndQuery(t *testing.T) {
	rcv := newReceiver(t, nil, answer(http.StatusInternalServerError))

	out := New(Config{Policy: devPolicy}).Send(context.Background(),
		Endpoint{URL: rcv.srv.URL + "/hooks/tok_secretpath?key=tok_secretquery", Secrets: []string{secretNew}}, testMessage())

	if out.Err == nil || strings.Contains(out.Err.Error(), "tok_secret") {
		t.Errorf("err = %v, want an error that names the host only", out.Err)
	}
}

func TestSend_InvalidInput_NotRetryableNothingSent(t *testing.T) {
	rcv := newReceiver(t, nil, answer(http.StatusOK))
	s := New(Config{Policy: devPolicy})
	ok := testMessage()
	cases := []struct {
		name string
		ep   Endpoint
		msg  Message
		want error
	}{
		{"no secret", Endpoint{URL: rcv.srv.URL}, ok, ErrInvalidSecret},
		{"three secrets", Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew, secretOld, secretOther}}, ok, ErrInvalidSecret},
		{"secret without prefix", Endpoint{URL: rcv.srv.URL, Secrets: []string{strings.TrimPrefix(secretNew, "whsec_")}}, ok, ErrInvalidSecret},
		{"secret not base64", Endpoint{URL: rcv.srv.URL, Secrets: []string{"whsec_not*base64"}}, ok, ErrInvalidSecret},
		{"empty secret", Endpoint{URL: rcv.srv.URL, Secrets: []string{"whsec_"}}, ok, ErrInvalidSecret},
		{"bad old secret", Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew, "whsec_!"}}, ok, ErrInvalidSecret},
		{"no id", Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew}}, Message{Timestamp: ok.Timestamp, Body: ok.Body}, ErrInvalidMessage},
		{"id with a newline", Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew}}, Message{ID: "msg_1\r\nX-Evil: 1", Timestamp: ok.Timestamp, Body: ok.Body}, ErrInvalidMessage},
		{"id too long", Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew}}, Message{ID: strings.Repeat("m", MaxIDBytes+1), Timestamp: ok.Timestamp, Body: ok.Body}, ErrInvalidMessage},
		{"no timestamp", Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew}}, Message{ID: ok.ID, Body: ok.Body}, ErrInvalidMessage},
		{"body not JSON", Endpoint{URL: rcv.srv.URL, Secrets: []string{secretNew}}, Message{ID: ok.ID, Timestamp: ok.Timestamp, Body: []byte("usage at 80%")}, ErrInvalidMessage},
		{"invalid URL", Endpoint{URL: "https://user@hooks.example.com/#x", Secrets: []string{secretNew}}, ok, ErrInvalidURL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := s.Send(context.Background(), c.ep, c.msg)
			if out.Delivered || out.Retryable || !errors.Is(out.Err, c.want) {
				t.Errorf("outcome = %+v, want not delivered, not retryable, %v", out, c.want)
			}
		})
	}
	rcv.assertUntouched(t)
}

func TestSender_NeverUsesEnvironmentProxy(t *testing.T) {
	transport := New(Config{}).client.Transport.(*http.Transport)
	if transport.Proxy != nil {
		t.Errorf("transport has a proxy function; want none")
	}
}

func TestRetryable_TransportErrors(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"deadline", fmt.Errorf("send: %w", context.DeadlineExceeded), true},
		{"cancelled", fmt.Errorf("send: %w", context.Canceled), true},
		{"refused connection", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{"forbidden address", &net.OpError{Op: "dial", Err: fmt.Errorf("%w: 10.0.0.1", ErrForbiddenAddress)}, false},
		{"invalid URL", fmt.Errorf("send: %w", ErrInvalidURL), false},
		{"invalid secret", fmt.Errorf("send: %w", ErrInvalidSecret), false},
		{"invalid message", fmt.Errorf("send: %w", ErrInvalidMessage), false},
	}
	for _, c := range cases {
		if got := retryable(0, c.err); got != c.want {
			t.Errorf("%s: retryable = %v, want %v", c.name, got, c.want)
		}
	}
	if retryable(http.StatusOK, nil) {
		t.Errorf("a delivered message is retryable")
	}
}

// The limits are part of the package's contract; changing one is a decision, not an edit.
func TestLimits(t *testing.T) {
	if DefaultTimeout != 10*time.Second || MaxAnswerBytes != 4096 || MaxAnswerHeaderBytes != 65536 ||
		MaxURLBytes != 2048 || MaxSecrets != 2 || MaxIDBytes != 256 || UserAgent != "Ferry-Webhooks/1" {
		t.Errorf("limits changed: timeout %v, answer %d, headers %d, URL %d, secrets %d, id %d, agent %q",
			DefaultTimeout, MaxAnswerBytes, MaxAnswerHeaderBytes, MaxURLBytes, MaxSecrets, MaxIDBytes, UserAgent)
	}
	if s := New(Config{}); s.timeout != DefaultTimeout {
		t.Errorf("zero Timeout gives %v, want DefaultTimeout", s.timeout)
	}
}
