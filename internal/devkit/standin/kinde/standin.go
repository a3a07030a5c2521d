// Package standin is a stand-in for Kinde's billing endpoints that Ferry calls: the OAuth 2.0
// client-credentials token endpoint and the billing entitlements endpoint, speaking their
// documented shapes. Tests serve it with httptest and ferry dev runs it on loopback. It can be
// told to fail (HTTP 503) or to rate limit (HTTP 429 with RateLimit-Reset), in Go or over its
// control routes under /standin/.
package kinde

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/kinde"
)

// Mode is how the stand-in answers the billing endpoints.
type Mode string

// Modes.
const (
	// OK answers normally.
	OK Mode = "ok"
	// Fail answers 503, as a provider outage would.
	Fail Mode = "fail"
	// RateLimit answers 429 with RateLimit-Reset.
	RateLimit Mode = "ratelimit"
)

// Bounds of the stand-in's answers.
const (
	// tokenTTL is how long a token it issues lives (Kinde's machine-to-machine tokens last a day).
	tokenTTL = 24 * time.Hour
	// defaultPageSize is the page size when the caller sends none (Kinde's default).
	defaultPageSize = 10
	// maxPageSize bounds page_size.
	maxPageSize = 500
	// rateLimitResetSeconds is what a 429 asks callers to wait.
	rateLimitResetSeconds = 30
	maxControlBodyBytes   = 1 << 16
)

// Server is the stand-in. It is safe for concurrent use.
type Server struct {
	mu           sync.Mutex
	clientID     string
	clientSecret string
	mode         Mode
	tokens       map[string]time.Time // token → expiry
	customers    map[string][]kinde.Entitlement
	defaults     []kinde.Entitlement
	counts       Counts
	now          func() time.Time
	mux          *http.ServeMux
	meters       meterState
}

// Counts are the calls the stand-in has answered, by endpoint.
type Counts struct {
	Token        int
	Entitlements int
	// Refused counts calls answered with a failure or a 429 on purpose.
	Refused int
	// MeterWrites and MeterReads count meter-usage calls, answered or refused;
	// MeterWritesApplied counts the writes that changed (or set) a total.
	MeterWrites        int
	MeterWritesApplied int
	MeterReads         int
}

// New returns a stand-in that accepts one client's credentials.
func New(clientID, clientSecret string) *Server {
	s := &Server{
		clientID: clientID, clientSecret: clientSecret, mode: OK,
		tokens: map[string]time.Time{}, customers: map[string][]kinde.Entitlement{}, now: time.Now,
		mux: http.NewServeMux(), meters: newMeterState(),
	}
	s.mux.HandleFunc("POST "+kinde.TokenPath, s.token)
	s.mux.HandleFunc("GET "+kinde.EntitlementsPath, s.entitlements)
	s.mux.HandleFunc("POST "+kinde.MeterUsagePath, s.recordMeterUsage)
	s.mux.HandleFunc("GET "+kinde.MeterUsagePath, s.readMeterUsage)
	s.mux.HandleFunc("PUT /standin/meter-faults", s.putMeterFaults)
	s.mux.HandleFunc("PUT /standin/meter-usage/{agreement}/{feature}", s.putMeterTotal)
	s.mux.HandleFunc("GET /standin/meter-usage/{agreement}/{feature}", s.getMeterTotal)
	s.mux.HandleFunc("PUT /standin/mode", s.putMode)
	s.mux.HandleFunc("PUT /standin/entitlements/{customer}", s.putEntitlements)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErrors(w, http.StatusNotFound, "ROUTE_NOT_FOUND", "No such route on the Kinde stand-in.")
	})
	return s
}

// SetEntitlements replaces a customer's entitlements.
func (s *Server) SetEntitlements(customerID string, ents ...kinde.Entitlement) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.customers[customerID] = append([]kinde.Entitlement(nil), ents...)
}

// SetDefault sets the entitlements of every customer without their own.
func (s *Server) SetDefault(ents ...kinde.Entitlement) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defaults = append([]kinde.Entitlement(nil), ents...)
}

// SetMode switches how the billing endpoints answer.
func (s *Server) SetMode(m Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
}

