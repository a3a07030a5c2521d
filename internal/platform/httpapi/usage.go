package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
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
	body, err := a.usageOf(r.Context(), acct, feature, c)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, body)
}

// usageOf is an account's usage of a feature in a cycle, as GET /v1/usage shows it.
func (a *API) usageOf(ctx context.Context, acct accounts.Account, feature string, c cycle.Cycle) (usageBody, error) {
	totals, err := a.deps.Usage.Read(ctx, acct.ID, feature, c.Label())
	if err != nil {
		return usageBody{}, err
	}
	// The limit the next admission is held to: the plan's, or the provider's entitlement when
	// limits come from the provider (FERRY_LIMITS_SOURCE=kinde).
	limit := acct.Limit(feature, a.deps.Catalog)
	if a.deps.Limits != nil {
		if limit, err = a.deps.Limits.Limit(ctx, acct, feature); err != nil {
			return usageBody{}, err
		}
	}
	var grants []grantBody
	if a.deps.Catalog.Allowance(feature) {
		// An allowance's limit is the sum of the cycle's grant rows. The rows the account's plan
		// still needs (a cycle's opening, the top-up of a plan the operator set) show as pending.
		view, err := a.deps.Allowances.Show(ctx, acct, feature, c.Label())
		if err != nil {
			return usageBody{}, err
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
	return usageBody{
		Feature: feature, Cycle: c.Label(), Limit: limit, Used: totals.Used, Held: totals.Held,
		Remaining: limit.Remaining(totals.Used + totals.Held), Corrections: totals.Corrections, Grants: grants,
	}, nil
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
