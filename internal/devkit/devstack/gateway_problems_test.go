package devstack_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// gatewayServer serves a gateway whose every function is h, behind the problem listener, as
// ferry dev serves it.
func gatewayServer(t *testing.T, h httpapi.LambdaHandler) *httptest.Server {
	t.Helper()
	handlers := map[string]httpapi.LambdaHandler{}
	for _, f := range resources.Functions {
		handlers[f.Name] = h
	}
	gw, err := devstack.NewGateway(resources.Routes, handlers, slogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(gw)
	srv.Listener = devstack.ProblemListener(srv.Listener)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// unreachable is a function the request must never reach.
func unreachable(t *testing.T) httpapi.LambdaHandler {
	return httpapi.NewLambdaHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the request reached the handler: %s %s %v", r.Method, r.URL, r.Header)
		w.WriteHeader(http.StatusTeapot)
	}))
}

// rawRequest writes a request as bytes (an HTTP client would refuse to send it) and reads the
// answer.
func rawRequest(t *testing.T, srv *httptest.Server, request string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// A control character in Idempotency-Key is refused by Go's HTTP server before any handler
// runs; the answer is a problem document, and the Lambda handler answers the same request
// (as API Gateway would hand it over) with the same document.
func TestGateway_AHeaderHTTPRefusesIsAProblem_TheSameFromTheLambdaHandler(t *testing.T) {
	srv := gatewayServer(t, unreachable(t))
	want := httpapi.RequestHeadProblem(http.StatusBadRequest).Document()
	for name, header := range map[string]string{
		"a control character in Idempotency-Key": "Idempotency-Key: a\x01b",
		"DEL in a value":                         "X-Note: a\x7fb",
		"an invalid header name":                 "Bad Name: x",
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := rawRequest(t, srv, "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"+header+"\r\nContent-Length: 2\r\n\r\n{}")
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != httpapi.ProblemContentType || !bytes.Equal(body, want) {
				t.Errorf("ferry dev answered %d %q %s; want 400 %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, want)
			}
			k, v, _ := strings.Cut(header, ": ")
			lambda, err := unreachable(t)(context.Background(), events.APIGatewayV2HTTPRequest{
				Version: "2.0", RawPath: "/v1/events", Headers: map[string]string{"authorization": "Bearer k", strings.ToLower(k): v},
				RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/v1/events"}},
				Body:           "{}",
			})
			if err != nil || lambda.StatusCode != resp.StatusCode || lambda.Headers["Content-Type"] != httpapi.ProblemContentType || lambda.Body != string(body) {
				t.Errorf("the Lambda handler answered %d %v %s (%v); want what ferry dev answered", lambda.StatusCode, lambda.Headers, lambda.Body, err)
			}
		})
	}
	// Headers over the server's limit are a 431 problem.
	resp, body := rawRequest(t, srv, "GET /v1/usage HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("x", 2<<20)+"\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("Content-Type") != httpapi.ProblemContentType || !bytes.Contains(body, []byte("invalid-header")) {
		t.Errorf("large headers: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// Everything else passes through the connection untouched, text/plain answers of handlers
// included.
func TestProblemListener_LeavesHandlersAnswersAlone(t *testing.T) {
	srv := gatewayServer(t, httpapi.NewLambdaHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, "400 Bad Request")
	})))
	resp, body := rawRequest(t, srv, "GET /v1/usage HTTP/1.1\r\nHost: x\r\nIdempotency-Key: fine\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest || string(body) != "400 Bad Request" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("a handler's answer was changed: %d %v %q", resp.StatusCode, resp.Header, body)
	}
}

// The gateway's own answers are problem documents: a path that is not clean (which
// http.ServeMux would redirect with an HTML body) and a body over the payload limit.
func TestGateway_ItsOwnAnswersAreProblems(t *testing.T) {
	srv := gatewayServer(t, unreachable(t))
	resp, body := rawRequest(t, srv, "GET //v1/usage HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != httpapi.ProblemContentType || !bytes.Contains(body, []byte("not-found")) {
		t.Errorf("unclean path: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	big := bytes.Repeat([]byte("x"), 10<<20+1)
	r, err := http.Post(srv.URL+"/v1/events", "application/json", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	data, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusRequestEntityTooLarge || r.Header.Get("Content-Type") != httpapi.ProblemContentType || !bytes.Contains(data, []byte("too-large")) {
		t.Errorf("over the payload limit: %d %v %s", r.StatusCode, r.Header, data)
	}
}

// Every read of ferry dev's servers is bounded: the head (as before), the whole request, and the
// wait for the next request on a kept-alive connection. Before, a client could send its headers
// and then hold the connection for as long as it liked by never finishing its body.
func TestNewServer_BoundsEveryRead(t *testing.T) {
	srv := devstack.NewServer(http.NotFoundHandler())
	if srv.ReadHeaderTimeout != 10*time.Second || srv.ReadTimeout != time.Minute || srv.IdleTimeout != 2*time.Minute {
		t.Errorf("head %s, request %s, idle %s; want 10s, 1m, 2m", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout)
	}
	if srv.ReadTimeout != devstack.RequestReadTimeout || srv.ReadHeaderTimeout != devstack.RequestHeaderTimeout || srv.IdleTimeout != devstack.IdleTimeout {
		t.Error("the server does not use the named bounds")
	}
}

// A client that sends its headers and part of its body, then stalls, is answered 408 (a problem
// document) once the request's read bound runs out, and its connection is closed; the function
// never runs. The bound is shortened here so that the test does not wait a minute.
func TestGateway_ABodyThatStalls_Is408_TheFunctionNeverRuns(t *testing.T) {
	handlers := map[string]httpapi.LambdaHandler{}
	for _, f := range resources.Functions {
		handlers[f.Name] = unreachable(t)
	}
	gw, err := devstack.NewGateway(resources.Routes, handlers, slogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	const bound = 300 * time.Millisecond
	srv := httptest.NewUnstartedServer(gw)
	srv.Config = devstack.NewServer(gw)
	srv.Config.ReadTimeout = bound
	srv.Listener = devstack.ProblemListener(srv.Listener)
	srv.Start()
	t.Cleanup(srv.Close)

	// The server's bound starts when it takes the connection, after the dial began: waiting at
	// least the bound is measured from there.
	start := time.Now()
	conn, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// The headers promise 1,000 bytes; 10 arrive, then nothing.
	if _, err := io.WriteString(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"specver"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != httpapi.ProblemContentType || !bytes.Contains(body, []byte("request-timeout")) {
		t.Errorf("answered %d %q %s; want a 408 request-timeout problem", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if waited := time.Since(start); waited < bound {
		t.Errorf("answered after %s, before the bound of %s ran out", waited, bound)
	}
	// The connection is closed: the rest of the body is never awaited.
	if n, err := conn.Read(make([]byte, 1)); err == nil {
		t.Errorf("the connection stayed open (read %d bytes)", n)
	}
}