// Counts returns the calls answered so far.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// Limit is an entitlement for a feature with a maximum; nil max is unlimited.
func Limit(featureCode string, max *int64) kinde.Entitlement {
	return kinde.Entitlement{ID: "entitlement_" + featureCode, FeatureCode: featureCode, FeatureName: featureCode, LimitMax: max}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// refuse answers a billing call with the configured failure; it reports whether it did.
func (s *Server) refuse(w http.ResponseWriter) bool {
	s.mu.Lock()
	mode := s.mode
	if mode != OK {
		s.counts.Refused++
	}
	s.mu.Unlock()
	switch mode {
	case Fail:
		writeErrors(w, http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE", "The stand-in is failing on purpose.")
		return true
	case RateLimit:
		w.Header().Set("RateLimit-Reset", strconv.Itoa(rateLimitResetSeconds))
		writeErrors(w, http.StatusTooManyRequests, "TOO_MANY_REQUESTS", "Request was throttled.")
		return true
	}
	return false
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts.Token++
	s.mu.Unlock()
	if s.refuse(w) {
		return
	}
	if err := r.ParseForm(); err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if r.PostForm.Get("grant_type") != "client_credentials" {
		writeOAuthError(w, http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	if id != s.clientID || secret != s.clientSecret {
		writeOAuthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	s.mu.Lock()
	s.tokens[tok] = s.now().Add(tokenTTL)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": tok, "token_type": "bearer", "expires_in": int(tokenTTL / time.Second),
		"scope": kinde.ScopeEntitlements + " " + kinde.ScopeMeterUsageWrite + " " + kinde.ScopeMeterUsageRead,
	})
}

func (s *Server) entitlements(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts.Entitlements++
	s.mu.Unlock()
	if s.refuse(w) {
		return
	}
	if !s.authorized(w, r) {
		return
	}
	q := r.URL.Query()
	customer := q.Get("customer_id")
	if customer == "" {
		writeErrors(w, http.StatusBadRequest, "CUSTOMER_ID_REQUIRED", "customer_id is required.")
		return
	}
	size := defaultPageSize
	if v := q.Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			writeErrors(w, http.StatusBadRequest, "INVALID_PAGE_SIZE", "page_size must be from 1 to 500.")
			return
		}
		size = n
	}
	s.mu.Lock()
	ents, known := s.customers[customer]
	if !known {
		ents = s.defaults
	}
	ents = append([]kinde.Entitlement(nil), ents...)
	s.mu.Unlock()
	if after := q.Get("starting_after"); after != "" {
		for i, e := range ents {
			if e.ID == after {
				ents = ents[i+1:]
				break
			}
		}
	}
	more := len(ents) > size
	if more {
		ents = ents[:size]
	}
	writeJSON(w, http.StatusOK, kinde.EntitlementsResponse{
		Code: "OK", Message: "Success", HasMore: more, Entitlements: append([]kinde.Entitlement{}, ents...),
	})
}

// authorized checks the bearer token; it answers 401 and reports false when it is not valid.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	const prefix = "Bearer "
	auth := r.Header.Get("Authorization")
	s.mu.Lock()
	expiry, ok := time.Time{}, false
	if len(auth) > len(prefix) {
		expiry, ok = s.tokens[auth[len(prefix):]]
	}
	now := s.now()
	s.mu.Unlock()
	if !ok || now.After(expiry) {
		writeErrors(w, http.StatusUnauthorized, "INVALID_TOKEN", "The token is missing, unknown or expired.")
		return false
	}
	return true
}

func (s *Server) putMode(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Mode Mode `json:"mode"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBodyBytes)).Decode(&body); err != nil ||
		(body.Mode != OK && body.Mode != Fail && body.Mode != RateLimit) {
		writeErrors(w, http.StatusBadRequest, "INVALID_MODE", `Send {"mode": "ok" | "fail" | "ratelimit"}.`)
		return
	}
	s.SetMode(body.Mode)
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) putEntitlements(w http.ResponseWriter, r *http.Request) {
	customer := r.PathValue("customer")
	var body struct {
		Entitlements []kinde.Entitlement `json:"entitlements"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBodyBytes)).Decode(&body); err != nil {
		writeErrors(w, http.StatusBadRequest, "INVALID_BODY", `Send {"entitlements": [{"id", "feature_code", "entitlement_limit_max"}]}.`)
		return
	}
	s.SetEntitlements(customer, body.Entitlements...)
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErrors answers in Kinde's error shape: {"errors": [{"code", "message"}]}.
func writeErrors(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"errors": []map[string]string{{"code": code, "message": message}}})
}

func writeOAuthError(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]string{"error": code})
}
