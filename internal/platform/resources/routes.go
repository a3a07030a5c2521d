package resources

import (
	"fmt"
	"time"
)

// How long the idempotency middleware keeps a keyed answer for replay, by route.
const (
	// IdempotencyRetention is how long an answer is kept unless its route says otherwise: at
	// least the 24 hours clients are used to from payment APIs.
	IdempotencyRetention = 24 * time.Hour
	// EventIdempotencyRetention is the retention of the event routes. Clients buffer usage and
	// replay a flush after their own outages, which can last days; the record is small, and a late
	// retry that still finds it gets the same answer instead of a fresh run.
	EventIdempotencyRetention = 7 * 24 * time.Hour
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
	// Function is the Functions entry whose Lambda serves the route.
	Function string
	Auth     Auth
	// Idempotency is how long answers to keyed requests are kept for replay. Every route that
	// changes state has one, and the idempotency middleware claims its Idempotency-Key; a safe
	// route has none and takes no key.
	Idempotency time.Duration
}

// Key is the route as API Gateway names it: "POST /v1/holds".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Mutating reports whether the route changes state, and so goes through the idempotency
// middleware.
func (r Route) Mutating() bool { return r.Idempotency > 0 }

// Routes is the route table: every HTTP route Ferry serves. Capabilities add theirs here; the
// CDK app, the local gateway and every function's server follow.
var Routes = []Route{
	{Method: "POST", Path: "/v1/accounts", Function: FunctionAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	{Method: "PATCH", Path: "/v1/accounts/{id}", Function: FunctionAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	{Method: "GET", Path: "/v1/accounts/{id}", Function: FunctionAPI, Auth: Operator},
	{Method: "GET", Path: "/v1/accounts", Function: FunctionAPI, Auth: Operator},
	{Method: "GET", Path: "/v1/accounts/{id}/standing", Function: FunctionAPI, Auth: Operator},
	{Method: "POST", Path: "/v1/events", Function: FunctionIngest, Auth: Account,
		Idempotency: EventIdempotencyRetention},
	{Method: "POST", Path: "/v1/events/batch", Function: FunctionIngest, Auth: Account,
		Idempotency: EventIdempotencyRetention},
	{Method: "GET", Path: "/v1/events/{id}", Function: FunctionAPI, Auth: AccountOrOperator},
	// An account's events that ended without being stored (REJECTED, UNINSERTABLE), and the
	// operator's way back for an UNINSERTABLE one.
	{Method: "GET", Path: "/v1/events", Function: FunctionAPI, Auth: AccountOrOperator},
	{Method: "POST", Path: "/v1/events/{id}/redrive", Function: FunctionAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	{Method: "GET", Path: "/v1/usage", Function: FunctionAPI, Auth: Account},
	// The usage query reads a meter's rollups: an account its own, the operator any account's.
	{Method: "GET", Path: "/v1/usage/query", Function: FunctionAPI, Auth: AccountOrOperator},
	{Method: "POST", Path: "/v1/holds", Function: FunctionHolds, Auth: Account,
		Idempotency: IdempotencyRetention},
	{Method: "GET", Path: "/v1/holds/{id}", Function: FunctionHolds, Auth: Account},
	// Listing reads the holds' account index only; the api function serves it, beside the
	// operator's other reads.
	{Method: "GET", Path: "/v1/holds", Function: FunctionAPI, Auth: AccountOrOperator},
	{Method: "POST", Path: "/v1/holds/{id}/charges", Function: FunctionHolds, Auth: Account,
		Idempotency: IdempotencyRetention},
	{Method: "POST", Path: "/v1/holds/{id}/settle", Function: FunctionHolds, Auth: Account,
		Idempotency: IdempotencyRetention},
	// Reporting and reconciliation (operator).
	{Method: "POST", Path: "/v1/usage/corrections", Function: FunctionMeterAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	{Method: "POST", Path: "/v1/report", Function: FunctionMeterAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	{Method: "POST", Path: "/v1/reconcile", Function: FunctionMeterAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	{Method: "GET", Path: "/v1/reconcile/evidence", Function: FunctionMeterAPI, Auth: Operator},
	{Method: "GET", Path: "/v1/reconcile/review", Function: FunctionMeterAPI, Auth: Operator},
	// The Stripe outbox of one account's cycle: what is still to send, retrying, or dead.
	{Method: "GET", Path: "/v1/outbox", Function: FunctionMeterAPI, Auth: Operator},
	// The webhook inbox. A delivery's provider signature authenticates it, and the provider's
	// signed event id keys it (a copy is counted, never applied twice): no Idempotency-Key.
	{Method: "POST", Path: "/v1/webhooks/kinde", Function: FunctionWebhooks, Auth: WebhookSignature},
	{Method: "POST", Path: "/v1/webhooks/stripe", Function: FunctionWebhooks, Auth: WebhookSignature},
	{Method: "GET", Path: "/v1/billing-events", Function: FunctionAPI, Auth: AccountOrOperator},
	{Method: "GET", Path: "/v1/billing-events/{id}", Function: FunctionAPI, Auth: AccountOrOperator},
	{Method: "POST", Path: "/v1/billing-events/{id}/replay", Function: FunctionAPI, Auth: AccountOrOperator,
		Idempotency: IdempotencyRetention},
	// The operator console: its page and static files (no data, no credential), signing in and
	// out, and its live labs. Every datum the console shows comes from the routes above, through
	// the same authentication and middleware as any client's.
	{Method: "GET", Path: "/console", Function: FunctionAPI, Auth: Public},
	{Method: "GET", Path: "/console/{asset}", Function: FunctionAPI, Auth: Public},
	// A sign-in mints a new session each time and its answer carries the session's CSRF token,
	// which the idempotency table must not keep: no Idempotency-Key.
	{Method: "POST", Path: "/v1/sessions", Function: FunctionAPI, Auth: OperatorSignIn},
	{Method: "GET", Path: "/v1/sessions/current", Function: FunctionAPI, Auth: Operator},
	// Signing out deletes the session; doing it twice finds no session (401), which is signed out.
	{Method: "DELETE", Path: "/v1/sessions/current", Function: FunctionAPI, Auth: Operator},
	{Method: "POST", Path: "/v1/labs/{lab}/runs", Function: FunctionAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	// The webhook endpoints Ferry's notifications go to (operator): registration (its answer
	// shows the first secret, once), rotation, and each endpoint's delivery log and replays.
	{Method: "POST", Path: "/v1/webhook-endpoints", Function: FunctionAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	{Method: "GET", Path: "/v1/webhook-endpoints", Function: FunctionAPI, Auth: Operator},
	{Method: "GET", Path: "/v1/webhook-endpoints/{id}", Function: FunctionAPI, Auth: Operator},
	{Method: "PATCH", Path: "/v1/webhook-endpoints/{id}", Function: FunctionAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	{Method: "DELETE", Path: "/v1/webhook-endpoints/{id}", Function: FunctionAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	{Method: "POST", Path: "/v1/webhook-endpoints/{id}/rotate-secret", Function: FunctionAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
	{Method: "GET", Path: "/v1/webhook-endpoints/{id}/deliveries", Function: FunctionAPI, Auth: Operator},
	{Method: "POST", Path: "/v1/webhook-endpoints/{id}/deliveries/{notification}/replay", Function: FunctionAPI, Auth: Operator,
		Idempotency: IdempotencyRetention},
}

// DefaultRouteFunction serves API Gateway's $default route: requests no route matches (unknown
// paths, wrong methods) get its problem answers instead of API Gateway's bare 404.
const DefaultRouteFunction = FunctionAPI

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
