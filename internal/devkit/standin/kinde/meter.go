package kinde

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/kinde"
)

// MeterFault is a failure the meter-usage endpoints inject into their next calls.
type MeterFault string

// Meter faults.
const (
	// MeterFail answers 503 without recording anything.
	MeterFail MeterFault = "fail"
	// MeterRateLimit answers 429 with RateLimit-Reset without recording anything.
	MeterRateLimit MeterFault = "ratelimit"
	// MeterTimeoutAfterWrite records the write, then holds the answer back for the hang time, so
	// the caller times out on a write that landed.
	MeterTimeoutAfterWrite MeterFault = "timeout-after-write"
)

// defaultHang is how long a timeout-after-write holds its answer: past the client's 5 s timeout.
const defaultHang = 6 * time.Second

// meterState is the stand-in's meters: one running total per (agreement, feature), the records
// that set it, and the faults queued for the next writes and reads.
type meterState struct {
	totals      map[string]int64
	records     map[string][]kinde.MeterUsageItem
	writeFaults []MeterFault
	readFaults  []MeterFault
	resetSecs   int
	hang        time.Duration
}

func newMeterState() meterState {
	return meterState{
		totals: map[string]int64{}, records: map[string][]kinde.MeterUsageItem{},
		resetSecs: rateLimitResetSeconds, hang: defaultHang,
	}
}

func meterKey(agreement, feature string) string { return agreement + "\x00" + feature }

// FailMeterWrites queues faults for the next meter-usage writes, one per call.
func (s *Server) FailMeterWrites(faults ...MeterFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meters.writeFaults = append(s.meters.writeFaults, faults...)
}

// FailMeterReads queues faults (MeterFail, MeterRateLimit) for the next meter-usage reads.
func (s *Server) FailMeterReads(faults ...MeterFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meters.readFaults = append(s.meters.readFaults, faults...)
}

// SetRateLimitReset sets the RateLimit-Reset (seconds) a meter 429 carries.
func (s *Server) SetRateLimitReset(seconds int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meters.resetSecs = seconds
}

// SetHang sets how long a timeout-after-write holds its answer.
func (s *Server) SetHang(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meters.hang = d
}

// MeterTotal is the running total the stand-in holds for an agreement's feature.
func (s *Server) MeterTotal(agreement, feature string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.meters.totals[meterKey(agreement, feature)]
}

// SetMeterTotal injects drift: it sets a total as if something other than Ferry had written it.
func (s *Server) SetMeterTotal(agreement, feature string, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := meterKey(agreement, feature)
	s.meters.totals[k] = total
	s.meters.records[k] = append(s.meters.records[k], kinde.MeterUsageItem{
		BillingFeatureCode: feature, MeterValue: strconv.FormatInt(total, 10), MeterTypeCode: kinde.MeterTypeAbsolute,
		MeterUsageTimestamp: s.now().UTC().Format(time.RFC3339Nano),
	})
}

func (s *Server) nextFault(queue *[]MeterFault) MeterFault {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(*queue) == 0 {
		return ""
	}
	f := (*queue)[0]
	*queue = (*queue)[1:]
	s.counts.Refused++
	return f
}

func (s *Server) rateLimited(w http.ResponseWriter) {
	s.mu.Lock()
	reset := s.meters.resetSecs
	s.mu.Unlock()
	w.Header().Set("RateLimit-Reset", strconv.Itoa(reset))
	writeErrors(w, http.StatusTooManyRequests, "TOO_MANY_REQUESTS", "Request was throttled.")
}

