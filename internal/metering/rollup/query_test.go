package rollup

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

var tokens = Meter{Name: "tokens", Aggregation: meter.Sum, Dimensions: []string{"model", "region"}}

// now is the instant the query tests run at.
var now = time.Date(2026, 11, 20, 9, 30, 0, 0, time.UTC)

func TestQueryPlan_RefusesEachProblemNamingItsParameter(t *testing.T) {
	kolkata := zone(t, "Asia/Kolkata")
	base := QueryInput{Account: acct, Meter: tokens, Window: Day,
		From: utc(t, "2026-11-01T00:00:00Z"), To: utc(t, "2026-11-08T00:00:00Z")}
	for _, tc := range []struct {
		name string
		edit func(in *QueryInput)
		want []string
	}{
		{"a MINUTE bound inside a minute", func(in *QueryInput) {
			in.Window, in.From, in.To = Minute, utc(t, "2026-11-19T10:00:30Z"), utc(t, "2026-11-19T11:00:00Z")
		}, []string{"from must be aligned to a MINUTE window: on a whole minute in UTC, such as 2026-11-19T10:00:00Z"}},
		{"a MINUTE range over 24 hours", func(in *QueryInput) {
			in.Window, in.From, in.To = Minute, utc(t, "2026-11-18T10:00:00Z"), utc(t, "2026-11-19T10:01:00Z")
		}, []string{"to: a MINUTE query spans at most 24 hours"}},
		{"an HOUR bound on a half hour of its offset", func(in *QueryInput) {
			in.Window, in.To = Hour, utc(t, "2026-11-01T10:30:00Z")
		}, []string{"to must be aligned to a HOUR window: on a whole hour in UTC, such as 2026-11-01T10:00:00Z"}},
		{"an HOUR range over 31 days", func(in *QueryInput) { in.Window, in.To = Hour, utc(t, "2026-12-02T01:00:00Z") },
			[]string{"to: a HOUR query spans at most 31 days"}},
		{"a DAY bound at UTC midnight in Kolkata", func(in *QueryInput) { in.Zone = kolkata },
			[]string{"from must be aligned to a DAY window: the first instant of a day in Asia/Kolkata, such as 2026-11-01T00:00:00+05:30",
				"to must be aligned to a DAY window: the first instant of a day in Asia/Kolkata, such as 2026-11-08T00:00:00+05:30"}},
		{"a DAY range over 366 days", func(in *QueryInput) { in.To = utc(t, "2027-11-03T00:00:00Z") },
			[]string{"to: a DAY query spans at most 366 days"}},
		{"a CYCLE bound that is not the account's cycle start", func(in *QueryInput) { in.Window, in.AgreementDay = Cycle, 15 },
			[]string{"from must be aligned to a CYCLE window: the start of one of the account's billing cycles, such as 2026-10-15T00:00:00Z",
				"to must be aligned to a CYCLE window: the start of one of the account's billing cycles, such as 2026-10-15T00:00:00Z"}},
		{"a CYCLE range over 12 cycles", func(in *QueryInput) { in.Window, in.To = Cycle, utc(t, "2027-12-01T00:00:00Z") },
			[]string{"to: a CYCLE query spans at most 12 cycles"}},
		{"a zone for HOUR windows", func(in *QueryInput) { in.Window, in.Zone = Hour, kolkata },
			[]string{"tz applies to DAY windows only; HOUR windows are in UTC"}},
		{"an unknown window, a range backwards, a grouping and a filter on no dimension", func(in *QueryInput) {
			in.Window, in.From = "WEEK", in.To.Add(time.Hour)
			in.GroupBy = []string{"model", "tier", "model"}
			in.Filter = map[string]string{"color": "red", "region": strings.Repeat("x", 65)}
		}, []string{
			`groupBy names "tier", which is no dimension of meter tokens (its dimensions are model, region)`,
			`groupBy names "model" twice`,
			"filter[color] names no dimension of meter tokens (its dimensions are model, region)",
			"filter[region] is 65 bytes; a dimension value is at most 64",
			"window is one of MINUTE, HOUR, DAY, CYCLE",
			"from must be before to",
		}},
		{"MINUTE windows older than minute detail is kept", func(in *QueryInput) {
			in.Window, in.From, in.To = Minute, utc(t, "2026-10-11T09:30:00Z"), utc(t, "2026-10-11T10:00:00Z")
		}, []string{"from: minute detail is kept 40 days; the earliest MINUTE window that can be read now starts at 2026-10-11T09:31:00Z"}},
		{"DAY windows of a half-hour zone older than minute detail is kept", func(in *QueryInput) {
			in.Zone, in.From, in.To = kolkata, utc(t, "2026-10-09T18:30:00Z"), utc(t, "2026-10-12T18:30:00Z")
		}, []string{"tz: a day in Asia/Kolkata begins inside an hour, which reads minute detail at each day's boundary, kept 40 days: " +
			"this range starts before 2026-10-11T09:31:00Z (DAY windows in a zone whose offset is whole hours, or UTC, have no such bound)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			tc.edit(&in)
			_, err := in.plan(now)
			var ie *problem.InputError
			if !asInput(err, &ie) {
				t.Fatalf("err = %v; want refused input", err)
			}
			if !reflect.DeepEqual(ie.Problems, tc.want) {
				t.Errorf("problems:\n%q\nwant\n%q", ie.Problems, tc.want)
			}
		})
	}
}

