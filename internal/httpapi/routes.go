package httpapi

import (
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/ferrymeter/ferry/internal/idempotency"
	"github.com/ferrymeter/ferry/internal/resources"
)

// Auth is who may call a route.
type Auth int

// Auth kinds.
const (
	// Operator routes take the operator key as Authorization: Bearer.
	Operator Auth = iota + 1
	// Account routes take an account's API key as Authorization: Bearer.
	Account
	// WebhookSignature routes take a billing provider's delivery, authenticated by its signature
	// over the body (the function's SignatureVerifier) rather than by a bearer key.
	WebhookSignature
	// AccountOrOperator routes take either key: an account's (the caller is that account, which
	// sees its own resources) or the operator's (which sees every account's).
	AccountOrOperator
)

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
	{Method: "POST", Path: "/v1/events", Function: resources.FunctionIngest, Auth: Account,
		Idempotency: idempotency.EventRetention, Handler: Handle((*API).postEvent)},
	{Method: "POST", Path: "/v1/events/batch", Function: resources.FunctionIngest, Auth: Account,
		Idempotency: idempotency.EventRetention, Handler: Handle((*API).postBatch)},
	{Method: "GET", Path: "/v1/events/{id}", Function: resources.FunctionAPI, Auth: Account,
		Handler: Handle((*API).getEvent)},
	{Method: "GET", Path: "/v1/usage", Function: resources.FunctionAPI, Auth: Account,
		Handler: Handle((*API).getUsage)},
	{Method: "POST", Path: "/v1/holds", Function: resources.FunctionHolds, Auth: Account,
		Idempotency: idempotency.DefaultRetention, Handler: Handle((*API).reserveHold)},
	{Method: "GET", Path: "/v1/holds/{id}", Function: resources.FunctionHolds, Auth: Account,
		Handler: Handle((*API).getHold)},
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
		if r.Auth == Operator || r.Auth == AccountOrOperator {
			return true
		}
	}
	return false
}
