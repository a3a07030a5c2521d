// Package standin is a stand-in for the Stripe billing-meter endpoints Ferry calls, speaking
// their documented wire formats: POST /v1/billing/meter_events and
// POST /v1/billing/meter_event_adjustments (form-encoded), and
// GET /v1/billing/meters/{id}/event_summaries (a list object of summaries). It keeps the state
// Stripe would (stripe-mock keeps none): events deduplicated by identifier, cancellations within
// 24 hours of receipt, and each meter's aggregation (its default_aggregation formula: sum, count
// or last) per customer and minute-aligned window. It can fail on purpose
// (500, 429 with Retry-After, a timeout after the event landed), lag like Stripe's eventually
// consistent summaries, and drift (usage from something other than Ferry). Tests serve it with
// httptest; ferry dev runs it on loopback, steered over /standin/.
package stripe

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
)

// Fault is a failure the stand-in injects into a coming call.
type Fault string

// Faults.
const (
	// Fail answers 500 without recording anything.
	Fail Fault = "fail"
	// RateLimit answers 429 with Retry-After without recording anything.
	RateLimit Fault = "ratelimit"
	// TimeoutAfterWrite records the event, then holds the answer back for the hang time, so the
	// caller times out on an event that landed.
	TimeoutAfterWrite Fault = "timeout-after-write"
)

// Bounds of the stand-in.
const (
	// DedupeWindow is how long an identifier is remembered (Stripe: at least 24 hours).
	DedupeWindow = 24 * time.Hour
	// CancelWindow is how long after receipt an event can be cancelled.
	CancelWindow = 24 * time.Hour
	// MaxIdentifierLength and MaxEventNameLength are Stripe's limits.
	MaxIdentifierLength = 100
	MaxEventNameLength  = 100
	// pastLimit and futureLimit bound an event's timestamp around its receipt.
	pastLimit   = 35 * 24 * time.Hour
	futureLimit = 5 * time.Minute
	defaultHang = 12 * time.Second
	maxBody     = 1 << 16
)

// Event is a meter event as the stand-in holds it.
type Event struct {
	Identifier string
	EventName  string
	Customer   string
	Value      int64
	Timestamp  time.Time
	ReceivedAt time.Time
	Cancelled  bool
	// Drift marks usage the stand-in injected as if something other than Ferry sent it.
	Drift bool
}

// Counts are the calls the stand-in has answered.
type Counts struct {
	// MeterEventRequests counts POST /v1/billing/meter_events, refused ones included.
	MeterEventRequests int
	// EventsRecorded counts events that moved a meter (a repeated identifier moves none).
	EventsRecorded int
	// Duplicates counts requests whose identifier was already recorded.
	Duplicates int
	Cancels    int
	Summaries  int
	// Refused counts calls answered with an injected failure.
	Refused int
}

// Server is the stand-in. It is safe for concurrent use.
type Server struct {
	mu          sync.Mutex
	apiKey      string
	meters      map[string]Meter // by meter id
	events      []*Event
	byID        map[string]*Event
	faults      map[string][]Fault // endpoint → queued faults
	lag         time.Duration
	hang        time.Duration
	retryAfterS int
	counts      Counts
	now         func() time.Time
	mux         *http.ServeMux
}

// Endpoints, for fault queues.
const (
	EndpointMeterEvents = "meter_events"
	EndpointAdjustments = "meter_event_adjustments"
	EndpointSummaries   = "event_summaries"
)

// Meter is a billing meter as Stripe keeps it: the event name its events come under, and its
// default aggregation formula.
type Meter struct {
	EventName string
	// Formula is "sum" (the values add up; the default), "count" (the events are counted) or
	// "last" (the value of the latest event by timestamp).
	Formula string
}

// Formulas Stripe's meters aggregate by.
const (
	FormulaSum   = "sum"
	FormulaCount = "count"
	FormulaLast  = "last"
)

// Meters are the stand-in meters of a catalog's features: each feature's Stripe meter, with the
// formula its Ferry meter is sent to (plans.Catalog.StripeAggregation).
func Meters(catalog plans.Catalog) map[string]Meter {
	out := map[string]Meter{}
	for _, f := range catalog.Features() {
		if d := catalog.Definition(f); d.Stripe != nil {
			out[d.Stripe.MeterID] = Meter{EventName: d.Stripe.MeterEventName, Formula: string(catalog.StripeAggregation(f))}
		}
	}
	return out
}

