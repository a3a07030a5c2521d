// Package httpapi is Ferry's HTTP API: one set of handlers that the Lambda functions serve behind
// API Gateway (HTTP API, payload v2) and that ferry dev serves on 127.0.0.1 through the same
// Lambda event path. Errors are RFC 9457 problem documents, mapped from domain errors in one
// place (problem.go); a 500 never shows its cause.
package httpapi

import (
	"context"
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
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/ingest"
	"github.com/ferrymeter/ferry/internal/ledger"
	"github.com/ferrymeter/ferry/internal/limits"
	"github.com/ferrymeter/ferry/internal/plans"
	"github.com/ferrymeter/ferry/internal/resources"
	"github.com/ferrymeter/ferry/internal/usage"
)

// maxJSONBodyBytes bounds the body of every route but the event routes, which have their own.
const maxJSONBodyBytes = 64 << 10

// EventReader reads ledger entries.
type EventReader interface {
	Get(ctx context.Context, accountID, eventID string) (ledger.Entry, error)
}

// Deps are what the handlers use.
type Deps struct {
	Accounts *accounts.Service
	Ingest   *ingest.Service
	Events   EventReader
	Usage    usage.Table
	Catalog  plans.Catalog
	// Holds serves the usage holds routes.
	Holds *holds.Service
	// Limits is where the next admission reads its limit; GET /v1/usage shows that limit.
	Limits limits.Source
	// Meters serves the reporting and reconciliation routes.
	Meters MeterDeps
	// AdminKey authenticates the operator routes. Empty disables them.
	AdminKey string
	Log      *slog.Logger
	Now      func() time.Time
}

// Auth is who may call a route.
type Auth int

// Auth kinds.
const (
	Operator Auth = iota + 1
	Account
)

// HandlerFunc is a route handler: it writes a success answer or returns an error, which the
// router turns into a problem document.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Middleware wraps the handler of one route. Capabilities (idempotency) add theirs. It runs after
// authentication, so PrincipalFrom always finds the caller.
type Middleware func(route resources.Route, next HandlerFunc) HandlerFunc

// registered is a route with its handler.
type registered struct {
	route   resources.Route
	auth    Auth
	handler HandlerFunc
}

// API is the set of routes.
type API struct {
	deps       Deps
	routes     map[string]registered // "METHOD /path"
	middleware []Middleware
}

// New builds the API with every route of resources.Routes.
func New(d Deps) *API {
	a := &API{deps: d, routes: map[string]registered{}}
	a.register("POST /v1/accounts", Operator, a.createAccount)
	a.register("PATCH /v1/accounts/{id}", Operator, a.updateAccount)
	a.register("GET /v1/accounts/{id}", Operator, a.getAccount)
	a.register("POST /v1/events", Account, a.postEvent)
	a.register("POST /v1/events/batch", Account, a.postBatch)
	a.register("GET /v1/events/{id}", Account, a.getEvent)
	a.register("GET /v1/usage", Account, a.getUsage)
	a.register("POST /v1/holds", Account, a.reserveHold)
	a.register("GET /v1/holds/{id}", Account, a.getHold)
	a.register("POST /v1/holds/{id}/charges", Account, a.chargeHold)
	a.register("POST /v1/holds/{id}/settle", Account, a.settleHold)
	a.register("POST /v1/usage/corrections", Operator, a.postCorrection)
	a.register("POST /v1/report", Operator, a.postReport)
	a.register("POST /v1/reconcile", Operator, a.postReconcile)
	a.register("GET /v1/reconcile/evidence", Operator, a.getEvidence)
	a.register("GET /v1/reconcile/review", Operator, a.getReview)
	return a
}

// SetLimits replaces the limit source GET /v1/usage reads (ferry dev swaps in a stand-in's).
func (a *API) SetLimits(src limits.Source) { a.deps.Limits = src }

// Register adds a route handler. The route must be declared in resources.Routes: that list is
// what the CDK app deploys, so a handler without an entry would never be reachable in AWS.
func (a *API) Register(key string, auth Auth, h HandlerFunc) { a.register(key, auth, h) }

func (a *API) register(key string, auth Auth, h HandlerFunc) {
	for _, r := range resources.Routes {
		if r.Method+" "+r.Path == key {
			a.routes[key] = registered{route: r, auth: auth, handler: h}
			return
		}
	}
	panic(fmt.Sprintf("httpapi: route %q is not declared in resources.Routes", key)) // a build defect
}

// Use adds middleware around every route handler, inside authentication. Middleware added first
// runs first.
func (a *API) Use(m Middleware) { a.middleware = append(a.middleware, m) }

