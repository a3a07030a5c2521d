package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/ferrymeter/ferry/internal/allowance"
	"github.com/ferrymeter/ferry/internal/cycle"
	"github.com/ferrymeter/ferry/internal/plans"
)

func (a *API) getUsage(w http.ResponseWriter, r *http.Request) error {
	acct := a.account(r)
	q := r.URL.Query()
	feature, sent, err := queryParam(q, "feature")
	if err != nil {
		return err
	}
	if !sent {
		feature = plans.FeatureEvents
	}
	if !a.deps.Catalog.HasFeature(feature) {
		return badRequest(fmt.Sprintf("Unknown feature %q; known: %s.", feature, strings.Join(a.deps.Catalog.Features(), ", ")))
	}
	c := acct.CycleAt(a.deps.Now())
	label, sent, err := queryParam(q, "cycle")
	if err != nil {
		return err
	}
	if sent {
		parsed, err := cycle.Parse(label, acct.AgreementDay)
		if err != nil {
			return badRequest(err.Error())
		}
		c = parsed
	}
	totals, err := a.deps.Usage.Read(r.Context(), acct.ID, feature, c.Label())
	if err != nil {
		return err
	}
	// The limit the next admission is held to: the plan's, or the provider's entitlement when
	// limits come from the provider (FERRY_LIMITS_SOURCE=kinde).
	limit := acct.Limit(feature, a.deps.Catalog)
	if a.deps.Limits != nil {
		if limit, err = a.deps.Limits.Limit(r.Context(), acct, feature); err != nil {
			return err
		}
	}
	var grants []grantBody
	if a.deps.Catalog.Allowance(feature) {
		// An allowance's limit is the sum of the cycle's grant rows. The rows the account's plan
		// still needs (a cycle's opening, the top-up of a plan the operator set) show as pending.
		view, err := a.deps.Allowances.Show(r.Context(), acct, feature, c.Label())
		if err != nil {
			return err
		}
		limit = view.Limit
		grants = make([]grantBody, 0, len(view.Grants)+len(view.Pending))
		for i, g := range append(append([]allowance.Grant(nil), view.Grants...), view.Pending...) {
			b := grantBody{Plan: g.Plan, Amount: g.Amount, Reason: string(g.Reason), EventID: g.EventID, Pending: i >= len(view.Grants)}
			if g.GrantedAtMs != 0 {
				b.GrantedAt = rfc3339(g.GrantedAtMs)
			}
			grants = append(grants, b)
		}
	}
	return writeJSON(w, http.StatusOK, usageBody{
		Feature: feature, Cycle: c.Label(), Limit: limit, Used: totals.Used, Held: totals.Held,
		Remaining: limit.Remaining(totals.Used + totals.Held), Corrections: totals.Corrections, Grants: grants,
	})
}

// queryParam reads an optional query parameter that may be sent once. Sent empty or twice, it
// is refused rather than read as absent or as one of its values.
func queryParam(q url.Values, name string) (value string, sent bool, err error) {
	values, sent := q[name]
	switch {
	case !sent:
		return "", false, nil
	case len(values) > 1:
		return "", true, badRequest(fmt.Sprintf("%s is sent %d times; send it once", name, len(values)))
	case values[0] == "":
		return "", true, badRequest(fmt.Sprintf("%s is empty; leave it out for the default", name))
	}
	return values[0], true, nil
}

// grantBody is one grant row of an allowance's cycle.
type grantBody struct {
	Plan      string `json:"plan"`
	Amount    int64  `json:"amount"`
	Reason    string `json:"reason"`
	EventID   string `json:"eventId,omitempty"`
	GrantedAt string `json:"grantedAt,omitempty"`
	// Pending marks a row the account's plan needs that is not stored yet (it counts; the next
	// admission writes it).
	Pending bool `json:"pending,omitempty"`
}
