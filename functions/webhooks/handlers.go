package webhooks

import (
	"net/http"

	"github.com/ferrymeter/ferry/internal/webhooks/intake"

	"github.com/ferrymeter/ferry/internal/platform/httpapi"
)

// routes serve the webhook routes: a verified delivery, stored.
type routes struct {
	Webhooks *intake.Receiver
}

// handlers are the function's route handlers, by route key.
func (a *routes) handlers() httpapi.Handlers {
	return httpapi.Handlers{
		"POST /v1/webhooks/kinde":  a.kindeWebhook,
		"POST /v1/webhooks/stripe": a.stripeWebhook,
	}
}

// storedBody is a webhook's answer: the stored event's id and whether this delivery was a copy.
// It is sent only once the delivery is stored; it never means applied.
type storedBody struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

// storeWebhook stores the delivery the server's verifier authenticated (the function's
// SignatureVerifier checked its signature, media type and size for this route) and answers 200.
func (a *routes) storeWebhook(w http.ResponseWriter, r *http.Request) error {
	p, _ := httpapi.PrincipalFrom(r.Context())
	body, err := httpapi.ReadBody(r, httpapi.MaxSignedBodyBytes)
	if err != nil {
		return err
	}
	stored, err := a.Webhooks.Store(r.Context(), p.Provider, r.Header, body)
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, storedBody{ID: stored.ID, Duplicate: stored.Duplicate})
}

// kindeWebhook is POST /v1/webhooks/kinde: a JWT body signed with a key of Kinde's JWKS.
func (a *routes) kindeWebhook(w http.ResponseWriter, r *http.Request) error {
	return a.storeWebhook(w, r)
}

// stripeWebhook is POST /v1/webhooks/stripe: a JSON event with a Stripe-Signature header.
func (a *routes) stripeWebhook(w http.ResponseWriter, r *http.Request) error {
	return a.storeWebhook(w, r)
}
