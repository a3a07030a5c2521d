package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
)

// usageDefaultWindows is how many windows `ferry usage` shows when no range is given, by window:
// the last hour of minutes, the last day of hours, the last week of days, the last three cycles.
var usageDefaultWindows = map[rollup.Window]int{rollup.Minute: 60, rollup.Hour: 24, rollup.Day: 7, rollup.Cycle: 3}

// usageAnswer is GET /v1/usage/query's answer, as the CLI reads it.
type usageAnswer struct {
	Account     string            `json:"account"`
	Meter       string            `json:"meter"`
	Aggregation string            `json:"aggregation"`
	Window      string            `json:"window"`
	From        time.Time         `json:"from"`
	To          time.Time         `json:"to"`
	TZ          string            `json:"tz"`
	GroupBy     []string          `json:"groupBy"`
	Filter      map[string]string `json:"filter"`
	Rows        []struct {
		WindowStart time.Time         `json:"windowStart"`
		WindowEnd   time.Time         `json:"windowEnd"`
		Group       map[string]string `json:"group"`
		Other       bool              `json:"other"`
		Value       int64             `json:"value"`
	} `json:"rows"`
}

// runUsage prints a meter's usage over a range, by window, as GET /v1/usage/query answers it:
// one line per window and group.
func runUsage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := operatorClient(fs)
	account := fs.String("account", "", "the account (required)")
	meter := fs.String("meter", "events", "the meter")
	window := fs.String("window", string(rollup.Day), "MINUTE, HOUR, DAY or CYCLE")
	from := fs.String("from", "", "the range's first instant, RFC 3339, aligned to the window (default: the last hour of minutes, day of hours, week of days or three cycles)")
	to := fs.String("to", "", "the instant after the range, RFC 3339 (default: the end of the current window)")
	tz := fs.String("tz", "", "the IANA time zone of DAY windows (default UTC)")
	groupBy := fs.String("group-by", "", "dimensions to group by, comma-separated")
	filters := map[string]string{}
	fs.Func("filter", "dimension=value: keep only that value of the dimension (repeatable)", func(s string) error {
		dim, value, ok := strings.Cut(s, "=")
		if !ok || dim == "" || value == "" {
			return errors.New("a filter is dimension=value")
		}
		if _, twice := filters[dim]; twice {
			return fmt.Errorf("dimension %s is filtered twice", dim)
		}
		filters[dim] = value
		return nil
	})
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *account == "" {
		return errors.New("--account is required")
	}
	c := newOpClient(*base)
	q := url.Values{"account": {*account}, "meter": {*meter}, "window": {*window}}
	if *tz != "" {
		q.Set("tz", *tz)
	}
	if *groupBy != "" {
		q.Set("groupBy", *groupBy)
	}
	for dim, v := range filters {
		q.Set("filter["+dim+"]", v)
	}
	if *from == "" || *to == "" {
		anchor := 0
		if rollup.Window(*window) == rollup.Cycle {
			var acct struct {
				AgreementStart *int `json:"agreementStart"`
			}
			if err := c.call(ctx, http.MethodGet, "/v1/accounts/"+url.PathEscape(*account), nil, &acct); err != nil {
				return err
			}
			if acct.AgreementStart != nil {
				anchor = *acct.AgreementStart
			}
		}
		f, t, err := defaultUsageRange(rollup.Window(*window), *tz, anchor, time.Now())
		if err != nil {
			return err
		}
		if *from == "" {
			*from = f.Format(time.RFC3339)
		}
		if *to == "" {
			*to = t.Format(time.RFC3339)
		}
	}
	q.Set("from", *from)
	q.Set("to", *to)
	var raw json.RawMessage
	if err := c.call(ctx, http.MethodGet, "/v1/usage/query?"+q.Encode(), nil, &raw); err != nil {
		return err
	}
	if *asJSON {
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, raw, "", "  ")
		fmt.Fprintln(stdout, pretty.String())
		return nil
	}
	var ans usageAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return err
	}
	return printUsageTable(stdout, ans)
}

