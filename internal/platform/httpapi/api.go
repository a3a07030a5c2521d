// Package httpapi is Ferry's HTTP API: one route table (routes.go) whose rows the CDK app
// deploys, the local gateway routes and each function's Server serves, behind API Gateway (HTTP
// API, payload v2) in AWS and through the same Lambda event path in ferry dev. Errors are RFC
// 9457 problem documents, mapped from each kind of domain error in one table (problem.go); a 500
// never shows its cause.
package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/operator/session"
	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// MaxJSONBodyBytes bounds the JSON body of every route but the event routes, which have their own.
const MaxJSONBodyBytes = 64 << 10

// MaxSignedBodyBytes bounds the body a webhook signature is verified over: API Gateway's payload
// limit. The route's handler applies its own, smaller limit.
const MaxSignedBodyBytes = 10 << 20

// Middleware wraps the handler of one route. Capabilities (idempotency) add theirs. It runs after
// authentication, so PrincipalFrom always finds the caller.
type Middleware func(route resources.Route, next HandlerFunc) HandlerFunc

// Authenticator resolves an account's API key (accounts.Service does).
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (accounts.Account, error)
}

// SignatureVerifier authenticates a billing provider's webhook delivery to route by its signature
// over the body, and names the provider. Its errors should carry a problem kind
// (SignatureInvalid, Invalid, TooLarge, UnsupportedMediaType, Unavailable); any other is a 500.
type SignatureVerifier interface {
	Verify(ctx context.Context, route resources.Route, header http.Header, body []byte) (provider string, err error)
}

// Authentication is what a function's server checks callers against, by each route's Auth.
type Authentication struct {
	// OperatorKey authenticates Operator routes.
	OperatorKey string
	// Accounts authenticates Account routes.
	Accounts Authenticator
	// Signatures authenticates WebhookSignature routes.
	Signatures SignatureVerifier
	// Sessions authenticates the operator's console sessions on Operator and AccountOrOperator
	// routes, by the Cookie (session.Service does).
	Sessions SessionVerifier
	Cookie   session.Cookie
}

// SessionVerifier returns the live console session a token names (or session.ErrNoSession).
type SessionVerifier interface {
	Verify(ctx context.Context, token string) (session.Session, error)
}

// Server serves one function's share of a route table: each of its routes on the value its
// builder composed, behind authentication and the middleware, with errors answered as problems.
// Every other path of the table is known too, so that a wrong method gets a 405 listing the right
// ones (API Gateway hands such requests to the $default route).
type Server struct {
	// Keys are the idempotency keys of the server's mutating routes (nil when it has none).
	Keys *idempotency.Service

	function   string
	table      []resources.Route
	handlers   Handlers
	auth       Authentication
	log        *slog.Logger
	middleware []Middleware
}

// NewServer makes the server of function's routes in table, each served by its handler.
func NewServer(function string, table []resources.Route, handlers Handlers, auth Authentication, log *slog.Logger) *Server {
	return &Server{function: function, table: table, handlers: handlers, auth: auth, log: log}
}

// Use adds middleware around every route handler, inside authentication. Middleware added first
// runs first.
func (s *Server) Use(m Middleware) { s.middleware = append(s.middleware, m) }

// Function names the function the server serves.
func (s *Server) Function() string { return s.function }

// Routes returns the routes the server serves, in table order.
func (s *Server) Routes() []resources.Route { return resources.RoutesOf(s.table, s.function) }

