package httpapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// signatures is a verifier that accepts a body signed "ok", as a provider's signature check would.
type signatures struct{}

func (signatures) Verify(_ context.Context, _ resources.Route, header http.Header, body []byte) (string, error) {
	if header.Get("Provider-Signature") != "ok" {
		return "", problem.New(problem.Unauthenticated, "bad signature", "The delivery's signature is not valid.")
	}
	return "stripe", nil
}

// hookbox is a handler value a webhook capability would compose.
type hookbox struct{ got []string }

func (i *hookbox) receive(w http.ResponseWriter, r *http.Request) error {
	body, _ := io.ReadAll(r.Body)
	p, _ := PrincipalFrom(r.Context())
	i.got = append(i.got, p.Scope()+" "+string(body))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

var webhookRoute = resources.Route{Method: "POST", Path: "/v1/webhooks/stripe", Function: "inbox", Auth: resources.WebhookSignature}

// handlers serve each route on box.
func (i *hookbox) handlers(routes ...resources.Route) Handlers {
	h := Handlers{}
	for _, r := range routes {
		h[r.Key()] = i.receive
	}
	return h
}

// A WebhookSignature route is authenticated by the function's verifier over the body, not by a
// bearer key: the handler sees the provider as its caller and the whole body.
func TestServer_AWebhookSignatureRouteIsAuthenticatedByItsVerifier(t *testing.T) {
	box := &hookbox{}
	srv := NewServer("inbox", []resources.Route{webhookRoute}, box.handlers(webhookRoute), Authentication{Signatures: signatures{}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h, err := srv.Handler()
	if err != nil {
		t.Fatal(err)
	}
	send := func(signature string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v1/webhooks/stripe", bytes.NewReader([]byte(`{"type":"invoice.paid"}`)))
		req.Header.Set("Provider-Signature", signature)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	if w := send("ok"); w.Code != http.StatusNoContent {
		t.Errorf("signed delivery: %d %s", w.Code, w.Body)
	}
	if w := send("forged"); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "signature is not valid") {
		t.Errorf("forged delivery: %d %s", w.Code, w.Body)
	}
	if len(box.got) != 1 || box.got[0] != `webhook:stripe {"type":"invoice.paid"}` {
		t.Errorf("the handler saw %q", box.got)
	}
}

// A server that lacks what its routes' auth needs, a route without its handler, or a handler for
// a route the function does not serve, does not build: the mistake shows when the function is
// composed, never in a request.
func TestServer_RefusesToBuildWithoutWhatItsRoutesNeed(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	box := &hookbox{}
	get := func(auth resources.Auth) resources.Route {
		return resources.Route{Method: "GET", Path: "/x", Function: "inbox", Auth: auth}
	}
	other := resources.Route{Method: "GET", Path: "/y", Function: "api", Auth: resources.Public}
	cases := []struct {
		name     string
		route    resources.Route
		handlers Handlers
		auth     Authentication
		want     string
	}{
		{"a webhook route without a verifier", webhookRoute, box.handlers(webhookRoute), Authentication{}, "verifies webhook signatures, and the function has no verifier"},
		{"an operator route without the operator key", get(resources.Operator), box.handlers(get(resources.Operator)), Authentication{}, "needs the operator key"},
		{"an account route without accounts", get(resources.Account), box.handlers(get(resources.Account)), Authentication{}, "authenticates account keys"},
		{"a route without auth", get(0), box.handlers(get(0)), Authentication{}, "has no Auth"},
		{"a route without its handler", webhookRoute, Handlers{}, Authentication{Signatures: signatures{}}, "route POST /v1/webhooks/stripe has no handler in function inbox"},
		{"a handler for another function's route", webhookRoute, box.handlers(webhookRoute, other), Authentication{Signatures: signatures{}}, "function inbox has a handler for GET /y, which is no route of its own"},
	}
	for _, c := range cases {
		_, err := NewServer("inbox", []resources.Route{c.route, other}, c.handlers, c.auth, log).Handler()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
}
