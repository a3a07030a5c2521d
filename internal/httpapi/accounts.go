package httpapi

import (
	"net/http"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/plans"
)

// accountBody is an account as the API shows it: effective limits (the plan's, overridden by
// the account's), never the key.
type accountBody struct {
	ID             string                 `json:"id"`
	Plan           string                 `json:"plan"`
	Status         accounts.Status        `json:"status"`
	Limits         map[string]plans.Limit `json:"limits"`
	AgreementStart *int                   `json:"agreementStart"`
	CreatedAt      string                 `json:"createdAt"`
	APIKey         string                 `json:"apiKey,omitempty"`
}

func (a *API) accountBody(acct accounts.Account) accountBody {
	b := accountBody{
		ID: acct.ID, Plan: acct.Plan, Status: acct.Status,
		Limits: acct.EffectiveLimits(a.deps.Catalog), CreatedAt: rfc3339(acct.CreatedAtMs),
	}
	if acct.AgreementDay != 0 {
		day := acct.AgreementDay
		b.AgreementStart = &day
	}
	return b
}

type createAccountRequest struct {
	ID     string                 `json:"id" jsonbody:"required"`
	Plan   string                 `json:"plan"`
	Status accounts.Status        `json:"status"`
	Limits map[string]plans.Limit `json:"limits"`
}

func (a *API) createAccount(w http.ResponseWriter, r *http.Request) error {
	var req createAccountRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	acct, key, err := a.deps.Accounts.Create(r.Context(), accounts.CreateInput{
		ID: req.ID, Plan: req.Plan, Status: req.Status, Limits: req.Limits,
	})
	if err != nil {
		return err
	}
	body := a.accountBody(acct)
	body.APIKey = key
	w.Header().Set("Location", "/v1/accounts/"+acct.ID)
	return writeJSON(w, http.StatusCreated, body)
}

type updateAccountRequest struct {
	Plan           *string                 `json:"plan"`
	Status         *accounts.Status        `json:"status"`
	Limits         *map[string]plans.Limit `json:"limits"`
	AgreementStart *int                    `json:"agreementStart"`
}

func (a *API) updateAccount(w http.ResponseWriter, r *http.Request) error {
	var req updateAccountRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	acct, err := a.deps.Accounts.Update(r.Context(), r.PathValue("id"), accounts.UpdateInput{
		Plan: req.Plan, Status: req.Status, Limits: req.Limits, AgreementDay: req.AgreementStart,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, a.accountBody(acct))
}

func (a *API) getAccount(w http.ResponseWriter, r *http.Request) error {
	acct, err := a.deps.Accounts.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, a.accountBody(acct))
}