// defaultUsageRange is the range `ferry usage` shows without one: usageDefaultWindows windows
// ending with the one holding now.
func defaultUsageRange(w rollup.Window, tz string, anchor int, now time.Time) (time.Time, time.Time, error) {
	loc := time.UTC
	if tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("--tz %q is not an IANA time zone name", tz)
		}
	}
	n := usageDefaultWindows[w]
	switch w {
	case rollup.Minute, rollup.Hour:
		unit := time.Minute
		if w == rollup.Hour {
			unit = time.Hour
		}
		end := now.UTC().Truncate(unit).Add(unit)
		return end.Add(-time.Duration(n) * unit), end, nil
	case rollup.Day:
		// Local midnights, as the query aligns them (a zone whose midnight a clock change skips
		// starts its day at the change: the query names the instant if this misses it).
		y, m, d := now.In(loc).Date()
		return time.Date(y, m, d-n+1, 0, 0, 0, 0, loc).UTC(), time.Date(y, m, d+1, 0, 0, 0, 0, loc).UTC(), nil
	case rollup.Cycle:
		c := cycle.At(now, anchor)
		start := c.Start
		for range n - 1 {
			start = cycle.At(start.Add(-time.Nanosecond), anchor).Start
		}
		return start, c.End, nil
	}
	return time.Time{}, time.Time{}, fmt.Errorf("--window %q is not one of MINUTE, HOUR, DAY, CYCLE", w)
}

// printUsageTable prints the answer as a table: a line per window and group, windows in the query's
// zone (DAY) or UTC.
func printUsageTable(w io.Writer, ans usageAnswer) error {
	loc := time.UTC
	if ans.TZ != "" {
		if l, err := time.LoadLocation(ans.TZ); err == nil {
			loc = l
		}
	}
	zone := "UTC"
	if ans.TZ != "" {
		zone = ans.TZ
	}
	fmt.Fprintf(w, "%s (%s) of %s, %s windows in %s, from %s to %s", ans.Meter, ans.Aggregation, ans.Account, ans.Window, zone,
		ans.From.In(loc).Format(time.RFC3339), ans.To.In(loc).Format(time.RFC3339))
	if len(ans.Filter) > 0 {
		var f []string
		for _, dim := range sortedNames(ans.Filter) {
			f = append(f, dim+"="+ans.Filter[dim])
		}
		fmt.Fprintf(w, ", where %s", strings.Join(f, ", "))
	}
	fmt.Fprintln(w)
	if len(ans.Rows) == 0 {
		fmt.Fprintln(w, "no usage in the range")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := []string{"window start", "window end"}
	header = append(header, ans.GroupBy...)
	// Without a grouping, a row of groups the hours had no room for is told apart all the same.
	otherColumn := false
	for _, r := range ans.Rows {
		otherColumn = otherColumn || r.Other && len(ans.GroupBy) == 0
	}
	if otherColumn {
		header = append(header, "groups")
	}
	fmt.Fprintln(tw, strings.Join(append(header, "value"), "\t"))
	layout := "2006-01-02 15:04"
	if ans.Window == string(rollup.Day) || ans.Window == string(rollup.Cycle) {
		layout = "2006-01-02 15:04 MST"
	}
	for _, r := range ans.Rows {
		line := []string{r.WindowStart.In(loc).Format(layout), r.WindowEnd.In(loc).Format(layout)}
		for _, dim := range ans.GroupBy {
			v := r.Group[dim]
			switch {
			case r.Other:
				v = "(other)"
			case v == "":
				v = "(none)"
			}
			line = append(line, v)
		}
		if otherColumn {
			line = append(line, map[bool]string{true: "(other)", false: "(named)"}[r.Other])
		}
		fmt.Fprintln(tw, strings.Join(append(line, fmt.Sprint(r.Value)), "\t"))
	}
	return tw.Flush()
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