// Keys returns the registered route keys, sorted.
func (a *API) Keys() []string {
	keys := make([]string, 0, len(a.routes))
	for k := range a.routes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// principalKey carries the authenticated caller in the request context.
type principalKey struct{}

// Principal is the authenticated caller.
type Principal struct {
	Operator bool
	Account  accounts.Account
}

// PrincipalFrom returns the caller of an authenticated request.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Scope names the caller for scoping stored state ("operator" or "account:<id>").
func (p Principal) Scope() string {
	if p.Operator {
		return "operator"
	}
	return "account:" + p.Account.ID
}

// Handler serves the routes of one function ("" serves every route). Requests for paths no route
// serves get a 404 problem; a known path with another method gets a 405 problem.
func (a *API) Handler(function string) http.Handler {
	byPath := map[string]map[string]HandlerFunc{}
	allowed := map[string][]string{}
	for _, reg := range a.routes {
		// Every function knows every path, so that a request with the wrong method — which API
		// Gateway hands to the $default route — gets a 405 listing the right ones.
		allowed[reg.route.Path] = append(allowed[reg.route.Path], reg.route.Method)
		if byPath[reg.route.Path] == nil {
			byPath[reg.route.Path] = map[string]HandlerFunc{}
		}
		if function != "" && reg.route.Function != function {
			continue
		}
		// Middleware runs inside authentication: it sees only authenticated requests and can
		// scope what it stores by the caller (PrincipalFrom), and an unauthenticated request
		// never reaches it or anything it stores.
		h := reg.handler
		for i := len(a.middleware) - 1; i >= 0; i-- {
			h = a.middleware[i](reg.route, h)
		}
		h = a.authenticate(reg.auth, h)
		byPath[reg.route.Path][reg.route.Method] = h
	}
	mux := http.NewServeMux()
	for path, methods := range byPath {
		mux.Handle(path, a.dispatch(methods, allowed[path]))
	}
	mux.Handle("/", a.serve(func(w http.ResponseWriter, r *http.Request) error {
		return notFound(fmt.Sprintf("No route %s %s.", r.Method, r.URL.Path))
	}))
	return mux
}

func (a *API) dispatch(methods map[string]HandlerFunc, allowed []string) http.Handler {
	allowed = append([]string(nil), allowed...)
	sort.Strings(allowed)
	return a.serve(func(w http.ResponseWriter, r *http.Request) error {
		h, ok := methods[r.Method]
		if !ok {
			return newProblem(http.StatusMethodNotAllowed, kindMethod, "Method not allowed",
				fmt.Sprintf("%s is not allowed on %s.", r.Method, r.URL.Path)).
				header("Allow", strings.Join(allowed, ", "))
		}
		return h(w, r)
	})
}

// serve turns a HandlerFunc into an http.Handler that answers errors as problems.
func (a *API) serve(h HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeProblem(w, r, a.deps.Log, err)
		}
	})
}

// authenticate checks the bearer key for the route's kind of caller.
func (a *API) authenticate(auth Auth, next HandlerFunc) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		key, ok := bearer(r)
		if !ok {
			return unauthorized("Send the API key as Authorization: Bearer <key>.")
		}
		var p Principal
		switch auth {
		case Operator:
			if a.deps.AdminKey == "" || subtle.ConstantTimeCompare([]byte(key), []byte(a.deps.AdminKey)) != 1 {
				return unauthorized("This route needs the operator key.")
			}
			p.Operator = true
		case Account:
			acct, err := a.deps.Accounts.Authenticate(r.Context(), key)
			if err != nil {
				return err
			}
			p.Account = acct
		}
		return next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
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

// readBody reads at most limit bytes; a longer body is a 413.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, badRequest("The request body could not be read.")
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("%w: the body is over %d bytes", ingest.ErrTooLarge, limit)
	}
	return body, nil
}

// decodeJSON reads a JSON object body strictly: unknown fields are an error, so a typo in a
// field name is reported instead of silently ignored.
func decodeJSON(r *http.Request, into any) error {
	body, err := readBody(r, maxJSONBodyBytes)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		var syntax *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("The body is not valid JSON.")
		case errors.As(err, &typeErr):
			return badRequest(fmt.Sprintf("Field %q has the wrong type.", typeErr.Field))
		default:
			return badRequest(strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if dec.More() {
		return badRequest("The body has data after the JSON object.")
	}
	return nil
}

// writeJSON answers with a JSON document. It returns nil: once the status is written, an encoding
// or network error cannot become a problem answer any more.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
	return nil
}

// rfc3339 formats epoch milliseconds as an RFC 3339 UTC time.
func rfc3339(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }
