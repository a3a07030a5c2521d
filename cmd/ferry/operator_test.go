package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Every operator command's request carries the operator key, and JSON only when it has a body;
// a refusal reads as the problem's detail, and send lists a registration's problems one a line.
func TestOpClient_SendsTheOperatorKey_AndReadsRefusals(t *testing.T) {
	const problem = `{"type":"tag:ferrymeter.dev,2026:problem:invalid-request","detail":"a is bad; b is bad","errors":["a is bad","b is bad"]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Authorization") != "Bearer op-key" || (len(body) > 0) != (r.Header.Get("Content-Type") == "application/json") {
			t.Errorf("%s %s with headers %v and body %q", r.Method, r.URL, r.Header, body)
		}
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"x"}`))
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(problem))
		}
	}))
	defer srv.Close()
	t.Setenv(resources.EnvAdminKey, "op-key")
	c := newOpClient(srv.URL + "/")
	ctx := context.Background()

	var out json.RawMessage
	if err := c.send(ctx, http.MethodPost, "/ok", map[string]any{"a": 1}, &out, http.StatusCreated); err != nil || string(out) != `{"id":"x"}` {
		t.Errorf("send: %s, %v", out, err)
	}
	var v map[string]any
	if err := c.call(ctx, http.MethodGet, "/ok", nil, &v); err == nil || err.Error() != "GET /ok: 201 " {
		t.Errorf("call on a 201: %v", err)
	}
	if err := c.call(ctx, http.MethodGet, "/refused", nil, &v); err == nil || err.Error() != "GET /refused: 400 a is bad; b is bad" {
		t.Errorf("call refused: %v", err)
	}
	if err := c.send(ctx, http.MethodPost, "/refused", nil, &out, http.StatusOK); err == nil ||
		err.Error() != "POST /refused: 400:\n  a is bad\n  b is bad" {
		t.Errorf("send refused: %v", err)
	}
	if err := newOpClient("http://127.0.0.1:1").call(ctx, http.MethodGet, "/x", nil, &v); err == nil ||
		!strings.HasPrefix(err.Error(), "GET /x (is Ferry running at http://127.0.0.1:1?)") {
		t.Errorf("no server: %v", err)
	}
}
