package rollup

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Window is the length of the usage query's windows.
type Window string

// Windows.
const (
	Minute Window = "MINUTE"
	Hour   Window = "HOUR"
	// Day windows are calendar days in the query's time zone (23, 24 or 25 hours where the zone
	// changes its offset).
	Day Window = "DAY"
	// Cycle windows are the account's billing cycles.
	Cycle Window = "CYCLE"
)

// WindowNames lists the windows, shortest first.
var WindowNames = []Window{Minute, Hour, Day, Cycle}

// The ranges a query may span, by window: what one answer reads is bounded by them.
const (
	MaxMinuteRange = 24 * time.Hour
	MaxHourRange   = 31 * 24 * time.Hour
	MaxDays        = 366
	MaxCycles      = 12
)

// Meter is what the query knows of a meter: its name, how it aggregates, and its dimensions in
// definition order (the order of every group's values).
type Meter struct {
	Name        string
	Aggregation meter.Aggregation
	Dimensions  []string
}

// QueryInput is one usage query.
type QueryInput struct {
	Account string
	Meter   Meter
	// From and To bound the range [From, To), each aligned to the window.
	From, To time.Time
	Window   Window
	// Zone is the time zone of DAY windows (nil: UTC); no other window takes one.
	Zone *time.Location
	// AgreementDay is the account's cycle anchor (0: calendar months), for CYCLE windows.
	AgreementDay int
	// GroupBy are the dimensions to group by (any of the meter's, each once); without any, a
	// window is one row.
	GroupBy []string
	// Filter keeps only the usage whose dimension has the value given, by dimension.
	Filter map[string]string
}

// Span is one window [Start, End).
type Span struct{ Start, End time.Time }

// Row is one window's value for one group.
type Row struct {
	Span
	// Group are the values of the GroupBy dimensions.
	Group map[string]string
	// Other marks the usage of groups the hour items had no room for (OtherGroup): its
	// dimension values are not kept, so it is shown apart, in any grouping and under any filter.
	Other bool
	Value int64
}

// QueryResult is a query's answer: the rows of the windows and groups that have usage, by
// window, then group (Other last).
type QueryResult struct {
	Rows []Row
	// Windows are the query's windows, with usage or not.
	Windows []Span
}

// zone is the query's time zone.
func (in QueryInput) zone() *time.Location {
	if in.Zone == nil {
		return time.UTC
	}
	return in.Zone
}

// readPlan is what a query reads: the hour items from HourFrom (inclusive) to HourTo
// (exclusive), leaving out those in Split, and the minute items of each hour in Split (a window
// boundary falls inside it) and from MinuteFrom to MinuteTo.
type readPlan struct {
	windows              []Span
	hourFrom, hourTo     time.Time
	split                []time.Time
	minuteFrom, minuteTo time.Time
}

// plan validates the query and plans its reads, at now (which decides what minute detail is
// still kept). Every problem is named after the query parameter it concerns.
func (in QueryInput) plan(now time.Time) (readPlan, error) {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !ValidMeterName(in.Meter.Name) || !in.Meter.Aggregation.Valid() {
		add("meter is not a meter name")
	}
	dims := map[string]bool{}
	for _, d := range in.Meter.Dimensions {
		dims[d] = true
	}
	known := "it has none"
	if len(in.Meter.Dimensions) > 0 {
		known = "its dimensions are " + strings.Join(in.Meter.Dimensions, ", ")
	}
	seen := map[string]bool{}
	for _, g := range in.GroupBy {
		switch {
		case !dims[g]:
			add("groupBy names %q, which is no dimension of meter %s (%s)", g, in.Meter.Name, known)
		case seen[g]:
			add("groupBy names %q twice", g)
		}
		seen[g] = true
	}
	for _, d := range sortedKeys(in.Filter) {
		if !dims[d] {
			add("filter[%s] names no dimension of meter %s (%s)", d, in.Meter.Name, known)
		}
		if v := in.Filter[d]; len(v) > meter.MaxDimensionValueBytes {
			add("filter[%s] is %d bytes; a dimension value is at most %d", d, len(v), meter.MaxDimensionValueBytes)
		}
	}
	if !slices.Contains(WindowNames, in.Window) {
		add("window is one of %s", joinWindows())
	}
	if in.Zone != nil && in.Window != Day {
		add("tz applies to DAY windows only; %s windows are in UTC", in.Window)
	}
	if !in.From.Before(in.To) {
		add("from must be before to")
	}
	// The range is checked against the window when both can be read, so that every problem
	// is named at once.
	var windows []Span
	if slices.Contains(WindowNames, in.Window) && in.From.Before(in.To) {
		var err error
		if windows, err = in.windows(); err != nil {
			var ie *problem.InputError
			if !errors.As(err, &ie) {
				return readPlan{}, err
			}
			problems = append(problems, ie.Problems...)
		}
	}
	if len(problems) > 0 {
		return readPlan{}, problem.Fields(problems)
	}
	p := readPlan{windows: windows}
	switch in.Window {
	case Minute:
		p.minuteFrom, p.minuteTo = in.From, in.To
	default:
		p.hourFrom, p.hourTo = in.From.Truncate(time.Hour), in.To.Add(time.Hour-time.Nanosecond).Truncate(time.Hour)
		for _, w := range windows {
			for _, b := range []time.Time{w.Start, w.End} {
				if h := b.Truncate(time.Hour); !h.Equal(b) && (len(p.split) == 0 || !p.split[len(p.split)-1].Equal(h)) {
					p.split = append(p.split, h)
				}
			}
		}
	}
	// Minute detail is kept RollupMinuteRetention after its minute: a minute read must be
	// younger, or the answer would be made of what TTL had not deleted yet.
	first := p.minuteFrom
	if len(p.split) > 0 {
		first = p.split[0]
	}
	if !first.IsZero() && !first.Add(resources.RollupMinuteRetention).After(now) {
		earliest := now.Add(-resources.RollupMinuteRetention).Truncate(time.Minute).Add(time.Minute).UTC()
		if in.Window == Minute {
			add("from: minute detail is kept %d days; the earliest MINUTE window that can be read now starts at %s",
				retentionDays(), earliest.Format(time.RFC3339))
		} else {
			add("tz: a day in %s begins inside an hour, which reads minute detail at each day's boundary, kept %d days: "+
				"this range starts before %s (DAY windows in a zone whose offset is whole hours, or UTC, have no such bound)",
				in.zone(), retentionDays(), earliest.Format(time.RFC3339))
		}
		return readPlan{}, problem.Fields(problems)
	}
	return p, nil
}