// Handler builds the server's http.Handler. It fails — at build time, never in a request — when
// a route of the function has no handler, a handler names no route of the function, or the server
// lacks what a route's Auth needs. Requests for paths no route serves get a 404 problem; a known path with another method
// gets a 405 problem.
func (s *Server) Handler() (http.Handler, error) {
	byPath := map[string]map[string]HandlerFunc{}
	allowed := map[string][]string{}
	var errs []error
	for _, route := range s.table {
		allowed[route.Path] = append(allowed[route.Path], route.Method)
		if byPath[route.Path] == nil {
			byPath[route.Path] = map[string]HandlerFunc{}
		}
		if route.Function != s.function {
			continue
		}
		h, ok := s.handlers[route.Key()]
		if !ok {
			errs = append(errs, fmt.Errorf("route %s has no handler in function %s", route.Key(), s.function))
			continue
		}
		if err := s.auth.covers(route); err != nil {
			errs = append(errs, fmt.Errorf("function %s: %w", s.function, err))
			continue
		}
		// Middleware runs inside authentication: it sees only authenticated requests and can
		// scope what it stores by the caller (PrincipalFrom), and an unauthenticated request
		// never reaches it or anything it stores.
		for i := len(s.middleware) - 1; i >= 0; i-- {
			h = s.middleware[i](route, h)
		}
		byPath[route.Path][route.Method] = s.authenticate(route, h)
	}
	for key := range s.handlers {
		if !s.serves(key) {
			errs = append(errs, fmt.Errorf("function %s has a handler for %s, which is no route of its own", s.function, key))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	for path, methods := range byPath {
		mux.Handle(path, s.dispatch(methods, allowed[path]))
	}
	mux.Handle("/", s.serve(func(w http.ResponseWriter, r *http.Request) error {
		return NotFound(fmt.Sprintf("No route %s %s.", r.Method, r.URL.Path))
	}))
	return mux, nil
}

// serves reports whether key names one of the server's own routes.
func (s *Server) serves(key string) bool {
	for _, r := range s.Routes() {
		if r.Key() == key {
			return true
		}
	}
	return false
}

func (s *Server) dispatch(methods map[string]HandlerFunc, allowed []string) http.Handler {
	allowed = append([]string(nil), allowed...)
	sort.Strings(allowed)
	return s.serve(func(w http.ResponseWriter, r *http.Request) error {
		h, ok := methods[r.Method]
		if !ok {
			return Failure(problem.MethodNotAllowed, fmt.Sprintf("%s is not allowed on %s.", r.Method, r.URL.Path)).
				Header("Allow", strings.Join(allowed, ", "))
		}
		if err := checkContentEncoding(r); err != nil {
			return err
		}
		return h(w, r)
	})
}

// serve turns a HandlerFunc into an http.Handler that answers errors as problems.
func (s *Server) serve(h HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeProblem(w, r, s.log, err)
		}
	})
}

// maxCodingBytes bounds how much of a client's content coding a refusal repeats.
const maxCodingBytes = 32

// checkContentEncoding refuses a body in a content coding (gzip, br, deflate…): Ferry reads
// bodies as sent and decodes none, so a coded body would be read as if it were plain bytes — or
// its signature checked over bytes the provider never meant as the payload. It is answered 415
// with Accept-Encoding: identity, the codings that are taken (RFC 9110 §15.5.16, RFC 7694 §3),
// before anything reads the body: authentication by signature, the Idempotency-Key's claim, the
// route. Neither Kinde nor Stripe codes the deliveries it sends.
func checkContentEncoding(r *http.Request) error {
	for _, value := range r.Header.Values("Content-Encoding") {
		for _, coding := range strings.Split(value, ",") {
			coding = strings.TrimSpace(coding)
			if coding == "" || strings.EqualFold(coding, "identity") {
				continue
			}
			if len(coding) > maxCodingBytes {
				coding = coding[:maxCodingBytes] + "…"
			}
			return Failure(problem.UnsupportedMediaType, fmt.Sprintf("The body is sent in the content coding %q; Ferry reads bodies as sent (identity) and decodes none. Send it uncoded; nothing was done.", coding)).
				Header("Accept-Encoding", "identity")
		}
	}
	return nil
}

// covers reports what the authentication lacks to serve route.
func (a Authentication) covers(route resources.Route) error {
	switch route.Auth {
	case resources.Operator:
		if a.OperatorKey == "" {
			return fmt.Errorf("route %s needs the operator key, and the function has none", route.Key())
		}
	case resources.Account:
		if a.Accounts == nil {
			return fmt.Errorf("route %s authenticates account keys, and the function has no accounts", route.Key())
		}
	case resources.WebhookSignature:
		if a.Signatures == nil {
			return fmt.Errorf("route %s verifies webhook signatures, and the function has no verifier", route.Key())
		}
	case resources.AccountOrOperator:
		if a.OperatorKey == "" || a.Accounts == nil {
			return fmt.Errorf("route %s takes the operator key or account keys, and the function lacks one of them", route.Key())
		}
	case resources.OperatorSignIn:
		if a.OperatorKey == "" {
			return fmt.Errorf("route %s needs the operator key, and the function has none", route.Key())
		}
	case resources.Public:
		if route.Mutating() {
			return fmt.Errorf("route %s is public and changes state; a public route only serves what carries no data", route.Key())
		}
	default:
		return fmt.Errorf("route %s has no Auth", route.Key())
	}
	return nil
}

// principalKey carries the authenticated caller in the request context.
type principalKey struct{}

// Principal is the authenticated caller.
type Principal struct {
	Operator bool
	Account  accounts.Account
	// Provider names the billing provider whose signed delivery this is (WebhookSignature).
	Provider string
	// Session is the console session the operator called through; nil for a bearer key.
	Session *session.Session
	// SessionToken is the session's token, from its cookie (signing out ends it).
	SessionToken string
}

// PrincipalFrom returns the caller of an authenticated request.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Scope names the caller for scoping stored state ("operator", "account:<id>", "webhook:<provider>").
func (p Principal) Scope() string {
	switch {
	case p.Operator:
		return "operator"
	case p.Provider != "":
		return "webhook:" + p.Provider
	}
	return "account:" + p.Account.ID
}

