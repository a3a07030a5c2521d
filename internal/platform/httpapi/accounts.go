package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
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
	// The linked provider ids (null when not linked) and the event time of the provider's
	// plan change the account is on (null when no provider event changed it).
	KindeCustomerID  *string `json:"kindeCustomerId"`
	StripeCustomerID *string `json:"stripeCustomerId"`
	KindeAgreementID *string `json:"kindeAgreementId"`
	PlanChangedAt    *string `json:"planChangedAt"`
	APIKey           string  `json:"apiKey,omitempty"`
}

func (a *API) accountBody(acct accounts.Account) accountBody {
	b := accountBody{
		ID: acct.ID, Plan: acct.Plan, Status: acct.Status,
		Limits: acct.EffectiveLimits(a.deps.Catalog), CreatedAt: rfc3339(acct.CreatedAtMs),
		KindeCustomerID: nonEmpty(acct.KindeCustomerID), StripeCustomerID: nonEmpty(acct.StripeCustomerID),
		KindeAgreementID: nonEmpty(acct.KindeAgreementID),
	}
	if acct.AgreementDay != 0 {
		day := acct.AgreementDay
		b.AgreementStart = &day
	}
	if acct.PlanChangedAtMs != 0 {
		t := rfc3339(acct.PlanChangedAtMs)
		b.PlanChangedAt = &t
	}
	return b
}

// nonEmpty is nil for "", so an unset id answers null.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

type createAccountRequest struct {
	ID               string                 `json:"id" jsonbody:"required"`
	Plan             string                 `json:"plan"`
	Status           accounts.Status        `json:"status"`
	Limits           map[string]plans.Limit `json:"limits"`
	KindeCustomerID  *string                `json:"kindeCustomerId"`
	StripeCustomerID *string                `json:"stripeCustomerId"`
	KindeAgreementID *string                `json:"kindeAgreementId"`
}

// links gathers the linked ids a request sets.
func (r createAccountRequest) links() map[accounts.LinkKind]string {
	links := map[accounts.LinkKind]string{}
	for kind, id := range map[accounts.LinkKind]*string{
		accounts.KindeCustomer: r.KindeCustomerID, accounts.StripeCustomer: r.StripeCustomerID, accounts.KindeAgreement: r.KindeAgreementID,
	} {
		if id != nil {
			links[kind] = *id
		}
	}
	return links
}

func (a *API) createAccount(w http.ResponseWriter, r *http.Request) error {
	var req createAccountRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	acct, key, err := a.deps.Accounts.Create(r.Context(), accounts.CreateInput{
		ID: req.ID, Plan: req.Plan, Status: req.Status, Limits: req.Limits, Links: req.links(),
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
	// A linked id: a string links it, null unlinks, absent leaves it.
	KindeCustomerID  linkField `json:"kindeCustomerId" jsonbody:"nullable"`
	StripeCustomerID linkField `json:"stripeCustomerId" jsonbody:"nullable"`
	KindeAgreementID linkField `json:"kindeAgreementId" jsonbody:"nullable"`
}

// linkField is a linked id in a PATCH body, which tells an absent member (no change) from null
// (unlink) and from a string (link this id).
type linkField struct {
	Set bool
	ID  *string
}

// UnmarshalJSON reads null or a string; any other JSON type is an error.
func (f *linkField) UnmarshalJSON(data []byte) error {
	f.Set = true
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(data, &f.ID); err != nil {
		return errors.New("a linked id is a string, or null to unlink it")
	}
	return nil
}

func (r updateAccountRequest) links() map[accounts.LinkKind]*string {
	links := map[accounts.LinkKind]*string{}
	for kind, f := range map[accounts.LinkKind]linkField{
		accounts.KindeCustomer: r.KindeCustomerID, accounts.StripeCustomer: r.StripeCustomerID, accounts.KindeAgreement: r.KindeAgreementID,
	} {
		if f.Set {
			links[kind] = f.ID
		}
	}
	return links
}

func (a *API) updateAccount(w http.ResponseWriter, r *http.Request) error {
	var req updateAccountRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	acct, err := a.deps.Accounts.Update(r.Context(), r.PathValue("id"), accounts.UpdateInput{
		Plan: req.Plan, Status: req.Status, Limits: req.Limits, AgreementDay: req.AgreementStart, Links: req.links(),
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