func retentionDays() int { return int(resources.RollupMinuteRetention / (24 * time.Hour)) }

func joinWindows() string {
	s := make([]string, len(WindowNames))
	for i, w := range WindowNames {
		s[i] = string(w)
	}
	return strings.Join(s, ", ")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// windows are the query's windows, once From and To are found aligned and the range within its
// bound.
func (in QueryInput) windows() ([]Span, error) {
	switch in.Window {
	case Minute, Hour:
		unit, bound := time.Minute, MaxMinuteRange
		name := "minute"
		if in.Window == Hour {
			unit, bound, name = time.Hour, MaxHourRange, "hour"
		}
		var problems []string
		for _, b := range []struct {
			param string
			t     time.Time
		}{{"from", in.From}, {"to", in.To}} {
			if !b.t.Truncate(unit).Equal(b.t) {
				problems = append(problems, fmt.Sprintf("%s must be aligned to a %s window: on a whole %s in UTC, such as %s",
					b.param, in.Window, name, b.t.Truncate(unit).UTC().Format(time.RFC3339)))
			}
		}
		if in.To.Sub(in.From) > bound {
			problems = append(problems, fmt.Sprintf("to: a %s query spans at most %s", in.Window, humanDuration(bound)))
		}
		if len(problems) > 0 {
			return nil, problem.Fields(problems)
		}
		var out []Span
		for t := in.From; t.Before(in.To); t = t.Add(unit) {
			out = append(out, Span{t.UTC(), t.Add(unit).UTC()})
		}
		return out, nil
	case Day:
		return in.dayWindows()
	}
	return in.cycleWindows()
}

func humanDuration(d time.Duration) string {
	if d > 48*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return fmt.Sprintf("%d hours", d/time.Hour)
}

// dayWindows are the calendar days of the zone from From to To.
func (in QueryInput) dayWindows() ([]Span, error) {
	loc := in.zone()
	var problems []string
	for _, b := range []struct {
		param string
		t     time.Time
	}{{"from", in.From}, {"to", in.To}} {
		start, err := dayStart(localDate(b.t, loc), loc)
		if err != nil {
			return nil, problem.Fields([]string{fmt.Sprintf("tz: %v", err)})
		}
		if !start.Equal(b.t) {
			problems = append(problems, fmt.Sprintf("%s must be aligned to a DAY window: the first instant of a day in %s, such as %s",
				b.param, loc, start.In(loc).Format(time.RFC3339)))
		}
	}
	if len(problems) > 0 {
		return nil, problem.Fields(problems)
	}
	var out []Span
	day, start := localDate(in.From, loc), in.From.UTC()
	// A skipped date makes no window, so a range of MaxDays windows may step one date more.
	for steps := 0; start.Before(in.To); steps++ {
		if len(out) == MaxDays || steps > 2*MaxDays {
			return nil, problem.Fields([]string{fmt.Sprintf("to: a DAY query spans at most %d days", MaxDays)})
		}
		day = day.AddDate(0, 0, 1)
		end, err := dayStart(day, loc)
		if err != nil {
			return nil, problem.Fields([]string{fmt.Sprintf("tz: %v", err)})
		}
		if end.Equal(start) {
			continue
		}
		if end.Truncate(time.Minute) != end {
			return nil, problem.Fields([]string{fmt.Sprintf("tz: a day in %s begins at %s, not on a whole minute, which rollups cannot split",
				loc, end.Format(time.RFC3339Nano))})
		}
		out = append(out, Span{start, end})
		start = end
	}
	return out, nil
}

// cycleWindows are the account's billing cycles from From to To.
func (in QueryInput) cycleWindows() ([]Span, error) {
	var problems []string
	for _, b := range []struct {
		param string
		t     time.Time
	}{{"from", in.From}, {"to", in.To}} {
		if c := cycle.At(b.t, in.AgreementDay); !c.Start.Equal(b.t) {
			problems = append(problems, fmt.Sprintf("%s must be aligned to a CYCLE window: the start of one of the account's billing cycles, such as %s",
				b.param, c.Start.Format(time.RFC3339)))
		}
	}
	if len(problems) > 0 {
		return nil, problem.Fields(problems)
	}
	var out []Span
	for c := cycle.At(in.From, in.AgreementDay); c.Start.Before(in.To); c = cycle.At(c.End, in.AgreementDay) {
		if len(out) == MaxCycles {
			return nil, problem.Fields([]string{fmt.Sprintf("to: a CYCLE query spans at most %d cycles", MaxCycles)})
		}
		out = append(out, Span{c.Start, c.End})
	}
	return out, nil
}

// answer folds the items read into the query's rows: each item's cells go to the window holding
// its minute or hour (an hour a boundary splits is read minute by minute instead, and its hour
// item left out), filtered and projected on the grouping, folded by the meter's aggregation.
func (in QueryInput) answer(p readPlan, items []Item) (QueryResult, error) {
	split := map[time.Time]bool{}
	for _, h := range p.split {
		split[h] = true
	}
	index := func(dims []string) []int {
		idx := make([]int, len(dims))
		for i, d := range dims {
			idx[i] = slices.Index(in.Meter.Dimensions, d)
		}
		return idx
	}
	groupIdx := index(in.GroupBy)
	filterDims := sortedKeys(in.Filter)
	filterIdx := index(filterDims)
	type acc struct {
		cell  Cell
		group []string
		other bool
	}
	folded := make([]map[string]*acc, len(p.windows))
	for _, it := range items {
		hour, t, err := keyInstant(it.SK)
		if err != nil {
			return QueryResult{}, err
		}
		if hour && split[t] {
			continue
		}
		w := sort.Search(len(p.windows), func(i int) bool { return p.windows[i].End.After(t) })
		if w == len(p.windows) || t.Before(p.windows[w].Start) {
			continue // read with its page, outside the range
		}
		for name, c := range it.Cells {
			key, group, other := OtherGroup, []string(nil), name == OtherGroup
			if !other {
				values, err := groupValues(name)
				if err != nil {
					return QueryResult{}, err
				}
				// A dimension added to the meter since this window is empty in it.
				for len(values) < len(in.Meter.Dimensions) {
					values = append(values, "")
				}
				keep := true
				for i, d := range filterDims {
					keep = keep && values[filterIdx[i]] == in.Filter[d]
				}
				if !keep {
					continue
				}
				group = make([]string, len(groupIdx))
				for i, j := range groupIdx {
					group[i] = values[j]
				}
				key, _ = GroupName(group)
			}
			if folded[w] == nil {
				folded[w] = map[string]*acc{}
			}
			a := folded[w][key]
			if a == nil {
				folded[w][key] = &acc{cell: c, group: group, other: other}
				continue
			}
			a.cell = fold(in.Meter.Aggregation, a.cell, true, c)
		}
	}
	res := QueryResult{Windows: p.windows}
	for w, groups := range folded {
		keys := make([]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		// Other sorts last: group names are JSON arrays, "[" < "o".
		sort.Strings(keys)
		for _, k := range keys {
			a := groups[k]
			row := Row{Span: p.windows[w], Group: map[string]string{}, Other: a.other, Value: a.cell.Value}
			for i, d := range in.GroupBy {
				if !a.other {
					row.Group[d] = a.group[i]
				}
			}
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// Meters are the meters a deployment defines, as the query knows them.
type Meters []Meter

// Find returns the meter of that name.
func (ms Meters) Find(name string) (Meter, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m, true
		}
	}
	return Meter{}, false
}

// Names are the meters' names, sorted.
func (ms Meters) Names() []string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	sort.Strings(names)
	return names
}
