package httpapi

import (
	"net/http"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// HandlerFunc is a route handler: it writes a success answer or returns an error, which the
// server turns into a problem document.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Handlers are a function's route handlers by route key ("POST /v1/holds"). A function's builder
// gives its server the handlers of exactly the routes the table gives the function: the server
// refuses to build with a route left without one, or with one for a route it does not serve.
type Handlers map[string]HandlerFunc

// Handlers are the handlers of Ferry's own routes on a, by route key.
func (a *API) Handlers() Handlers {
	return Handlers{
		"POST /v1/accounts":                   a.createAccount,
		"PATCH /v1/accounts/{id}":             a.updateAccount,
		"GET /v1/accounts/{id}":               a.getAccount,
		"GET /v1/accounts":                    a.listAccounts,
		"GET /v1/accounts/{id}/standing":      a.getStanding,
		"POST /v1/events":                     a.postEvent,
		"POST /v1/events/batch":               a.postBatch,
		"GET /v1/events/{id}":                 a.getEvent,
		"GET /v1/events":                      a.listEvents,
		"POST /v1/events/{id}/redrive":        a.redriveEvent,
		"GET /v1/usage":                       a.getUsage,
		"GET /v1/usage/query":                 a.getUsageQuery,
		"POST /v1/holds":                      a.reserveHold,
		"GET /v1/holds/{id}":                  a.getHold,
		"GET /v1/holds":                       a.listHolds,
		"POST /v1/holds/{id}/charges":         a.chargeHold,
		"POST /v1/holds/{id}/settle":          a.settleHold,
		"POST /v1/usage/corrections":          a.postCorrection,
		"POST /v1/report":                     a.postReport,
		"POST /v1/reconcile":                  a.postReconcile,
		"GET /v1/reconcile/evidence":          a.getEvidence,
		"GET /v1/reconcile/review":            a.getReview,
		"GET /v1/outbox":                      a.getOutbox,
		"POST /v1/webhooks/kinde":             a.kindeWebhook,
		"POST /v1/webhooks/stripe":            a.stripeWebhook,
		"GET /v1/billing-events":              a.listBillingEvents,
		"GET /v1/billing-events/{id}":         a.getBillingEvent,
		"POST /v1/billing-events/{id}/replay": a.replayBillingEvent,
		"GET /console":                        a.consolePage,
		"GET /console/{asset}":                a.consoleAsset,
		"POST /v1/sessions":                   a.createSession,
		"GET /v1/sessions/current":            a.getSession,
		"DELETE /v1/sessions/current":         a.deleteSession,
		"POST /v1/labs/{lab}/runs":            a.runLab,
	}
}

// HandlersOf are the handlers of a on the routes table gives function.
func (a *API) HandlersOf(table []resources.Route, function string) Handlers {
	all, out := a.Handlers(), Handlers{}
	for _, r := range resources.RoutesOf(table, function) {
		if h, ok := all[r.Key()]; ok {
			out[r.Key()] = h
		}
	}
	return out
}
