package ferry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// usageQueryAnswer is a usage query's answer: a named group's row and an other row.
const usageQueryAnswer = `{"account":"acct_1","meter":"tokens_in","aggregation":"SUM","window":"DAY",
 "from":"2026-10-31T23:00:00Z","to":"2026-11-01T23:00:00Z","tz":"Europe/Paris","groupBy":["model"],"filter":{"region":"eu"},
 "rows":[{"windowStart":"2026-10-31T23:00:00Z","windowEnd":"2026-11-01T23:00:00Z","group":{"model":"gpt-4"},"value":1532},
         {"windowStart":"2026-10-31T23:00:00Z","windowEnd":"2026-11-01T23:00:00Z","group":{},"other":true,"value":7}]}`

func TestQueryUsage_EveryParameter_SentOnceAndTheRowsDecoded(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){jsonAnswer(200, usageQueryAnswer)}}
	c := newTestClient(t, s, Config{})
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	tz, groupBy, account := "Europe/Paris", "model", "acct_1"
	got, err := c.QueryUsage(context.Background(), QueryUsageParams{
		Meter: "tokens_in", Window: QueryUsageParamsWindowDAY,
		// A day's first instant in the zone, written with the zone's offset: sent as given.
		From: time.Date(2026, 11, 1, 0, 0, 0, 0, paris), To: time.Date(2026, 11, 2, 0, 0, 0, 0, paris),
		Tz: &tz, GroupBy: &groupBy, Filter: &map[string]string{"region": "eu"}, Account: &account,
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.recorded()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	const wantQuery = "account=acct_1&filter%5Bregion%5D=eu&from=2026-11-01T00%3A00%3A00%2B01%3A00&groupBy=model&meter=tokens_in" +
		"&to=2026-11-02T00%3A00%3A00%2B01%3A00&tz=Europe%2FParis&window=DAY"
	if r.method != http.MethodGet || r.path != "/v1/usage/query" || r.rawQuery != wantQuery {
		t.Fatalf("sent %s %s?%s\nwant GET /v1/usage/query?%s", r.method, r.path, r.rawQuery, wantQuery)
	}
	if r.header.Get("Authorization") != "Bearer fk_test" || r.header.Get("Accept") != "application/json, application/problem+json" ||
		!strings.HasSuffix(r.userAgent, "ferry-go/"+Version) {
		t.Fatalf("headers %v", r.header)
	}
	// A read is no mutation: no Idempotency-Key, and no body to declare.
	if r.idempotencyKey != "" || r.header.Get("Content-Type") != "" || len(r.body) != 0 {
		t.Fatalf("a GET sent Idempotency-Key %q, Content-Type %q, body %q", r.idempotencyKey, r.header.Get("Content-Type"), r.body)
	}
	start := time.Date(2026, 10, 31, 23, 0, 0, 0, time.UTC)
	if got.Account != "acct_1" || got.Meter != "tokens_in" || got.Aggregation != UsageQueryAggregationSUM || got.Window != UsageQueryWindowDAY ||
		got.Tz == nil || *got.Tz != "Europe/Paris" || !got.From.Equal(start) || len(got.GroupBy) != 1 || got.Filter["region"] != "eu" {
		t.Fatalf("answer %+v", got)
	}
	if len(got.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(got.Rows))
	}
	named, other := got.Rows[0], got.Rows[1]
	if named.Group["model"] != "gpt-4" || named.Value != 1532 || named.Other != nil || !named.WindowStart.Equal(start) ||
		!named.WindowEnd.Equal(start.Add(24*time.Hour)) {
		t.Fatalf("the named group's row %+v", named)
	}
	if other.Other == nil || !*other.Other || len(other.Group) != 0 || other.Value != 7 {
		t.Fatalf("the other row %+v", other)
	}
}