// New returns a stand-in that accepts one API key and knows the given meters (by id).
func New(apiKey string, meters map[string]Meter) *Server {
	s := &Server{
		apiKey: apiKey, meters: map[string]Meter{}, byID: map[string]*Event{}, faults: map[string][]Fault{},
		hang: defaultHang, retryAfterS: 1, now: time.Now, mux: http.NewServeMux(),
	}
	for id, m := range meters {
		s.SetMeter(id, m)
	}
	s.mux.HandleFunc("POST /v1/billing/meter_events", s.meterEvent)
	s.mux.HandleFunc("POST /v1/billing/meter_event_adjustments", s.adjustment)
	s.mux.HandleFunc("GET /v1/billing/meters/{id}/event_summaries", s.summaries)
	s.mux.HandleFunc("PUT /standin/faults", s.putFaults)
	s.mux.HandleFunc("POST /standin/drift", s.postDrift)
	s.mux.HandleFunc("PUT /standin/lag", s.putLag)
	s.mux.HandleFunc("GET /standin/counts", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Counts()) })
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "Unrecognized request URL ("+r.Method+": "+r.URL.Path+").")
	})
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// SetClock replaces the stand-in's clock (the dedupe and cancel windows, the lag).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// SetMeter registers a meter.
func (s *Server) SetMeter(id string, m Meter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Formula == "" {
		m.Formula = FormulaSum
	}
	s.meters[id] = m
}

// FailNext queues faults for the next calls to an endpoint, one per call.
func (s *Server) FailNext(endpoint string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[endpoint] = append(s.faults[endpoint], faults...)
}

// SetLag makes the summaries leave out events received less than d ago.
func (s *Server) SetLag(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lag = d
}

// SetRetryAfter sets the Retry-After (seconds) a ratelimit fault answers with.
func (s *Server) SetRetryAfter(secs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retryAfterS = secs
}

// SetHang sets how long a timeout-after-write holds its answer.
func (s *Server) SetHang(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = d
}

// Drift records usage from something other than Ferry (value may be negative: lost usage).
func (s *Server) Drift(eventName, customer string, value int64, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := &Event{Identifier: fmt.Sprintf("drift_%d", len(s.events)), EventName: eventName, Customer: customer,
		Value: value, Timestamp: at, ReceivedAt: now, Drift: true}
	s.events = append(s.events, e)
}

// Counts returns the calls answered so far.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// Events returns every event the stand-in holds, in the order received.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Event, len(s.events))
	for i, e := range s.events {
		out[i] = *e
	}
	return out
}

// Total is what the meter of eventName holds for a customer, over every event not cancelled, by
// the meter's formula (sum when no meter of that name is registered).
func (s *Server) Total(eventName, customer string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	formula := FormulaSum
	for _, m := range s.meters {
		if m.EventName == eventName {
			formula = m.Formula
		}
	}
	return aggregate(formula, s.events, func(e *Event) bool { return e.EventName == eventName && e.Customer == customer && !e.Cancelled })
}

// aggregate applies a meter's formula to the events take selects, in the order received: sum
// adds the values, count counts the events, last takes the value of the event with the latest
// timestamp (of two with the same second, the one received later, as Stripe documents no
// order among them).
func aggregate(formula string, events []*Event, take func(*Event) bool) int64 {
	var out int64
	var last *Event
	for _, e := range events {
		if !take(e) {
			continue
		}
		switch formula {
		case FormulaCount:
			out++
		case FormulaLast:
			if last == nil || e.Timestamp.Unix() >= last.Timestamp.Unix() {
				last = e
			}
		default:
			out += e.Value
		}
	}
	if formula == FormulaLast && last != nil {
		out = last.Value
	}
	return out
}

func (s *Server) nextFault(endpoint string) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.faults[endpoint]
	if len(q) == 0 {
		return ""
	}
	s.faults[endpoint] = q[1:]
	s.counts.Refused++
	return q[0]
}

