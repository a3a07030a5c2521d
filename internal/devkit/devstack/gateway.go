package devstack

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// maxGatewayBodyBytes is API Gateway's payload limit.
const maxGatewayBodyBytes = 10 << 20

// Bounds of ferry dev's HTTP servers (the gateway and the local stand-ins), so that no client
// holds a connection for as long as it likes.
const (
	// RequestHeaderTimeout bounds the arrival of a request's head.
	RequestHeaderTimeout = 10 * time.Second
	// RequestReadTimeout bounds the arrival of a whole request, head and body: a client that
	// sends its headers and then stalls the body is answered 408 when it runs out. A minute
	// takes the largest body any route reads (a 1 MiB batch) over a link of 140 kbit/s, and the
	// gateway's payload limit (10 MiB, API Gateway's) over 1.4 Mbit/s; locally, bodies arrive
	// over loopback in milliseconds.
	RequestReadTimeout = time.Minute
	// IdleTimeout bounds how long a kept-alive connection waits for its next request.
	IdleTimeout = 2 * time.Minute
)

// NewServer is ferry dev's HTTP server for h, with every read bounded: the head, the whole
// request, and the wait between requests on a kept-alive connection.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler: h, ReadHeaderTimeout: RequestHeaderTimeout, ReadTimeout: RequestReadTimeout, IdleTimeout: IdleTimeout,
	}
}

// Gateway plays API Gateway (HTTP API, payload format 2.0) in front of Lambda handlers: it routes
// each request by the route table to its function, hands the function the same
// APIGatewayV2HTTPRequest event AWS would, and writes the function's response event back. Paths
// no route declares go to resources.DefaultRouteFunction, like a $default route.
type Gateway struct {
	mux *http.ServeMux
	log *slog.Logger
}

// NewGateway builds a gateway for routes over handlers, keyed by function name.
func NewGateway(routes []resources.Route, handlers map[string]httpapi.LambdaHandler, log *slog.Logger) (*Gateway, error) {
	g := &Gateway{mux: http.NewServeMux(), log: log}
	for _, route := range routes {
		h, ok := handlers[route.Function]
		if !ok {
			return nil, fmt.Errorf("gateway: no handler for function %q (route %s)", route.Function, route.Key())
		}
		g.mux.Handle(route.Key(), g.invoke(route.Key(), pathParams(route.Path), h))
	}
	def, ok := handlers[resources.DefaultRouteFunction]
	if !ok {
		return nil, fmt.Errorf("gateway: no handler for the default function %q", resources.DefaultRouteFunction)
	}
	g.mux.Handle("/", g.invoke("$default", nil, def))
	return g, nil
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	RefuseUncleanPaths(g.mux).ServeHTTP(w, r)
}

// RefuseUncleanPaths answers a request whose path is not clean ("//v1/events", "/v1/./usage")
// with a 404 problem document. http.ServeMux would redirect it with an HTML body; no route of
// Ferry's has such a path, and every answer is a problem document.
func RefuseUncleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		clean := path.Clean(p)
		if strings.HasSuffix(p, "/") && clean != "/" {
			clean += "/"
		}
		if r.Method != http.MethodConnect && clean != p {
			writeProblem(w, httpapi.GatewayProblem(http.StatusNotFound))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// pathParams lists the {name} segments of a route path.
func pathParams(path string) []string {
	var names []string
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			names = append(names, strings.TrimSuffix(strings.TrimPrefix(seg, "{"), "}"))
		}
	}
	return names
}

func (g *Gateway) invoke(routeKey string, params []string, h httpapi.LambdaHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxGatewayBodyBytes+1))
		var netErr net.Error
		switch {
		case errors.As(err, &netErr) && netErr.Timeout():
			// The server's read bound (RequestReadTimeout) ran out while the body was still
			// arriving: a client that sent its headers and then stalled.
			writeProblem(w, httpapi.GatewayProblem(http.StatusRequestTimeout))
			return
		case err != nil:
			writeProblem(w, httpapi.GatewayProblem(http.StatusBadRequest))
			return
		case len(body) > maxGatewayBodyBytes:
			writeProblem(w, httpapi.GatewayProblem(http.StatusRequestEntityTooLarge))
			return
		}
		req := toEvent(r, routeKey, params, body)
		resp, err := h(r.Context(), req)
		if err != nil {
			// API Gateway answers a failed invocation with a 500 of its own; ferry dev's is a
			// problem document, as every answer of Ferry's is.
			g.log.Error("function failed", "route", routeKey, "err", err)
			writeProblem(w, httpapi.GatewayProblem(http.StatusInternalServerError))
			return
		}
		writeResponse(w, resp)
	})
}

