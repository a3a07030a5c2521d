package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/ferrymeter/ferry/internal/cycle"
	"github.com/ferrymeter/ferry/internal/plans"
)

func (a *API) getUsage(w http.ResponseWriter, r *http.Request) error {
	acct := a.account(r)
	q := r.URL.Query()
	feature := q.Get("feature")
	if feature == "" {
		feature = plans.FeatureEvents
	}
	if !a.deps.Catalog.HasFeature(feature) {
		return badRequest(fmt.Sprintf("Unknown feature %q; known: %s.", feature, strings.Join(a.deps.Catalog.Features(), ", ")))
	}
	c := acct.CycleAt(a.deps.Now())
	if label := q.Get("cycle"); label != "" {
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
	return writeJSON(w, http.StatusOK, usageBody{
		Feature: feature, Cycle: c.Label(), Limit: limit, Used: totals.Used, Held: totals.Held,
		Remaining: limit.Remaining(totals.Used + totals.Held), Corrections: totals.Corrections,
	})
}
