// Package standin serves the Stripe API endpoints the inbox's re-fetch reads —
// GET /v1/subscriptions/{id} and GET /v1/invoices/{id} — from objects a test (or ferry dev)
// puts in it, with Stripe's bearer authentication and error shape.
package stripeobjects

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
)

// Server is a Stripe API stand-in.
type Server struct {
	key string
	mu  sync.Mutex
	// objects by "<type>/<id>" (type "subscriptions" or "invoices").
	objects map[string]json.RawMessage
	// fail, when set, answers every request with this status (an outage).
	fail  int
	calls int
}

// New returns a stand-in that accepts the API key key.
func New(key string) *Server { return &Server{key: key, objects: map[string]json.RawMessage{}} }

// PutSubscription stores a subscription object (raw Stripe JSON) under its id.
func (s *Server) PutSubscription(id string, obj json.RawMessage) { s.put("subscriptions", id, obj) }

// PutInvoice stores an invoice object under its id.
func (s *Server) PutInvoice(id string, obj json.RawMessage) { s.put("invoices", id, obj) }

func (s *Server) put(kind, id string, obj json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[kind+"/"+id] = obj
}

// Fail makes every request answer status (0 restores normal answers).
func (s *Server) Fail(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = status
}

// Calls counts the requests served.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func stripeError(w http.ResponseWriter, status int, kind, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"type": kind, "message": message}})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.calls++
	fail := s.fail
	s.mu.Unlock()
	if fail != 0 {
		stripeError(w, fail, "api_error", "the stand-in is failing on purpose")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.key {
		stripeError(w, http.StatusUnauthorized, "invalid_request_error", "Invalid API Key provided.")
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/"), "/")
	if r.Method != http.MethodGet || len(parts) != 2 || (parts[0] != "subscriptions" && parts[0] != "invoices") {
		stripeError(w, http.StatusNotFound, "invalid_request_error", "Unrecognized request URL.")
		return
	}
	s.mu.Lock()
	obj, ok := s.objects[parts[0]+"/"+parts[1]]
	s.mu.Unlock()
	if !ok {
		stripeError(w, http.StatusNotFound, "invalid_request_error", "No such "+strings.TrimSuffix(parts[0], "s")+": '"+parts[1]+"'")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_standin")
	_, _ = w.Write(obj)
}
