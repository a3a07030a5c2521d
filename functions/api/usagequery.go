package api

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// UsageQuerier answers the usage query (rollup.Store does).
type UsageQuerier interface {
	Query(ctx context.Context, in rollup.QueryInput) (rollup.QueryResult, error)
}

// The usage query's parameters: these, and one filter[<dimension>] per dimension filtered on.
var usageQueryParams = []string{"meter", "from", "to", "window", "tz", "groupBy", "account"}

// Bounds of the usage query's parameters.
const (
	// maxZoneNameBytes bounds tz: the longest IANA zone name is 32 bytes.
	maxZoneNameBytes = 64
	filterPrefix     = "filter["
)

// usageQueryBody is the usage query's answer.
type usageQueryBody struct {
	Account     string            `json:"account"`
	Meter       string            `json:"meter"`
	Aggregation string            `json:"aggregation"`
	Window      string            `json:"window"`
	From        string            `json:"from"`
	To          string            `json:"to"`
	TZ          string            `json:"tz,omitempty"`
	GroupBy     []string          `json:"groupBy"`
	Filter      map[string]string `json:"filter"`
	Rows        []usageRowBody    `json:"rows"`
}

// usageRowBody is one window's value for one group.
type usageRowBody struct {
	WindowStart string            `json:"windowStart"`
	WindowEnd   string            `json:"windowEnd"`
	Group       map[string]string `json:"group"`
	// Other marks usage of groups an hour had no room to keep by name (rollup.OtherGroup).
	Other bool  `json:"other,omitempty"`
	Value int64 `json:"value"`
}

// getUsageQuery is GET /v1/usage/query: a meter's usage over a range, by window, grouped and
// filtered on its dimensions, read from its rollups. An account reads its own; the operator
// names the account with account=.
func (a *routes) getUsageQuery(w http.ResponseWriter, r *http.Request) error {
	in, err := a.usageQueryInput(r)
	if err != nil {
		return err
	}
	acct, err := a.queryAccount(r)
	if err != nil {
		return err
	}
	in.Account, in.AgreementDay = acct.ID, acct.AgreementDay
	res, err := a.UsageQuery.Query(r.Context(), in)
	if err != nil {
		return err
	}
	body := usageQueryBody{
		Account: acct.ID, Meter: in.Meter.Name, Aggregation: string(in.Meter.Aggregation), Window: string(in.Window),
		From: in.From.UTC().Format(time.RFC3339), To: in.To.UTC().Format(time.RFC3339),
		GroupBy: in.GroupBy, Filter: in.Filter, Rows: make([]usageRowBody, 0, len(res.Rows)),
	}
	if in.Zone != nil {
		body.TZ = in.Zone.String()
	}
	if body.GroupBy == nil {
		body.GroupBy = []string{}
	}
	if body.Filter == nil {
		body.Filter = map[string]string{}
	}
	for _, row := range res.Rows {
		body.Rows = append(body.Rows, usageRowBody{
			WindowStart: row.Start.UTC().Format(time.RFC3339), WindowEnd: row.End.UTC().Format(time.RFC3339),
			Group: row.Group, Other: row.Other, Value: row.Value,
		})
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// usageQueryInput decodes the query's parameters strictly: each known one at most once and not
// empty, filter[<name>] for filters, nothing else; every problem at once, each naming its
// parameter. What the parameters mean together (alignment, bounds, dimensions) the rollup query
// checks.
func (a *routes) usageQueryInput(r *http.Request) (rollup.QueryInput, error) {
	q := r.URL.Query()
	allowed := append([]string(nil), usageQueryParams...)
	for name := range q {
		if dim, ok := filterName(name); ok && dim != "" {
			allowed = append(allowed, name)
		}
	}
	if err := httpapi.StrictQuery(r, allowed); err != nil {
		return rollup.QueryInput{}, err
	}
	var in rollup.QueryInput
	var problems []string
	required := func(name string) (string, bool) {
		v, ok := q[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is required", name))
			return "", false
		}
		return v[0], true
	}
	if name, ok := required("meter"); ok {
		m, found := a.UsageMeters.Find(name)
		if !found {
			problems = append(problems, fmt.Sprintf("meter %q is no meter of this deployment (its meters: %s)", name, strings.Join(a.UsageMeters.Names(), ", ")))
		}
		in.Meter = m
	}
	for _, b := range []struct {
		name string
		into *time.Time
	}{{"from", &in.From}, {"to", &in.To}} {
		if raw, ok := required(b.name); ok {
			t, err := time.Parse(time.RFC3339, raw)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s is not an RFC 3339 instant (2026-11-01T00:00:00Z)", b.name))
			}
			*b.into = t
		}
	}
	if raw, ok := required("window"); ok {
		in.Window = rollup.Window(raw)
	}
	if raw, ok := q["tz"]; ok {
		loc, err := zoneNamed(raw[0])
		if err != nil {
			problems = append(problems, err.Error())
		}
		in.Zone = loc
	}
	if raw, ok := q["groupBy"]; ok {
		for _, d := range strings.Split(raw[0], ",") {
			if d == "" {
				problems = append(problems, "groupBy is a comma-separated list of dimensions, with no empty one")
				break
			}
			in.GroupBy = append(in.GroupBy, d)
		}
	}
	if p, _ := httpapi.PrincipalFrom(r.Context()); p.Operator {
		switch named, ok := q["account"]; {
		case !ok:
			problems = append(problems, "account is required of the operator: the account whose usage to read")
		case !accounts.ValidID(named[0]):
			problems = append(problems, "account is not an account id")
		}
	}
	for name, values := range q {
		if dim, ok := filterName(name); ok {
			if in.Filter == nil {
				in.Filter = map[string]string{}
			}
			in.Filter[dim] = values[0]
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return rollup.QueryInput{}, problem.Fields(problems)
	}
	return in, nil
}

// filterName reads a filter parameter's dimension: filter[model] → model.
func filterName(param string) (string, bool) {
	if !strings.HasPrefix(param, filterPrefix) || !strings.HasSuffix(param, "]") {
		return "", false
	}
	return param[len(filterPrefix) : len(param)-1], true
}

// zoneNamed is the IANA time zone of that name. "Local" (the server's own zone, which means
// nothing to a client) and names that are no zone are refused.
func zoneNamed(name string) (*time.Location, error) {
	refused := fmt.Errorf("tz %q is not an IANA time zone name (Europe/Paris, Asia/Kolkata, UTC)", name)
	if len(name) > maxZoneNameBytes || name == "Local" {
		return nil, refused
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, refused
	}
	return loc, nil
}

// queryAccount is the account the query reads: the caller's own (naming another is
// errOtherAccount), or for the operator the one account= names, which must exist.
func (a *routes) queryAccount(r *http.Request) (accounts.Account, error) {
	p, _ := httpapi.PrincipalFrom(r.Context())
	named := r.URL.Query().Get("account")
	if !p.Operator {
		if named != "" && named != p.Account.ID {
			return accounts.Account{}, errOtherAccount
		}
		return p.Account, nil
	}
	return a.Accounts.Get(r.Context(), named)
}