func asInput(err error, ie **problem.InputError) bool {
	if e, ok := err.(*problem.InputError); ok {
		*ie = e
		return true
	}
	return false
}

func TestQueryPlan_ReadsHoursAndTheMinutesOfTheHoursABoundarySplits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        QueryInput
		hourFrom  string
		hourTo    string
		split     []string
		minuteRun string
	}{
		{"DAY in UTC: hours only", QueryInput{Window: Day, From: utc(t, "2026-11-01T00:00:00Z"), To: utc(t, "2026-11-03T00:00:00Z")},
			"2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z", nil, ""},
		{"DAY in New York: hours only", QueryInput{Window: Day, Zone: zone(t, "America/New_York"),
			From: utc(t, "2026-11-01T04:00:00Z"), To: utc(t, "2026-11-03T05:00:00Z")},
			"2026-11-01T04:00:00Z", "2026-11-03T05:00:00Z", nil, ""},
		{"DAY in Kathmandu: each boundary's hour minute by minute", QueryInput{Window: Day, Zone: zone(t, "Asia/Kathmandu"),
			From: utc(t, "2026-11-17T18:15:00Z"), To: utc(t, "2026-11-19T18:15:00Z")},
			"2026-11-17T18:00:00Z", "2026-11-19T19:00:00Z",
			[]string{"2026-11-17T18:00:00Z", "2026-11-18T18:00:00Z", "2026-11-19T18:00:00Z"}, ""},
		{"MINUTE: minutes only", QueryInput{Window: Minute, From: utc(t, "2026-11-19T10:07:00Z"), To: utc(t, "2026-11-19T10:09:00Z")},
			"", "", nil, "2026-11-19T10:07:00Z"},
		{"CYCLE: hours only", QueryInput{Window: Cycle, AgreementDay: 15, From: utc(t, "2026-09-15T00:00:00Z"), To: utc(t, "2026-11-15T00:00:00Z")},
			"2026-09-15T00:00:00Z", "2026-11-15T00:00:00Z", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Account, tc.in.Meter = acct, tokens
			p, err := tc.in.plan(now)
			if err != nil {
				t.Fatal(err)
			}
			str := func(t time.Time) string {
				if t.IsZero() {
					return ""
				}
				return t.UTC().Format(time.RFC3339)
			}
			var split []string
			for _, h := range p.split {
				split = append(split, str(h))
			}
			if str(p.hourFrom) != tc.hourFrom || str(p.hourTo) != tc.hourTo || !reflect.DeepEqual(split, tc.split) || str(p.minuteFrom) != tc.minuteRun {
				t.Errorf("hours [%s, %s), split %v, minutes from %s", str(p.hourFrom), str(p.hourTo), split, str(p.minuteFrom))
			}
		})
	}
}

// item builds a read item of the tokens meter.
func item(sk string, cells map[string]int64) Item {
	it := Item{PK: "acct_r#tokens", SK: sk, Exists: true, Cells: map[string]Cell{}}
	for k, v := range cells {
		it.Cells[k] = Cell{Value: v}
	}
	return it
}

func rowsOf(res QueryResult) []string {
	var out []string
	for _, r := range res.Rows {
		g := fmt.Sprint(r.Group)
		if r.Other {
			g = "other"
		}
		out = append(out, fmt.Sprintf("%s %s %d", r.Start.Format("01-02T15:04"), g, r.Value))
	}
	return out
}