// refuse answers the injected failures that record nothing; it reports whether it answered.
func (s *Server) refuse(w http.ResponseWriter, f Fault) bool {
	switch f {
	case Fail:
		writeError(w, http.StatusInternalServerError, "api_error", "", "The stand-in is failing on purpose.")
		return true
	case RateLimit:
		s.mu.Lock()
		secs := s.retryAfterS
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(w, http.StatusTooManyRequests, "invalid_request_error", "rate_limit", "Too many requests hit the API too quickly.")
		return true
	}
	return false
}

func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if user, _, ok := r.BasicAuth(); ok {
		key = user
	}
	if key == "" || key != s.apiKey {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided.")
		return false
	}
	return true
}

// meterEvent is POST /v1/billing/meter_events.
func (s *Server) meterEvent(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts.MeterEventRequests++
	s.mu.Unlock()
	if !s.authorized(w, r) {
		return
	}
	fault := s.nextFault(EndpointMeterEvents)
	if s.refuse(w, fault) {
		return
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid", "The body is not form-encoded.")
		return
	}
	f := r.PostForm
	name, id, customer := f.Get("event_name"), f.Get("identifier"), f.Get("payload[stripe_customer_id]")
	switch {
	case name == "" || len(name) > MaxEventNameLength:
		writeParamError(w, "event_name", "event_name is required (at most 100 characters).")
		return
	case len(id) > MaxIdentifierLength:
		writeParamError(w, "identifier", "identifier is at most 100 characters.")
		return
	case customer == "":
		writeParamError(w, "payload", "payload[stripe_customer_id] is required.")
		return
	}
	value, err := strconv.ParseInt(f.Get("payload[value]"), 10, 64)
	if err != nil {
		writeParamError(w, "payload", "payload[value] must be a whole number.")
		return
	}
	now := s.now()
	ts := now
	if v := f.Get("timestamp"); v != "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeParamError(w, "timestamp", "timestamp must be a Unix time in seconds.")
			return
		}
		ts = time.Unix(secs, 0)
		if ts.Before(now.Add(-pastLimit)) || ts.After(now.Add(futureLimit)) {
			writeParamError(w, "timestamp", "timestamp must be within the past 35 calendar days or up to 5 minutes in the future.")
			return
		}
	}
	s.mu.Lock()
	if id == "" {
		id = fmt.Sprintf("standin_%d", len(s.events))
	}
	if prior, seen := s.byID[id]; seen && now.Sub(prior.ReceivedAt) < DedupeWindow {
		// Stripe enforces the identifier's uniqueness: the repeat moves no meter.
		s.counts.Duplicates++
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, eventBody(prior))
		return
	}
	e := &Event{Identifier: id, EventName: name, Customer: customer, Value: value, Timestamp: ts, ReceivedAt: now}
	s.events = append(s.events, e)
	s.byID[id] = e
	s.counts.EventsRecorded++
	hang := s.hang
	s.mu.Unlock()
	if fault == TimeoutAfterWrite {
		select {
		case <-r.Context().Done():
		case <-time.After(hang):
		}
	}
	writeJSON(w, http.StatusOK, eventBody(e))
}

func eventBody(e *Event) map[string]any {
	return map[string]any{
		"object": "billing.meter_event", "created": e.ReceivedAt.Unix(), "event_name": e.EventName,
		"identifier": e.Identifier, "livemode": false, "timestamp": e.Timestamp.Unix(),
		"payload": map[string]string{"stripe_customer_id": e.Customer, "value": strconv.FormatInt(e.Value, 10)},
	}
}

// adjustment is POST /v1/billing/meter_event_adjustments (type=cancel).
func (s *Server) adjustment(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	if s.refuse(w, s.nextFault(EndpointAdjustments)) {
		return
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid", "The body is not form-encoded.")
		return
	}
	f := r.PostForm
	name, id := f.Get("event_name"), f.Get("cancel[identifier]")
	if f.Get("type") != "cancel" || name == "" || id == "" {
		writeParamError(w, "cancel", "type=cancel, event_name and cancel[identifier] are required.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	switch {
	case !ok || e.EventName != name:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "resource_missing", "No meter event with identifier "+id+".")
		return
	case s.now().Sub(e.ReceivedAt) >= CancelWindow:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid", "Meter events can only be cancelled within 24 hours of being received.")
		return
	}
	e.Cancelled = true
	s.counts.Cancels++
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "billing.meter_event_adjustment", "event_name": name, "livemode": false, "status": "complete",
		"type": "cancel", "cancel": map[string]string{"identifier": id},
	})
}

