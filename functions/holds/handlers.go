package holds

import (
	"net/http"

	"github.com/ferrymeter/ferry/internal/holds"

	"github.com/ferrymeter/ferry/internal/platform/httpapi"
)

// routes serve the usage holds routes.
type routes struct {
	Holds *holds.Service
}

// handlers are the function's route handlers, by route key.
func (a *routes) handlers() httpapi.Handlers {
	return httpapi.Handlers{
		"POST /v1/holds":              a.reserveHold,
		"GET /v1/holds/{id}":          a.getHold,
		"POST /v1/holds/{id}/charges": a.chargeHold,
		"POST /v1/holds/{id}/settle":  a.settleHold,
	}
}

type reserveRequest struct {
	Key     string `json:"key" jsonbody:"required"`
	Feature string `json:"feature" jsonbody:"required"`
	Amount  int64  `json:"amount" jsonbody:"required"`
}

// reserveHold is POST /v1/holds: 201 for a new hold, 200 for the hold a repeated key names.
func (a *routes) reserveHold(w http.ResponseWriter, r *http.Request) error {
	var req reserveRequest
	if err := httpapi.DecodeJSON(r, &req); err != nil {
		return err
	}
	h, created, err := a.Holds.Reserve(r.Context(), httpapi.AccountOf(r), holds.ReserveInput{
		Key: req.Key, Feature: req.Feature, Amount: req.Amount,
	})
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/holds/"+h.ID)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return httpapi.WriteJSON(w, status, holds.BodyOf(h))
}

// getHold is GET /v1/holds/{id}. Another account's hold is a 404, like one that never existed.
func (a *routes) getHold(w http.ResponseWriter, r *http.Request) error {
	h, err := a.Holds.Get(r.Context(), httpapi.AccountOf(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, holds.BodyOf(h))
}

type chargeRequest struct {
	Key    string `json:"key" jsonbody:"required"`
	Amount int64  `json:"amount" jsonbody:"required"`
}

// chargeBody answers a charge step. Amount is what the hold holds, Used what it has recorded.
type chargeBody struct {
	Charged        int64        `json:"charged"`
	Capped         bool         `json:"capped"`
	Used           int64        `json:"used"`
	Amount         int64        `json:"amount"`
	Status         holds.Status `json:"status"`
	LeaseExpiresAt string       `json:"leaseExpiresAt"`
}

// chargeHold is POST /v1/holds/{id}/charges.
func (a *routes) chargeHold(w http.ResponseWriter, r *http.Request) error {
	var req chargeRequest
	if err := httpapi.DecodeJSON(r, &req); err != nil {
		return err
	}
	st, err := a.Holds.Charge(r.Context(), httpapi.AccountOf(r), holds.ChargeInput{
		HoldID: r.PathValue("id"), Key: req.Key, Amount: req.Amount,
	})
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, chargeBody{
		Charged: st.Charged, Capped: st.Capped, Used: st.Used, Amount: st.Amount, Status: st.Status,
		LeaseExpiresAt: httpapi.RFC3339(st.LeaseExpiresAtMs),
	})
}

type settleRequest struct {
	Used *int64 `json:"used"`
}
type settleBody struct {
	ID       string       `json:"id"`
	Status   holds.Status `json:"status"`
	Used     int64        `json:"used"`
	Charged  int64        `json:"charged"`
	Released int64        `json:"released"`
}

// settleHold is POST /v1/holds/{id}/settle; the body is optional.
func (a *routes) settleHold(w http.ResponseWriter, r *http.Request) error {
	var req settleRequest
	if err := httpapi.DecodeOptionalJSON(r, &req); err != nil {
		return err
	}
	st, err := a.Holds.Settle(r.Context(), httpapi.AccountOf(r), holds.SettleInput{HoldID: r.PathValue("id"), Used: req.Used})
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, settleBody{
		ID: st.HoldID, Status: st.Status, Used: st.Used, Charged: st.Charged, Released: st.Released,
	})
}