// recordMeterUsage is POST /api/v1/billing/meter_usage: absolute sets the total, delta adds.
func (s *Server) recordMeterUsage(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts.MeterWrites++
	s.mu.Unlock()
	if s.refuse(w) || !s.authorized(w, r) {
		return
	}
	fault := s.nextFault(&s.meters.writeFaults)
	switch fault {
	case MeterFail:
		writeErrors(w, http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE", "The stand-in is failing on purpose.")
		return
	case MeterRateLimit:
		s.rateLimited(w)
		return
	}
	var req kinde.MeterUsageRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.CustomerAgreementID == "" || req.BillingFeatureCode == "" {
		writeErrors(w, http.StatusBadRequest, "INVALID_REQUEST", "customer_agreement_id, billing_feature_code and meter_value are required.")
		return
	}
	value, err := strconv.ParseInt(req.MeterValue, 10, 64)
	if err != nil || value < 0 {
		writeErrors(w, http.StatusBadRequest, "INVALID_METER_VALUE", "meter_value must be a string holding a non-negative integer.")
		return
	}
	typ := req.MeterTypeCode
	if typ == "" {
		typ = kinde.MeterTypeAbsolute
	}
	if typ != kinde.MeterTypeAbsolute && typ != "delta" {
		writeErrors(w, http.StatusBadRequest, "INVALID_METER_TYPE", `meter_type_code must be "absolute" or "delta".`)
		return
	}
	s.mu.Lock()
	k := meterKey(req.CustomerAgreementID, req.BillingFeatureCode)
	if typ == "delta" {
		s.meters.totals[k] += value
	} else {
		s.meters.totals[k] = value
	}
	s.meters.records[k] = append(s.meters.records[k], kinde.MeterUsageItem{
		BillingFeatureCode: req.BillingFeatureCode, MeterValue: req.MeterValue, MeterTypeCode: typ,
		MeterUsageTimestamp: s.now().UTC().Format(time.RFC3339Nano),
	})
	s.counts.MeterWritesApplied++
	hang := s.meters.hang
	s.mu.Unlock()
	if fault == MeterTimeoutAfterWrite {
		select {
		case <-r.Context().Done():
		case <-time.After(hang):
		}
	}
	writeJSON(w, http.StatusOK, kinde.MeterUsageResponse{Code: "METER_USAGE_RECORDED", Message: "Meter usage recorded"})
}

// readMeterUsage is the (unverified) read of an agreement's feature for the current cycle, in
// the shape kinde.MeterUsageReadResponse describes.
func (s *Server) readMeterUsage(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts.MeterReads++
	s.mu.Unlock()
	if s.refuse(w) || !s.authorized(w, r) {
		return
	}
	switch s.nextFault(&s.meters.readFaults) {
	case MeterFail, MeterTimeoutAfterWrite:
		writeErrors(w, http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE", "The stand-in is failing on purpose.")
		return
	case MeterRateLimit:
		s.rateLimited(w)
		return
	}
	q := r.URL.Query()
	agreement, feature := q.Get("customer_agreement_id"), q.Get("billing_feature_code")
	if agreement == "" {
		writeErrors(w, http.StatusBadRequest, "CUSTOMER_AGREEMENT_ID_REQUIRED", "customer_agreement_id is required.")
		return
	}
	s.mu.Lock()
	records := append([]kinde.MeterUsageItem{}, s.meters.records[meterKey(agreement, feature)]...)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, kinde.MeterUsageReadResponse{Code: "OK", Message: "Success", MeterUsage: records})
}

func (s *Server) putMeterFaults(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Writes               []MeterFault `json:"writes"`
		Reads                []MeterFault `json:"reads"`
		RateLimitResetSecond *int         `json:"rateLimitResetSeconds"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBodyBytes)).Decode(&body); err != nil {
		writeErrors(w, http.StatusBadRequest, "INVALID_BODY", `Send {"writes": ["fail"|"ratelimit"|"timeout-after-write"], "reads": [...], "rateLimitResetSeconds": n}.`)
		return
	}
	s.FailMeterWrites(body.Writes...)
	s.FailMeterReads(body.Reads...)
	if body.RateLimitResetSecond != nil {
		s.SetRateLimitReset(*body.RateLimitResetSecond)
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) putMeterTotal(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Total int64 `json:"total"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBodyBytes)).Decode(&body); err != nil {
		writeErrors(w, http.StatusBadRequest, "INVALID_BODY", `Send {"total": n}.`)
		return
	}
	s.SetMeterTotal(r.PathValue("agreement"), r.PathValue("feature"), body.Total)
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) getMeterTotal(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]int64{"total": s.MeterTotal(r.PathValue("agreement"), r.PathValue("feature"))})
}
