package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// A day of two events and one in the next, written through the rollup package's own write path,
// read back by an account and by the operator.
func TestUsageQuery_AnAccountReadsItsOwn_TheOperatorNamesOne(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_uq", "free", nil)
	other := h.CreateAccount(t, "acct_uq2", "free", nil)
	s := &rollup.Store{DB: h.Env.Clients.DynamoDB, Table: h.Env.Names.Table(resources.TableRollups)}
	var cs []meter.Contribution
	for _, at := range []string{"2026-11-14T08:00:00Z", "2026-11-14T23:59:59Z", "2026-11-15T00:00:00Z"} {
		when, _ := time.Parse(time.RFC3339, at)
		cs = append(cs, meter.Contribution{Meter: "events", Aggregation: meter.Count, AtMs: when.UnixMilli(), Value: 1})
	}
	if err := s.Apply(context.Background(), "acct_uq", cs); err != nil {
		t.Fatal(err)
	}
	q := "/v1/usage/query?meter=events&window=DAY&from=2026-11-14T00:00:00Z&to=2026-11-16T00:00:00Z"
	want := []any{
		map[string]any{"windowStart": "2026-11-14T00:00:00Z", "windowEnd": "2026-11-15T00:00:00Z", "group": map[string]any{}, "value": 2.0},
		map[string]any{"windowStart": "2026-11-15T00:00:00Z", "windowEnd": "2026-11-16T00:00:00Z", "group": map[string]any{}, "value": 1.0},
	}
	for _, c := range []struct{ name, path, key string }{
		{"its own", q, key},
		{"its own, named", q + "&account=acct_uq", key},
		{"the operator's", q + "&account=acct_uq", apptest.AdminKey},
	} {
		r := h.Do(t, http.MethodGet, c.path, c.key, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", c.name, r.Status, r.Body)
		}
		body := r.JSON(t)
		if !reflect.DeepEqual(body["rows"], want) || body["account"] != "acct_uq" || body["aggregation"] != "COUNT" {
			t.Errorf("%s: %s", c.name, r.Body)
		}
	}
	// Another account reads nothing of it: its own usage is empty, A's is not found.
	if r := h.Do(t, http.MethodGet, q, other, nil); r.Status != http.StatusOK || len(r.JSON(t)["rows"].([]any)) != 0 {
		t.Errorf("another account's own: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, http.MethodGet, q+"&account=acct_uq", other, nil); r.Status != http.StatusNotFound {
		t.Errorf("another account naming A: %d %s", r.Status, r.Body)
	}
}

// The query's parameters are read as strictly as every body: each refusal is a 400 naming the
// parameter, with every problem at once.
func TestUsageQuery_StrictParameters(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_us", "free", nil)
	base := "meter=events&window=HOUR&from=2026-11-15T10:00:00Z&to=2026-11-15T12:00:00Z"
	for _, c := range []struct {
		name, query string
		operator    bool
		want        []string
	}{
		{"an unknown parameter", base + "&limit=5", false,
			[]string{`unknown query parameter "limit" (this route takes meter, from, to, window, tz, groupBy, account)`}},
		{"a malformed filter", base + "&filter%5B%5D=x&filter=x", false, []string{
			`unknown query parameter "filter" (this route takes meter, from, to, window, tz, groupBy, account)`,
			`unknown query parameter "filter[]" (this route takes meter, from, to, window, tz, groupBy, account)`}},
		{"a parameter twice", base + "&window=DAY", false, []string{`query parameter "window" is given 2 times`}},
		{"an empty parameter", base + "&tz=", false, []string{`query parameter "tz" is empty; leave it out instead`}},
		{"nothing required", "", false, []string{"from is required", "meter is required", "to is required", "window is required"}},
		{"unreadable values", "meter=nope&window=HOUR&from=yesterday&to=2026-11-15&tz=Mars/Olympus&groupBy=a,,b", false, []string{
			"from is not an RFC 3339 instant (2026-11-01T00:00:00Z)",
			"groupBy is a comma-separated list of dimensions, with no empty one",
			`meter "nope" is no meter of this deployment (its meters: events, tokens)`,
			"to is not an RFC 3339 instant (2026-11-01T00:00:00Z)",
			`tz "Mars/Olympus" is not an IANA time zone name (Europe/Paris, Asia/Kolkata, UTC)`}},
		{"the server's own zone", "meter=events&window=DAY&from=2026-11-15T00:00:00Z&to=2026-11-16T00:00:00Z&tz=Local", false,
			[]string{`tz "Local" is not an IANA time zone name (Europe/Paris, Asia/Kolkata, UTC)`}},
		{"misaligned, past its bound, and on no dimension", "meter=events&window=HOUR&from=2026-11-15T10:30:00Z&to=2026-12-17T00:00:00Z&groupBy=model&filter%5Bregion%5D=eu", false, []string{
			`groupBy names "model", which is no dimension of meter events (it has none)`,
			"filter[region] names no dimension of meter events (it has none)",
			"from must be aligned to a HOUR window: on a whole hour in UTC, such as 2026-11-15T10:00:00Z",
			"to: a HOUR query spans at most 31 days"}},
		{"the operator without an account", base, true, []string{"account is required of the operator: the account whose usage to read"}},
		{"the operator with no account id", base + "&account=a%23b", true, []string{"account is not an account id"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := key
			if c.operator {
				k = apptest.AdminKey
			}
			r := h.Do(t, http.MethodGet, "/v1/usage/query?"+c.query, k, nil)
			if r.Status != http.StatusBadRequest || r.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%d %s %s", r.Status, r.Header.Get("Content-Type"), r.Body)
			}
			var got []string
			for _, e := range r.JSON(t)["errors"].([]any) {
				got = append(got, e.(string))
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("errors:\n%q\nwant\n%q", got, c.want)
			}
		})
	}
	// A zone name is read as the IANA database has it, percent-encoded or not.
	r := h.Do(t, http.MethodGet, "/v1/usage/query?meter=events&window=DAY&tz="+url.QueryEscape("America/St_Johns")+
		"&from=2026-11-15T03:30:00Z&to=2026-11-16T03:30:00Z", key, nil)
	if r.Status != http.StatusOK || r.JSON(t)["tz"] != "America/St_Johns" {
		t.Errorf("a day in St. John's: %d %s", r.Status, r.Body)
	}
}