// summaries is GET /v1/billing/meters/{id}/event_summaries: one summary for the whole window.
func (s *Server) summaries(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts.Summaries++
	s.mu.Unlock()
	if !s.authorized(w, r) {
		return
	}
	if s.refuse(w, s.nextFault(EndpointSummaries)) {
		return
	}
	meterID := r.PathValue("id")
	q := r.URL.Query()
	customer := q.Get("customer")
	start, serr := strconv.ParseInt(q.Get("start_time"), 10, 64)
	end, eerr := strconv.ParseInt(q.Get("end_time"), 10, 64)
	switch {
	case customer == "":
		writeParamError(w, "customer", "customer is required.")
		return
	case serr != nil || eerr != nil || start%60 != 0 || end%60 != 0 || end <= start:
		writeParamError(w, "start_time", "start_time and end_time are required, aligned with minute boundaries, start before end.")
		return
	}
	s.mu.Lock()
	m, ok := s.meters[meterID]
	if !ok {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "No such billing meter: '"+meterID+"'")
		return
	}
	now := s.now()
	total := aggregate(m.Formula, s.events, func(e *Event) bool {
		ts := e.Timestamp.Unix()
		if e.EventName != m.EventName || e.Customer != customer || e.Cancelled || ts < start || ts >= end {
			return false
		}
		return s.lag <= 0 || now.Sub(e.ReceivedAt) >= s.lag
	})
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "url": "/v1/billing/meters/" + meterID + "/event_summaries", "has_more": false,
		"data": []map[string]any{{
			"id": fmt.Sprintf("mtrusg_%s_%d", meterID, start), "object": "billing.meter_event_summary",
			"aggregated_value": total, "start_time": start, "end_time": end, "livemode": false, "meter": meterID,
		}},
	})
}

func (s *Server) putFaults(w http.ResponseWriter, r *http.Request) {
	var body map[string][]Fault
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&body); err != nil {
		writeParamError(w, "faults", `Send {"meter_events": ["fail"|"ratelimit"|"timeout-after-write"], "event_summaries": [...], "meter_event_adjustments": [...]}.`)
		return
	}
	endpoints := make([]string, 0, len(body))
	for e := range body {
		endpoints = append(endpoints, e)
	}
	sort.Strings(endpoints)
	for _, e := range endpoints {
		s.FailNext(e, body[e]...)
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) postDrift(w http.ResponseWriter, r *http.Request) {
	var body struct {
		EventName string `json:"event_name"`
		Customer  string `json:"customer"`
		Value     int64  `json:"value"`
		Timestamp int64  `json:"timestamp"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&body); err != nil || body.EventName == "" || body.Customer == "" {
		writeParamError(w, "drift", `Send {"event_name", "customer", "value", "timestamp"?}.`)
		return
	}
	at := time.Unix(body.Timestamp, 0)
	if body.Timestamp == 0 {
		at = s.now()
	}
	s.Drift(body.EventName, body.Customer, body.Value, at)
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) putLag(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Seconds int `json:"seconds"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&body); err != nil || body.Seconds < 0 {
		writeParamError(w, "seconds", `Send {"seconds": n}.`)
		return
	}
	s.SetLag(time.Duration(body.Seconds) * time.Second)
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_standin")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers in Stripe's error shape: {"error": {"type", "code", "message", "param"?}}.
func writeError(w http.ResponseWriter, status int, typ, code, message string) {
	body := map[string]string{"type": typ, "message": message}
	if code != "" {
		body["code"] = code
	}
	writeJSON(w, status, map[string]any{"error": body})
}

func writeParamError(w http.ResponseWriter, param, message string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{
		"type": "invalid_request_error", "code": "parameter_invalid", "message": message, "param": param,
	}})
}
