package api_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/ferrymeter/ferry/api"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/openapicheck"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

// The local stack's own paths conform too: ferry dev serves the document it is validated against.
func TestOpenAPI_LocalStackServesHealthAndThisDocument(t *testing.T) {
	stack := startLocalStack(t)
	v := openapicheck.New(t, stack.URL)
	client := &http.Client{}
	if r := v.Do(t, client, http.MethodGet, stack.URL+"/healthz", http.Header{}, nil, openapicheck.Conforming); r.Status != http.StatusOK {
		t.Errorf("healthz: %d %s", r.Status, r.Body)
	}
	r := v.Do(t, client, http.MethodGet, stack.URL+"/openapi.yaml", http.Header{}, nil, openapicheck.Conforming)
	if r.Status != http.StatusOK || r.Header.Get("Content-Type") != api.ContentType || !bytes.Equal(r.Body, api.OpenAPI) {
		t.Errorf("openapi.yaml: %d %q, %d bytes", r.Status, r.Header.Get("Content-Type"), len(r.Body))
	}
	// Another method on them is a 405 problem naming the one they serve, as on the API's routes.
	for _, path := range []string{"/healthz", "/openapi.yaml"} {
		for _, method := range []string{http.MethodPost, http.MethodDelete, "TRACE"} {
			req, _ := http.NewRequest(method, stack.URL+path, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodGet ||
				resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s %s: %d, Allow %q, %q", method, path, resp.StatusCode, resp.Header.Get("Allow"), resp.Header.Get("Content-Type"))
			}
		}
	}
}

// startLocalStack starts ferry dev's stack on a free loopback port over fresh resources, and
// stops it and deletes them when the test ends.
func startLocalStack(t *testing.T) *devstack.Stack {
	t.Helper()
	// The webhook tooling ferry dev has: the local Kinde signer, the dev Stripe secret, the
	// apply-crash injector (the walkthrough sends webhooks and runs the webhooks lab).
	webhooks, err := devstack.NewInboxDev(compose.Settings{}, apptest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(webhooks.Close)
	opts := devstack.StackOptions{
		Addr: "127.0.0.1:0", External: testenv.Endpoints(t), Prefix: testenv.UniquePrefix(), Log: apptest.Logger(t),
	}
	webhooks.Apply(&opts)
	stack, err := devstack.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	webhooks.Serve(stack)
	t.Cleanup(func() {
		stack.Close()
		if err := devstack.Teardown(context.Background(), stack.Clients, stack.Names); err != nil {
			t.Logf("teardown: %v", err)
		}
	})
	return stack
}
