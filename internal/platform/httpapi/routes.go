package httpapi

import (
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Auth is who may call a route.
type Auth int

// Auth kinds.
const (
	// Operator routes take the operator key as Authorization: Bearer, or a console session's
	// cookie (which the operator key signed in), with the session's CSRF token on every request
	// that changes something.
	Operator Auth = iota + 1
	// Account routes take an account's API key as Authorization: Bearer.
	Account
	// WebhookSignature routes take a billing provider's delivery, authenticated by its signature
	// over the body (the function's SignatureVerifier) rather than by a bearer key.
	WebhookSignature
	// AccountOrOperator routes take either key: an account's (the caller is that account, which
	// sees its own resources) or the operator's, or a console session as Operator routes do
	// (which sees every account's).
	AccountOrOperator
	// OperatorSignIn routes take the operator key itself as Authorization: Bearer, never a console
	// session: signing in, which exchanges the key for a session.
	OperatorSignIn
	// Public routes take no credentials: the console's page and its static assets, which carry
	// no data (every datum the page shows comes from an authenticated route).
	Public
)

// TakesOperator reports whether the operator may call routes of this kind (with the operator
// key, or for Operator and AccountOrOperator also with a console session).
func (a Auth) TakesOperator() bool {
	return a == Operator || a == AccountOrOperator || a == OperatorSignIn
}

// TakesSession reports whether a console session authenticates routes of this kind.
func (a Auth) TakesSession() bool { return a == Operator || a == AccountOrOperator }

func (a Auth) String() string {
	switch a {
	case Operator:
		return "operator"
	case Account:
		return "account"
	case WebhookSignature:
		return "webhook signature"
	case AccountOrOperator:
		return "account or operator"
	case OperatorSignIn:
		return "operator key"
	case Public:
		return "public"
	}
	return fmt.Sprintf("Auth(%d)", int(a))
}

// Route is one HTTP route and everything about it. It is the one route table's row: the CDK app
// deploys it as an API Gateway route to Function's Lambda, the local gateway routes it the same
// way, the server authenticates it and runs its middleware by it, and the OpenAPI tests check the
// document against it.
type Route struct {
	Method string
	// Path uses the {name} syntax that both API Gateway and net/http understand.
	Path string
	// Function is the resources.Functions entry whose Lambda serves the route.
	Function string
	Auth     Auth
	// Idempotency is how long answers to keyed requests are kept for replay. Every route that
	// changes state has one, and the idempotency middleware claims its Idempotency-Key; a safe
	// route has none and takes no key.
	Idempotency time.Duration
	// Handler serves the route, on the value its function's builder composes.
	Handler Handler
}

// Key is the route as API Gateway names it: "POST /v1/holds".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Mutating reports whether the route changes state, and so goes through the idempotency
// middleware.
func (r Route) Mutating() bool { return r.Idempotency > 0 }

// Handler is a route's handler, bound when its function is built to the value it runs on (for
// Ferry's own routes, the function's *API).
type Handler struct {
	// on names the type the handler runs on, for build errors.
	on   string
	bind func(on any) (HandlerFunc, bool)
}

// Handle makes the Handler of a method (or function) that runs on a value of type S.
func Handle[S any](f func(S, http.ResponseWriter, *http.Request) error) Handler {
	return Handler{
		on: reflect.TypeFor[S]().String(),
		bind: func(on any) (HandlerFunc, bool) {
			s, ok := on.(S)
			if !ok {
				return nil, false
			}
			return func(w http.ResponseWriter, r *http.Request) error { return f(s, w, r) }, true
		},
	}
}

// Routes is the route table: every HTTP route Ferry serves. Capabilities add theirs here; the
// CDK app, the local gateway and every function's server follow.
var Routes = []Route{
	{Method: "POST", Path: "/v1/accounts", Function: resources.FunctionAPI, Auth: Operator,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).createAccount)},
	{Method: "PATCH", Path: "/v1/accounts/{id}", Function: resources.FunctionAPI, Auth: Operator,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).updateAccount)},
	{Method: "GET", Path: "/v1/accounts/{id}", Function: resources.FunctionAPI, Auth: Operator,
		Handler: Handle((*API).getAccount)},
	{Method: "GET", Path: "/v1/accounts", Function: resources.FunctionAPI, Auth: Operator,
		Handler: Handle((*API).listAccounts)},
	{Method: "GET", Path: "/v1/accounts/{id}/standing", Function: resources.FunctionAPI, Auth: Operator,
		Handler: Handle((*API).getStanding)},
	{Method: "POST", Path: "/v1/events", Function: resources.FunctionIngest, Auth: Account,
		Idempotency: idempotency.EventRetention, Handler: Handle((*API).postEvent)},
	{Method: "POST", Path: "/v1/events/batch", Function: resources.FunctionIngest, Auth: Account,
		Idempotency: idempotency.EventRetention, Handler: Handle((*API).postBatch)},
	{Method: "GET", Path: "/v1/events/{id}", Function: resources.FunctionAPI, Auth: AccountOrOperator,
		Handler: Handle((*API).getEvent)},
	// An account's events that ended without being stored (REJECTED, UNINSERTABLE), and the
	// operator's way back for an UNINSERTABLE one.
	{Method: "GET", Path: "/v1/events", Function: resources.FunctionAPI, Auth: AccountOrOperator,
		Handler: Handle((*API).listEvents)},
	{Method: "POST", Path: "/v1/events/{id}/redrive", Function: resources.FunctionAPI, Auth: Operator,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).redriveEvent)},
	{Method: "GET", Path: "/v1/usage", Function: resources.FunctionAPI, Auth: Account,
		Handler: Handle((*API).getUsage)},
	{Method: "POST", Path: "/v1/holds", Function: resources.FunctionHolds, Auth: Account,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).reserveHold)},
	{Method: "GET", Path: "/v1/holds/{id}", Function: resources.FunctionHolds, Auth: Account,
		Handler: Handle((*API).getHold)},
	// Listing reads the holds' account index only; the api function serves it, beside the
	// operator's other reads.
	{Method: "GET", Path: "/v1/holds", Function: resources.FunctionAPI, Auth: AccountOrOperator,
		Handler: Handle((*API).listHolds)},
	{Method: "POST", Path: "/v1/holds/{id}/charges", Function: resources.FunctionHolds, Auth: Account,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).chargeHold)},
	{Method: "POST", Path: "/v1/holds/{id}/settle", Function: resources.FunctionHolds, Auth: Account,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).settleHold)},
	// Reporting and reconciliation (operator).
	{Method: "POST", Path: "/v1/usage/corrections", Function: resources.FunctionMeterAPI, Auth: Operator,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).postCorrection)},
	{Method: "POST", Path: "/v1/report", Function: resources.FunctionMeterAPI, Auth: Operator,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).postReport)},
	{Method: "POST", Path: "/v1/reconcile", Function: resources.FunctionMeterAPI, Auth: Operator,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).postReconcile)},
	{Method: "GET", Path: "/v1/reconcile/evidence", Function: resources.FunctionMeterAPI, Auth: Operator,
		Handler: Handle((*API).getEvidence)},
	{Method: "GET", Path: "/v1/reconcile/review", Function: resources.FunctionMeterAPI, Auth: Operator,
		Handler: Handle((*API).getReview)},
	// The Stripe outbox of one account's cycle: what is still to send, retrying, or dead.
	{Method: "GET", Path: "/v1/outbox", Function: resources.FunctionMeterAPI, Auth: Operator,
		Handler: Handle((*API).getOutbox)},
	// The webhook inbox. A delivery's provider signature authenticates it, and the provider's
	// signed event id keys it (a copy is counted, never applied twice): no Idempotency-Key.
	{Method: "POST", Path: "/v1/webhooks/kinde", Function: resources.FunctionWebhooks, Auth: WebhookSignature,
		Handler: Handle((*API).kindeWebhook)},
	{Method: "POST", Path: "/v1/webhooks/stripe", Function: resources.FunctionWebhooks, Auth: WebhookSignature,
		Handler: Handle((*API).stripeWebhook)},
	{Method: "GET", Path: "/v1/billing-events", Function: resources.FunctionAPI, Auth: AccountOrOperator,
		Handler: Handle((*API).listBillingEvents)},
	{Method: "GET", Path: "/v1/billing-events/{id}", Function: resources.FunctionAPI, Auth: AccountOrOperator,
		Handler: Handle((*API).getBillingEvent)},
	{Method: "POST", Path: "/v1/billing-events/{id}/replay", Function: resources.FunctionAPI, Auth: AccountOrOperator,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).replayBillingEvent)},
	// The operator console: its page and static files (no data, no credential), signing in and
	// out, and its live labs. Every datum the console shows comes from the routes above, through
	// the same authentication and middleware as any client's.
	{Method: "GET", Path: "/console", Function: resources.FunctionAPI, Auth: Public,
		Handler: Handle((*API).consolePage)},
	{Method: "GET", Path: "/console/{asset}", Function: resources.FunctionAPI, Auth: Public,
		Handler: Handle((*API).consoleAsset)},
	// A sign-in mints a new session each time and its answer carries the session's CSRF token,
	// which the idempotency table must not keep: no Idempotency-Key.
	{Method: "POST", Path: "/v1/sessions", Function: resources.FunctionAPI, Auth: OperatorSignIn,
		Handler: Handle((*API).createSession)},
	{Method: "GET", Path: "/v1/sessions/current", Function: resources.FunctionAPI, Auth: Operator,
		Handler: Handle((*API).getSession)},
	// Signing out deletes the session; doing it twice finds no session (401), which is signed out.
	{Method: "DELETE", Path: "/v1/sessions/current", Function: resources.FunctionAPI, Auth: Operator,
		Handler: Handle((*API).deleteSession)},
	{Method: "POST", Path: "/v1/labs/{lab}/runs", Function: resources.FunctionAPI, Auth: Operator,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).runLab)},
}

// DefaultRouteFunction serves API Gateway's $default route: requests no route matches (unknown
// paths, wrong methods) get its problem answers instead of API Gateway's bare 404.
const DefaultRouteFunction = resources.FunctionAPI

// RoutesOf returns the routes of table that function serves, in table order.
func RoutesOf(table []Route, function string) []Route {
	var out []Route
	for _, r := range table {
		if r.Function == function {
			out = append(out, r)
		}
	}
	return out
}

// Serves reports whether function serves HTTP: a route of table, or the $default route.
func Serves(table []Route, function string) bool {
	return function == DefaultRouteFunction || len(RoutesOf(table, function)) > 0
}

// NeedsOperatorKey reports whether function serves a route the operator key may call (Operator,
// AccountOrOperator), and so must read the operator key. No other function reads it.
func NeedsOperatorKey(table []Route, function string) bool {
	for _, r := range RoutesOf(table, function) {
		if r.Auth.TakesOperator() {
			return true
		}
	}
	return false
}