func TestQueryAnswer_FoldsWindowsGroupsAndFilters(t *testing.T) {
	items := []Item{
		item("h#2026-11-01T00:00:00Z", map[string]int64{`["gpt-4","eu"]`: 10, `["gpt-4","us"]`: 1, `["mini","eu"]`: 100}),
		item("h#2026-11-01T23:00:00Z", map[string]int64{`["gpt-4","eu"]`: 5, OtherGroup: 7}),
		item("h#2026-11-02T12:00:00Z", map[string]int64{`["mini"]`: 3}), // written before the meter had its region
	}
	in := QueryInput{Account: acct, Meter: tokens, Window: Day, From: utc(t, "2026-11-01T00:00:00Z"), To: utc(t, "2026-11-03T00:00:00Z")}
	for _, tc := range []struct {
		name    string
		groupBy []string
		filter  map[string]string
		want    []string
	}{
		{"no grouping: one row a window, other included", nil, nil,
			[]string{"11-01T00:00 map[] 116", "11-01T00:00 other 7", "11-02T00:00 map[] 3"}},
		{"by model", []string{"model"}, nil,
			[]string{"11-01T00:00 map[model:gpt-4] 16", "11-01T00:00 map[model:mini] 100", "11-01T00:00 other 7", "11-02T00:00 map[model:mini] 3"}},
		{"by region, then model", []string{"region", "model"}, nil,
			// Rows sort by the grouping's values in its order: region first.
			[]string{"11-01T00:00 map[model:gpt-4 region:eu] 15", "11-01T00:00 map[model:mini region:eu] 100",
				"11-01T00:00 map[model:gpt-4 region:us] 1", "11-01T00:00 other 7", "11-02T00:00 map[model:mini region:] 3"}},
		{"filtered on a region: other still shown apart", nil, map[string]string{"region": "eu"},
			[]string{"11-01T00:00 map[] 115", "11-01T00:00 other 7"}},
		{"filtered on the empty value of a dimension added since", []string{"model"}, map[string]string{"region": ""},
			[]string{"11-01T00:00 other 7", "11-02T00:00 map[model:mini] 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := in
			q.GroupBy, q.Filter = tc.groupBy, tc.filter
			p, err := q.plan(now)
			if err != nil {
				t.Fatal(err)
			}
			res, err := q.answer(p, items)
			if err != nil {
				t.Fatal(err)
			}
			if got := rowsOf(res); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("rows:\n%q\nwant\n%q", got, tc.want)
			}
			if len(res.Windows) != 2 {
				t.Errorf("%d windows", len(res.Windows))
			}
		})
	}
}

// A day in Kolkata starts at 18:30 UTC: the hour item of 18:00 is left out, and its minutes go
// to the day each belongs to.
func TestQueryAnswer_AHalfHourZoneSplitsTheBoundaryHourByMinute(t *testing.T) {
	in := QueryInput{Account: acct, Meter: Meter{Name: "tokens", Aggregation: meter.Sum}, Window: Day, Zone: zone(t, "Asia/Kolkata"),
		From: utc(t, "2026-11-17T18:30:00Z"), To: utc(t, "2026-11-19T18:30:00Z")}
	p, err := in.plan(now)
	if err != nil {
		t.Fatal(err)
	}
	items := []Item{
		item("h#2026-11-17T18:00:00Z", map[string]int64{"[]": 1000}), // split: its minutes count instead
		item("m#2026-11-17T18:29:00Z", map[string]int64{"[]": 1}),    // before the range
		item("m#2026-11-17T18:30:00Z", map[string]int64{"[]": 2}),
		item("h#2026-11-17T19:00:00Z", map[string]int64{"[]": 4}),
		item("h#2026-11-18T18:00:00Z", map[string]int64{"[]": 1000}), // split
		item("m#2026-11-18T18:29:00Z", map[string]int64{"[]": 8}),
		item("m#2026-11-18T18:30:00Z", map[string]int64{"[]": 16}),
		item("h#2026-11-19T17:00:00Z", map[string]int64{"[]": 32}),
		item("m#2026-11-19T18:31:00Z", map[string]int64{"[]": 64}), // after the range
	}
	res, err := in.answer(p, items)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"11-17T18:30 map[] 14", "11-18T18:30 map[] 48"}
	if got := rowsOf(res); !reflect.DeepEqual(got, want) {
		t.Errorf("rows %q; want %q", got, want)
	}
}

func TestQueryAnswer_MaxAndLatestFoldAcrossTheirParts(t *testing.T) {
	day := QueryInput{Account: acct, Window: Day, From: utc(t, "2026-11-01T00:00:00Z"), To: utc(t, "2026-11-02T00:00:00Z")}
	maxQ := day
	maxQ.Meter = Meter{Name: "peak", Aggregation: meter.Max, Dimensions: []string{"region"}}
	p, _ := maxQ.plan(now)
	res, err := maxQ.answer(p, []Item{
		item("h#2026-11-01T01:00:00Z", map[string]int64{`["eu"]`: 5, `["us"]`: 9}),
		item("h#2026-11-01T02:00:00Z", map[string]int64{`["eu"]`: 7, `["us"]`: 2}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rowsOf(res); !reflect.DeepEqual(got, []string{"11-01T00:00 map[] 9"}) {
		t.Errorf("MAX rows %q", got)
	}
	latestQ := day
	latestQ.Meter = Meter{Name: "seats", Aggregation: meter.Latest}
	p, _ = latestQ.plan(now)
	late := LatestOrderKey(ms(utc(t, "2026-11-01T01:30:00Z")), "e2")
	early := LatestOrderKey(ms(utc(t, "2026-11-01T01:00:00Z")), "e9")
	res, err = latestQ.answer(p, []Item{
		{SK: "h#2026-11-01T03:00:00Z", Cells: map[string]Cell{"[]": {Value: 4, OrderKey: early}}}, // received later, happened earlier
		{SK: "h#2026-11-01T02:00:00Z", Cells: map[string]Cell{"[]": {Value: 12, OrderKey: late}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rowsOf(res); !reflect.DeepEqual(got, []string{"11-01T00:00 map[] 12"}) {
		t.Errorf("LATEST rows %q", got)
	}
}