// authenticate checks the caller the route's Auth asks for.
func (s *Server) authenticate(route resources.Route, next HandlerFunc) HandlerFunc {
	auth := route.Auth
	if auth == resources.Public {
		return func(w http.ResponseWriter, r *http.Request) error {
			return next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, Principal{})))
		}
	}
	if auth == resources.WebhookSignature {
		return func(w http.ResponseWriter, r *http.Request) error {
			body, err := ReadBody(r, MaxSignedBodyBytes)
			if err != nil {
				return err
			}
			provider, err := s.auth.Signatures.Verify(r.Context(), route, r.Header, body)
			if err != nil {
				return err
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			return next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, Principal{Provider: provider})))
		}
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		key, ok := bearer(r)
		if !ok && auth.TakesSession() && s.auth.Sessions != nil {
			if token, ok := s.auth.Cookie.Token(r); ok {
				p, err := s.sessionPrincipal(r, token)
				if err != nil {
					return err
				}
				return next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
			}
		}
		if !ok {
			return Unauthorized("Send the API key as Authorization: Bearer <key>.")
		}
		var p Principal
		switch {
		case auth == resources.Operator || auth == resources.OperatorSignIn || (auth == resources.AccountOrOperator && s.isOperatorKey(key)):
			if !s.isOperatorKey(key) {
				return Unauthorized("This route needs the operator key.")
			}
			p.Operator = true
		default:
			acct, err := s.auth.Accounts.Authenticate(r.Context(), key)
			if err != nil {
				return err
			}
			p.Account = acct
		}
		return next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

// sessionPrincipal authenticates a request by its console session: the operator, as long as the
// session lives. A request that may change something must also come from the console's own
// origin and carry the session's CSRF token: the SameSite=Strict cookie already keeps other
// sites' pages from sending it, and the token is a second lock that does not depend on the
// browser getting SameSite right.
func (s *Server) sessionPrincipal(r *http.Request, token string) (Principal, error) {
	sess, err := s.auth.Sessions.Verify(r.Context(), token)
	if err != nil {
		return Principal{}, err
	}
	if !safeMethod(r.Method) {
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
			return Principal{}, Failure(problem.Forbidden, "A console request that changes something must come from the console's own page; this one came from "+site+".")
		}
		if !sess.CSRFMatches(r.Header.Get(session.HeaderCSRF)) {
			return Principal{}, Failure(problem.Forbidden, "A console request that changes something must carry the session's "+session.HeaderCSRF+" header; this one did not carry the right one. Nothing was done.")
		}
	}
	return Principal{Operator: true, Session: &sess, SessionToken: token}, nil
}

// safeMethod reports whether an HTTP method only reads (RFC 9110 §9.2.1).
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// isOperatorKey compares in constant time; a function without the operator key matches nothing.
// It compares the keys' SHA-256 digests: ConstantTimeCompare returns at once for inputs of
// different lengths, and equal-length digests leave nothing, not even the key's length, to time.
func (s *Server) isOperatorKey(key string) bool {
	if s.auth.OperatorKey == "" {
		return false
	}
	got, want := sha256.Sum256([]byte(key)), sha256.Sum256([]byte(s.auth.OperatorKey))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	key := strings.TrimSpace(h[len(prefix):])
	return key, key != ""
}

// ReadBody reads at most limit bytes; a longer body is a 413.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, BadRequest("The request body could not be read.")
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("%w: the body is over %d bytes", ingest.ErrTooLarge, limit)
	}
	return body, nil
}

// DecodeJSON reads a JSON object body with Ferry's one strict decoder (package jsonbody): a body
// declared as JSON (or not declared), exact field names, no duplicate members, no unknown fields,
// required fields present and not null, no empty strings, integers where the contract says
// integer and none above 2^53−1, valid UTF-8. A body declared as something else is a 415 (the
// check lives here, where every JSON body is read, so no route can miss it); a refused body is a
// 400 that names the field.
func DecodeJSON(r *http.Request, into any) error {
	if err := CheckJSON(r); err != nil {
		return err
	}
	body, err := ReadBody(r, MaxJSONBodyBytes)
	if err != nil {
		return err
	}
	if err := jsonbody.Decode(body, into); err != nil {
		return BadRequest(err.Error())
	}
	return nil
}

// WriteJSON answers with a JSON document. It returns nil: once the status is written, an encoding
// or network error cannot become a problem answer any more.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
	return nil
}

// RFC3339 formats epoch milliseconds as an RFC 3339 UTC time.
func RFC3339(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }

// AccountOf is the account an authenticated account key belongs to (zero for the operator).
func AccountOf(r *http.Request) accounts.Account {
	p, _ := PrincipalFrom(r.Context())
	return p.Account
}