// toEvent builds the payload v2 event API Gateway sends for r.
func toEvent(r *http.Request, routeKey string, params []string, body []byte) events.APIGatewayV2HTTPRequest {
	now := time.Now().UTC()
	headers := map[string]string{}
	for k, v := range r.Header {
		if strings.EqualFold(k, "Cookie") {
			continue
		}
		headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	var cookies []string
	for _, c := range r.Cookies() {
		cookies = append(cookies, c.String())
	}
	query := map[string]string{}
	for k, v := range r.URL.Query() {
		query[k] = strings.Join(v, ",")
	}
	var pathValues map[string]string
	for _, p := range params {
		if pathValues == nil {
			pathValues = map[string]string{}
		}
		pathValues[p] = r.PathValue(p)
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              routeKey,
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		PathParameters:        pathValues,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:   routeKey,
			AccountID:  "000000000000",
			Stage:      "$default",
			RequestID:  requestID(),
			APIID:      "local",
			DomainName: r.Host,
			Time:       now.Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:  now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.Path,
				Protocol:  r.Proto,
				SourceIP:  strings.Split(r.RemoteAddr, ":")[0],
				UserAgent: r.UserAgent(),
			},
		},
	}
	if len(body) > 0 {
		if utf8.Valid(body) {
			ev.Body = string(body)
		} else {
			ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		}
	}
	return ev
}

func writeResponse(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) {
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for _, c := range resp.Cookies {
		w.Header().Add("Set-Cookie", c)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if decoded, err := base64.StdEncoding.DecodeString(resp.Body); err == nil {
			body = decoded
		}
	}
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func requestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writeProblem answers with a problem document.
func writeProblem(w http.ResponseWriter, p *httpapi.Problem) {
	w.Header().Set("Content-Type", httpapi.ProblemContentType)
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.Document())
}

// ProblemListener wraps a listener so that the answers Go's HTTP server gives on its own are
// problem documents too. The server refuses a request whose head is not valid HTTP — a control
// character in a header value, such as an Idempotency-Key holding U+0001; an invalid header
// name; headers over its limit — before any handler runs, writing a plain-text answer straight
// to the connection, and http.Server has no hook to change it. The wrapped connection
// recognises exactly that answer and writes httpapi.RequestHeadProblem in its place; every other
// byte passes through untouched.
func ProblemListener(l net.Listener) net.Listener { return problemListener{l} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c}, nil
}

type problemConn struct{ net.Conn }

// serverRefusalHeaders follow the status line of every answer net/http's server writes on its
// own (server.go, conn.serve). An answer a handler writes never has them there: the server adds
// Date and a length or Transfer-Encoding, and writes header names in sorted order.
const serverRefusalHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *problemConn) Write(p []byte) (int, error) {
	status, ok := serverRefusal(p)
	if !ok {
		return c.Conn.Write(p)
	}
	doc := httpapi.RequestHeadProblem(status)
	body := doc.Document()
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		doc.Status, http.StatusText(doc.Status), httpapi.ProblemContentType, len(body))
	if _, err := c.Conn.Write(append([]byte(head), body...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// serverRefusal recognises a plain-text answer of net/http's server and returns its status.
func serverRefusal(p []byte) (int, bool) {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(p, []byte(proto)) || len(p) < len(proto)+3 {
		return 0, false
	}
	line := bytes.IndexByte(p, '\r')
	if line < 0 || !bytes.HasPrefix(p[line:], []byte(serverRefusalHeaders)) {
		return 0, false
	}
	status, err := strconv.Atoi(string(p[len(proto) : len(proto)+3]))
	if err != nil || status < 400 || status > 599 {
		return 0, false
	}
	return status, true
}
