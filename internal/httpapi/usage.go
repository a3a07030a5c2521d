package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

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
	limit := acct.Limit(feature, a.deps.Catalog)
	return writeJSON(w, http.StatusOK, usageBody{
		Feature: feature, Cycle: c.Label(), Limit: limit, Used: totals.Used, Held: totals.Held,
		Remaining: limit.Remaining(totals.Used + totals.Held),
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
