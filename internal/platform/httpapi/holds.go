package httpapi

import (
	"net/http"

	"github.com/ferrymeter/ferry/internal/holds"
)

// holdBody is a hold as the API shows it.
type holdBody struct {
	ID             string       `json:"id"`
	Key            string       `json:"key"`
	Feature        string       `json:"feature"`
	Cycle          string       `json:"cycle"`
	Amount         int64        `json:"amount"`
	Used           int64        `json:"used"`
	Status         holds.Status `json:"status"`
	LeaseExpiresAt string       `json:"leaseExpiresAt"`
	CreatedAt      string       `json:"createdAt"`
	Charged        *int64       `json:"charged,omitempty"`
	Released       *int64       `json:"released,omitempty"`
	SettledAt      string       `json:"settledAt,omitempty"`
}

func newHoldBody(h holds.Hold) holdBody {
	b := holdBody{
		ID: h.ID, Key: h.Key, Feature: h.Feature, Cycle: h.Cycle, Amount: h.Amount, Used: h.Used,
		Status: h.Status, LeaseExpiresAt: rfc3339(h.LeaseExpiresAtMs), CreatedAt: rfc3339(h.CreatedAtMs),
	}
	if h.Status.Final() {
		charged, released := h.Charged, h.Released
		b.Charged, b.Released, b.SettledAt = &charged, &released, rfc3339(h.SettledAtMs)
	}
	return b
}

type reserveRequest struct {
	Key     string `json:"key" jsonbody:"required"`
	Feature string `json:"feature" jsonbody:"required"`
	Amount  int64  `json:"amount" jsonbody:"required"`
}

// reserveHold is POST /v1/holds: 201 for a new hold, 200 for the hold a repeated key names.
func (a *API) reserveHold(w http.ResponseWriter, r *http.Request) error {
	var req reserveRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	h, created, err := a.deps.Holds.Reserve(r.Context(), a.account(r), holds.ReserveInput{
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
	return writeJSON(w, status, newHoldBody(h))
}

// getHold is GET /v1/holds/{id}. Another account's hold is a 404, like one that never existed.
func (a *API) getHold(w http.ResponseWriter, r *http.Request) error {
	h, err := a.deps.Holds.Get(r.Context(), a.account(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newHoldBody(h))
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
func (a *API) chargeHold(w http.ResponseWriter, r *http.Request) error {
	var req chargeRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	st, err := a.deps.Holds.Charge(r.Context(), a.account(r), holds.ChargeInput{
		HoldID: r.PathValue("id"), Key: req.Key, Amount: req.Amount,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, chargeBody{
		Charged: st.Charged, Capped: st.Capped, Used: st.Used, Amount: st.Amount, Status: st.Status,
		LeaseExpiresAt: rfc3339(st.LeaseExpiresAtMs),
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
func (a *API) settleHold(w http.ResponseWriter, r *http.Request) error {
	var req settleRequest
	if err := decodeOptionalJSON(r, &req); err != nil {
		return err
	}
	st, err := a.deps.Holds.Settle(r.Context(), a.account(r), holds.SettleInput{HoldID: r.PathValue("id"), Used: req.Used})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, settleBody{
		ID: st.HoldID, Status: st.Status, Used: st.Used, Charged: st.Charged, Released: st.Released,
	})
}
