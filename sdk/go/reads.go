package ferry

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"sort"
	"time"
)

// get sends a GET and decodes its answer into out.
func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	k := &call{method: http.MethodGet, path: path, query: q}
	_, err := c.do(ctx, k, out)
	return err
}

// mutate sends a mutating call (one Idempotency-Key for all its attempts) and decodes its
// answer into out.
func (c *Client) mutate(ctx context.Context, method, path string, body, out any) error {
	k, err := newCall(method, path, body)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, k, out)
	return err
}

// setQuery sets a query parameter from an optional value.
func setQuery[T any](q url.Values, name string, v *T) {
	if v != nil {
		q.Set(name, fmt.Sprint(*v))
	}
}

// page is one page of a listing.
type page[T any] struct {
	Items []T     `json:"items"`
	Next  *string `json:"next"`
}

// maxPages bounds one iteration: 10,000 pages of up to 100 items.
const maxPages = 10_000

// pages iterates over a listing's items, page after page, until a page has no next cursor.
// An error ends the iteration after it is yielded.
func pages[T any](ctx context.Context, c *Client, path string, q url.Values) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		q := cloneValues(q)
		for range maxPages {
			var p page[T]
			if err := c.get(ctx, path, q, &p); err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, item := range p.Items {
				if !yield(item, nil) {
					return
				}
			}
			if p.Next == nil || *p.Next == "" {
				return
			}
			q.Set("cursor", *p.Next)
		}
		var zero T
		yield(zero, fmt.Errorf("ferry: %s: more than %d pages", path, maxPages))
	}
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, vs := range q {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// Usage reads the account's usage of a feature in a cycle (GET /v1/usage): the feature's limit,
// what is used and held, and what remains (a nil limit or remaining is unlimited).
func (c *Client) Usage(ctx context.Context, params GetUsageParams) (*Usage, error) {
	q := url.Values{}
	setQuery(q, "feature", params.Feature)
	setQuery(q, "cycle", params.Cycle)
	var out Usage
	if err := c.get(ctx, "/v1/usage", q, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// QueryUsage reads a meter's usage over [From, To) by window (GET /v1/usage/query): MINUTE,
// HOUR, DAY in an IANA zone (Tz) or CYCLE, grouped by GroupBy's dimensions and kept to Filter's
// values. The answer has one row per window and group with usage, ordered by window, then group;
// a row with Other set counts groups an hour had no room to keep by name. Bad parameters the
// server refuses as an *InvalidRequestError listing every problem; a required parameter left out
// or one given empty is refused here, before anything is sent.
func (c *Client) QueryUsage(ctx context.Context, params QueryUsageParams) (*UsageQuery, error) {
	q, err := usageQueryValues(params)
	if err != nil {
		return nil, err
	}
	var out UsageQuery
	if err := c.get(ctx, "/v1/usage/query", q, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// usageQueryValues encodes the usage query's parameters: the instants in RFC 3339 as given (their
// offsets kept), each filter as filter[<dimension>]. Ferry refuses an empty parameter, so one
// given empty is an error here, with every other problem at once, rather than sent or dropped:
// dropping tz or groupBy would answer a different query than the one asked.
func usageQueryValues(p QueryUsageParams) (url.Values, error) {
	var problems []error
	q := url.Values{}
	required := func(name, v string) {
		if v == "" {
			problems = append(problems, fmt.Errorf("%s is required", name))
			return
		}
		q.Set(name, v)
	}
	required("meter", p.Meter)
	required("window", string(p.Window))
	for _, t := range []struct {
		name string
		at   time.Time
	}{{"from", p.From}, {"to", p.To}} {
		if t.at.IsZero() {
			problems = append(problems, fmt.Errorf("%s is required", t.name))
			continue
		}
		q.Set(t.name, t.at.Format(time.RFC3339Nano))
	}
	optional := func(name string, v *string, absent string) {
		switch {
		case v == nil:
		case *v == "":
			problems = append(problems, fmt.Errorf("%s is empty; leave it nil for %s", name, absent))
		default:
			q.Set(name, *v)
		}
	}
	optional("tz", p.Tz, "UTC")
	optional("groupBy", p.GroupBy, "one row a window")
	optional("account", p.Account, "the key's own account")
	if p.Filter != nil {
		dims := make([]string, 0, len(*p.Filter))
		for dim := range *p.Filter {
			dims = append(dims, dim)
		}
		sort.Strings(dims)
		for _, dim := range dims {
			v := (*p.Filter)[dim]
			switch {
			case dim == "":
				problems = append(problems, errors.New("a filter names an empty dimension"))
			case v == "":
				problems = append(problems, fmt.Errorf("filter[%s] is empty; Ferry filters on a value, so leave the dimension out", dim))
			default:
				q.Set("filter["+dim+"]", v)
			}
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("ferry: query usage: %w", errors.Join(problems...))
	}
	return q, nil
}

// BillingEvents iterates over the stored billing events, newest first (GET /v1/billing-events):
// the account's own, or with the operator key every account's (or params.Account's).
func (c *Client) BillingEvents(ctx context.Context, params ListBillingEventsParams) iter.Seq2[BillingEvent, error] {
	q := url.Values{}
	setQuery(q, "account", params.Account)
	setQuery(q, "status", params.Status)
	setQuery(q, "cursor", params.Cursor)
	setQuery(q, "limit", params.Limit)
	return pages[BillingEvent](ctx, c, "/v1/billing-events", q)
}

// GetBillingEvent reads a stored billing event with its receipts.
func (c *Client) GetBillingEvent(ctx context.Context, id string) (*BillingEventWithReceipts, error) {
	var out BillingEventWithReceipts
	if err := c.get(ctx, "/v1/billing-events/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReplayBillingEvent puts a stored billing event back to RECEIVED, for the worker to apply again.
func (c *Client) ReplayBillingEvent(ctx context.Context, id string) (*BillingEvent, error) {
	var out BillingEvent
	if err := c.mutate(ctx, http.MethodPost, "/v1/billing-events/"+url.PathEscape(id)+"/replay", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