func TestQueryUsage_OnlyTheRequired_SendsNothingElse(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){jsonAnswer(200, `{"account":"acct_1","meter":"events",
		"aggregation":"COUNT","window":"HOUR","from":"2026-11-01T10:00:00Z","to":"2026-11-01T12:00:00Z","groupBy":[],"filter":{},"rows":[]}`)}}
	c := newTestClient(t, s, Config{})
	from := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	got, err := c.QueryUsage(context.Background(), QueryUsageParams{Meter: "events", Window: QueryUsageParamsWindowHOUR, From: from, To: from.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	const want = "from=2026-11-01T10%3A00%3A00Z&meter=events&to=2026-11-01T12%3A00%3A00Z&window=HOUR"
	if q := s.recorded()[0].rawQuery; q != want {
		t.Fatalf("sent ?%s\nwant ?%s", q, want)
	}
	if got.Rows == nil || len(got.Rows) != 0 || got.Tz != nil {
		t.Fatalf("an answer without usage: %+v", got)
	}
}

// Ferry refuses an empty parameter, and dropping one would answer another query (a day in UTC
// rather than in the zone meant): both are refused before a request is made.
func TestQueryUsage_MissingOrEmptyParameters_RefusedBeforeSending(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	valid := func() QueryUsageParams {
		return QueryUsageParams{Meter: "tokens_in", Window: QueryUsageParamsWindowDAY, From: from, To: from.Add(24 * time.Hour)}
	}
	empty := ""
	for _, tc := range []struct {
		name   string
		change func(*QueryUsageParams)
		want   []string
	}{
		{"nothing", func(p *QueryUsageParams) { *p = QueryUsageParams{} }, []string{"meter is required", "window is required", "from is required", "to is required"}},
		{"meter", func(p *QueryUsageParams) { p.Meter = "" }, []string{"meter is required"}},
		{"from", func(p *QueryUsageParams) { p.From = time.Time{} }, []string{"from is required"}},
		{"tz empty", func(p *QueryUsageParams) { p.Tz = &empty }, []string{"tz is empty"}},
		{"groupBy empty", func(p *QueryUsageParams) { p.GroupBy = &empty }, []string{"groupBy is empty"}},
		{"account empty", func(p *QueryUsageParams) { p.Account = &empty }, []string{"account is empty"}},
		{"filter value empty", func(p *QueryUsageParams) { p.Filter = &map[string]string{"region": ""} }, []string{"filter[region] is empty"}},
		{"filter dimension empty", func(p *QueryUsageParams) { p.Filter = &map[string]string{"": "eu"} }, []string{"empty dimension"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){jsonAnswer(200, usageQueryAnswer)}}
			c := newTestClient(t, s, Config{})
			p := valid()
			tc.change(&p)
			got, err := c.QueryUsage(context.Background(), p)
			if err == nil {
				t.Fatalf("took %+v and answered %+v", p, got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if n := len(s.recorded()); n != 0 {
				t.Fatalf("%d requests sent for refused parameters", n)
			}
		})
	}
}

func TestQueryUsage_ServersRefusal_TypedAndNotRetried(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){problemAnswer(400, "invalid-request",
		`,"errors":["from 2026-11-01T00:30:00Z is not aligned to an hour (the nearest: 2026-11-01T00:00:00Z)"]`)}}
	c := newTestClient(t, s, Config{MaxAttempts: 5})
	from := time.Date(2026, 11, 1, 0, 30, 0, 0, time.UTC)
	_, err := c.QueryUsage(context.Background(), QueryUsageParams{Meter: "events", Window: QueryUsageParamsWindowHOUR, From: from, To: from.Add(time.Hour)})
	var ir *InvalidRequestError
	if !errors.As(err, &ir) || ir.Status != 400 || len(ir.Errors) != 1 || !strings.Contains(ir.Errors[0], "not aligned") {
		t.Fatalf("err %#v, want *InvalidRequestError with the server's field error", err)
	}
	if n := len(s.recorded()); n != 1 {
		t.Fatalf("%d attempts of a 400, want 1", n)
	}
}
