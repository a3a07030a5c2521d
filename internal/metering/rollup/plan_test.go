package rollup

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

const acct = "acct_r"

var t0 = time.Date(2026, 11, 5, 13, 7, 12, 0, time.UTC)

func ms(t time.Time) int64 { return t.UnixMilli() }

// write is a planned write as the tests read it.
type write struct {
	sk, update, cond string
	// values are the write's values by the attribute name each sets or adds.
	values map[string]string
}

func writesOf(t *testing.T, p Plan) []write {
	t.Helper()
	var out []write
	for _, w := range p.Writes {
		u := w.Update
		if u == nil {
			t.Fatalf("a rollup write that is not an Update: %+v", w)
		}
		wr := write{sk: dynamo.Str(u.Key, "sk"), update: aws.ToString(u.UpdateExpression), cond: aws.ToString(u.ConditionExpression), values: map[string]string{}}
		// Each clause of the update names an attribute and its value: "#g0 :g0", "#g0 = :g0".
		expr := strings.NewReplacer("ADD ", ",", "SET ", ",", " = ", " ").Replace(wr.update)
		for _, clause := range strings.Split(expr, ",") {
			f := strings.Fields(clause)
			if len(f) != 2 {
				continue
			}
			wr.values[u.ExpressionAttributeNames[f[0]]] = render(u.ExpressionAttributeValues[f[1]])
		}
		if v, ok := u.ExpressionAttributeValues[":rev"]; ok {
			wr.values["(rev read)"] = render(v)
		}
		out = append(out, wr)
	}
	return out
}

func render(v types.AttributeValue) string {
	switch x := v.(type) {
	case *types.AttributeValueMemberN:
		return x.Value
	case *types.AttributeValueMemberS:
		return x.Value
	case *types.AttributeValueMemberM:
		return render(x.Value[cellValue]) + "@" + render(x.Value[cellOrderKey])
	}
	return "?"
}

func TestPlanWrites_CountWithoutDimensions_AddsToTheMinuteAndTheHour_ReadingNothing(t *testing.T) {
	cs := []meter.Contribution{
		{Meter: "events", Aggregation: meter.Count, AtMs: ms(t0), Group: nil, Value: 1},
		{Meter: "events", Aggregation: meter.Count, AtMs: ms(t0.Add(20 * time.Second)), Value: 1},
	}
	if keys := Keys(acct, cs); len(keys) != 0 {
		t.Errorf("Keys = %v; a meter without dimensions reads nothing", keys)
	}
	p, err := PlanWrites("tbl", acct, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := writesOf(t, p)
	want := []write{
		{sk: "h#2026-11-05T13:00:00Z", update: "ADD #rev :one, #g0 :g0", values: map[string]string{"rev": "1", "[]": "2"}},
		{sk: "m#2026-11-05T13:07:00Z", update: "ADD #rev :one, #g0 :g0 SET #expiresAt = :expiresAt",
			values: map[string]string{"rev": "1", "[]": "2", "expiresAt": "1797340020"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("writes:\n%+v\nwant\n%+v", got, want)
	}
	// The minute item expires RollupMinuteRetention after its minute.
	if exp := time.Unix(1797340020, 0).UTC(); !exp.Equal(t0.Truncate(time.Minute).Add(resources.RollupMinuteRetention)) {
		t.Errorf("expiry %s", exp)
	}
	if pk := dynamo.Str(p.Writes[0].Update.Key, "pk"); pk != "acct_r#events" {
		t.Errorf("pk %q", pk)
	}
}

func TestPlanWrites_SumWithDimensions_OneWritePerItemWithEveryGroup(t *testing.T) {
	cs := []meter.Contribution{
		{Meter: "tokens", Aggregation: meter.Sum, AtMs: ms(t0), Group: []string{"gpt-4", "eu"}, Value: 100},
		{Meter: "tokens", Aggregation: meter.Sum, AtMs: ms(t0.Add(time.Minute)), Group: []string{"gpt-4", "eu"}, Value: 5},
		{Meter: "tokens", Aggregation: meter.Sum, AtMs: ms(t0), Group: []string{"gpt-4", ""}, Value: 7},
	}
	keys := Keys(acct, cs)
	if len(keys) != 1 || dynamo.Str(keys[0], "sk") != "h#2026-11-05T13:00:00Z" {
		t.Fatalf("Keys = %v; want the hour item alone", keys)
	}
	p, err := PlanWrites("tbl", acct, cs, mustRead(t, keys, nil))
	if err != nil {
		t.Fatal(err)
	}
	got := writesOf(t, p)
	if len(got) != 3 {
		t.Fatalf("%d writes; want the hour and two minutes: %+v", len(got), got)
	}
	if h := got[0]; h.sk != "h#2026-11-05T13:00:00Z" || h.values[`["gpt-4","eu"]`] != "105" || h.values[`["gpt-4",""]`] != "7" || h.cond != "" {
		t.Errorf("hour write %+v", h)
	}
	if m := got[1]; m.sk != "m#2026-11-05T13:07:00Z" || m.values[`["gpt-4","eu"]`] != "100" || m.values[`["gpt-4",""]`] != "7" {
		t.Errorf("first minute %+v", m)
	}
	if m := got[2]; m.sk != "m#2026-11-05T13:08:00Z" || m.values[`["gpt-4","eu"]`] != "5" || len(m.values) != 3 {
		t.Errorf("second minute %+v", m)
	}
}

func mustRead(t *testing.T, keys []map[string]types.AttributeValue, got []map[string]types.AttributeValue) map[string]Item {
	t.Helper()
	read, err := ReadItems(keys, got)
	if err != nil {
		t.Fatal(err)
	}
	return read
}

// stored is an item as DynamoDB would return it.
func stored(sk string, rev int64, cells map[string]types.AttributeValue) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{"pk": dynamo.S("acct_r#peak"), "sk": dynamo.S(sk), "rev": dynamo.N(rev)}
	for k, v := range cells {
		item[k] = v
	}
	return item
}

func TestPlanWrites_Max(t *testing.T) {
	hour, minute := "h#2026-11-05T13:00:00Z", "m#2026-11-05T13:07:00Z"
	c := func(v int64) meter.Contribution {
		return meter.Contribution{Meter: "peak", Aggregation: meter.Max, AtMs: ms(t0), Group: []string{"eu"}, Value: v}
	}
	for _, tc := range []struct {
		name  string
		cs    []meter.Contribution
		items []map[string]types.AttributeValue
		want  []write
	}{
		{"absent items are put new, with the largest of the claim",
			[]meter.Contribution{c(5), c(9), c(7)}, nil,
			[]write{
				{sk: hour, update: "SET #rev = :next, #g0 = :g0", cond: newCondition, values: map[string]string{"rev": "1", `["eu"]`: "9"}},
				{sk: minute, update: "SET #rev = :next, #g0 = :g0, #expiresAt = :expiresAt", cond: newCondition,
					values: map[string]string{"rev": "1", `["eu"]`: "9", "expiresAt": "1797340020"}},
			}},
		{"a larger value sets the group at the rev read",
			[]meter.Contribution{c(12)},
			[]map[string]types.AttributeValue{stored(hour, 4, map[string]types.AttributeValue{`["eu"]`: dynamo.N(10), `["us"]`: dynamo.N(50)}),
				stored(minute, 2, map[string]types.AttributeValue{`["eu"]`: dynamo.N(3)})},
			[]write{
				{sk: hour, update: "SET #rev = :next, #g0 = :g0", cond: revCondition, values: map[string]string{"rev": "5", `["eu"]`: "12", "(rev read)": "4"}},
				{sk: minute, update: "SET #rev = :next, #g0 = :g0, #expiresAt = :expiresAt", cond: revCondition,
					values: map[string]string{"rev": "3", `["eu"]`: "12", "expiresAt": "1797340020", "(rev read)": "2"}},
			}},
		{"a value no larger than the item's writes nothing there",
			[]meter.Contribution{c(10)},
			[]map[string]types.AttributeValue{stored(hour, 4, map[string]types.AttributeValue{`["eu"]`: dynamo.N(10)}),
				stored(minute, 2, map[string]types.AttributeValue{`["eu"]`: dynamo.N(3)})},
			[]write{
				{sk: minute, update: "SET #rev = :next, #g0 = :g0, #expiresAt = :expiresAt", cond: revCondition,
					values: map[string]string{"rev": "3", `["eu"]`: "10", "expiresAt": "1797340020", "(rev read)": "2"}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := Keys(acct, tc.cs)
			if len(keys) != 2 {
				t.Fatalf("Keys = %v; a MAX meter reads its minute and its hour", keys)
			}
			p, err := PlanWrites("tbl", acct, tc.cs, mustRead(t, keys, tc.items))
			if err != nil {
				t.Fatal(err)
			}
			if got := writesOf(t, p); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("writes:\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestPlanWrites_Latest_ByEventTimeThenLargerID(t *testing.T) {
	hour := "h#2026-11-05T13:00:00Z"
	c := func(v int64, at time.Time, id string) meter.Contribution {
		return meter.Contribution{Meter: "peak", Aggregation: meter.Latest, AtMs: ms(t0), Value: v, OrderKey: LatestOrderKey(ms(at), id)}
	}
	early, late := t0.Add(-time.Hour), t0
	for _, tc := range []struct {
		name   string
		cs     []meter.Contribution
		stored *Cell
		want   string // the hour's value@key, "" for no write
	}{
		{"the later event wins whatever the order received", []meter.Contribution{c(7, late, "a"), c(3, early, "b")}, nil, "7@" + LatestOrderKey(ms(late), "a")},
		{"at one instant the larger id wins", []meter.Contribution{c(7, late, "a"), c(3, late, "b")}, nil, "3@" + LatestOrderKey(ms(late), "b")},
		{"an event older than the stored one writes nothing", []meter.Contribution{c(9, early, "z")},
			&Cell{Value: 1, OrderKey: LatestOrderKey(ms(late), "a")}, ""},
		{"a later one replaces the stored one", []meter.Contribution{c(9, late.Add(time.Millisecond), "a")},
			&Cell{Value: 1, OrderKey: LatestOrderKey(ms(late), "a")}, "9@" + LatestOrderKey(ms(late.Add(time.Millisecond)), "a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []map[string]types.AttributeValue
			if tc.stored != nil {
				got = append(got, stored(hour, 1, map[string]types.AttributeValue{"[]": cellValueOf(meter.Latest, *tc.stored)}))
			}
			p, err := PlanWrites("tbl", acct, tc.cs, mustRead(t, Keys(acct, tc.cs), got))
			if err != nil {
				t.Fatal(err)
			}
			var hourValue string
			for _, w := range writesOf(t, p) {
				if w.sk == hour {
					hourValue = w.values["[]"]
				}
			}
			if hourValue != tc.want {
				t.Errorf("hour %q; want %q", hourValue, tc.want)
			}
		})
	}
}

func TestLatestOrderKey_OrdersInstantsThenIDs(t *testing.T) {
	keys := []string{
		LatestOrderKey(-62135596800000, "a"), // the year 1
		LatestOrderKey(-1, "z"),
		LatestOrderKey(0, "a"),
		LatestOrderKey(0, "b"),
		LatestOrderKey(1, "a"),
		LatestOrderKey(ms(t0), "a"),
		LatestOrderKey(ms(t0), "ab"),
		LatestOrderKey(253402300799999, "a"), // the last instant of 9999
	}
	if !sort.StringsAreSorted(keys) {
		t.Errorf("order keys do not sort as their instants and ids: %q", keys)
	}
}

func TestPlanWrites_AnHourWithoutRoom_CountsNewGroupsAsOther(t *testing.T) {
	hour := "h#2026-11-05T13:00:00Z"
	// An hour item whose groups fill MaxItemGroupBytes but for 30 bytes.
	cells := map[string]types.AttributeValue{}
	used := 0
	for i := 0; used+cellBytes(`["user-0000000"]`, Cell{}) <= MaxItemGroupBytes-30; i++ {
		name := fmt.Sprintf(`["user-%07d"]`, i)
		cells[name] = dynamo.N(1)
		used += cellBytes(name, Cell{})
	}
	item := stored(hour, 9, cells)
	item["pk"] = dynamo.S("acct_r#logins")
	c := func(user string) meter.Contribution {
		return meter.Contribution{Meter: "logins", Aggregation: meter.Sum, AtMs: ms(t0), Group: []string{user}, Value: 2}
	}
	// "u1" fits (21 + 6 bytes); "u2" then does not; a user the hour keeps stays its own.
	cs := []meter.Contribution{c("u1"), c("u2"), c("user-0000003")}
	p, err := PlanWrites("tbl", acct, cs, mustRead(t, Keys(acct, cs), []map[string]types.AttributeValue{item}))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range writesOf(t, p) {
		if w.values[`["u1"]`] != "2" || w.values[OtherGroup] != "2" || w.values[`["user-0000003"]`] != "2" || w.values[`["u2"]`] != "" {
			t.Errorf("%s: %v; want u1 and user-0000003 kept, u2 counted in %s, in the minute and the hour alike", w.sk, w.values, OtherGroup)
		}
	}
}

func TestPlanWrites_RefusesWhatNoCallerShouldBuild(t *testing.T) {
	ok := meter.Contribution{Meter: "tokens", Aggregation: meter.Sum, AtMs: ms(t0), Group: []string{"a"}, Value: 1}
	for _, tc := range []struct {
		name string
		edit func(c *meter.Contribution)
		want string
	}{
		{"a name with #", func(c *meter.Contribution) { c.Meter = "to#kens" }, "is not a meter name"},
		{"an unknown aggregation", func(c *meter.Contribution) { c.Aggregation = "AVG" }, `aggregation "AVG"`},
		{"a negative value", func(c *meter.Contribution) { c.Value = -1 }, "not within 0..9007199254740991"},
		{"a value past 2^53-1", func(c *meter.Contribution) { c.Value = meter.MaxValue + 1 }, "not within"},
		{"a COUNT of 2", func(c *meter.Contribution) { c.Aggregation, c.Value = meter.Count, 2 }, "a COUNT contribution is 1"},
		{"a LATEST without order key", func(c *meter.Contribution) { c.Aggregation = meter.Latest }, "order key"},
		{"an order key on a SUM", func(c *meter.Contribution) { c.OrderKey = "k" }, "order key"},
		{"four dimensions", func(c *meter.Contribution) { c.Group = []string{"a", "b", "c", "d"} }, "4 dimensions (at most 3)"},
		{"a dimension value of 65 bytes", func(c *meter.Contribution) { c.Group = []string{strings.Repeat("x", 65)} }, "at most 64 bytes"},
		{"a dimension value that is not UTF-8", func(c *meter.Contribution) { c.Group = []string{"\xff"} }, "not valid UTF-8"},
		{"an instant before 1970", func(c *meter.Contribution) { c.AtMs = -1 }, "years 1970 to 9999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.Group = append([]string(nil), ok.Group...)
			tc.edit(&c)
			_, err := PlanWrites("tbl", acct, []meter.Contribution{c}, map[string]Item{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one saying %q", err, tc.want)
			}
		})
	}
	mixed := []meter.Contribution{ok, {Meter: "tokens", Aggregation: meter.Max, AtMs: ms(t0), Group: []string{"a"}, Value: 1}}
	if _, err := PlanWrites("tbl", acct, mixed, map[string]Item{}); err == nil || !strings.Contains(err.Error(), "SUM with 1 dimensions in one contribution and MAX") {
		t.Errorf("a meter of two aggregations: %v", err)
	}
	if _, err := PlanWrites("tbl", acct, []meter.Contribution{ok}, map[string]Item{}); err == nil || !strings.Contains(err.Error(), "was not read before planning") {
		t.Errorf("an hour item not read: %v", err)
	}
}

// One item's write stays inside DynamoDB's bounds on an update expression (4 KB, 300 operators)
// with the most groups a plan may give it; one group more is refused before anything is sent.
func TestPlanWrites_GroupsPerItemAreBounded(t *testing.T) {
	for _, agg := range []meter.Aggregation{meter.Sum, meter.Max} {
		var cs []meter.Contribution
		for i := range MaxWriteGroups + 1 {
			cs = append(cs, meter.Contribution{Meter: "tokens", Aggregation: agg, AtMs: ms(t0), Group: []string{fmt.Sprint("g-", i)}, Value: 1})
		}
		plan := func(cs []meter.Contribution) (Plan, error) {
			keys := Keys(acct, cs)
			read, err := ReadItems(keys, nil)
			if err != nil {
				t.Fatal(err)
			}
			return PlanWrites("tbl", acct, cs, read)
		}
		p, err := plan(cs[:MaxWriteGroups])
		if err != nil {
			t.Fatalf("%s: %d groups: %v", agg, MaxWriteGroups, err)
		}
		for _, w := range p.Writes {
			expr := aws.ToString(w.Update.UpdateExpression)
			if len(expr) > 4096 || strings.Count(expr, ",") >= 300 {
				t.Errorf("%s: an update expression of %d bytes and %d clauses", agg, len(expr), strings.Count(expr, ",")+1)
			}
		}
		if _, err := plan(cs); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d groups", MaxWriteGroups+1)) {
			t.Errorf("%s: %d groups for one item: %v", agg, MaxWriteGroups+1, err)
		}
	}
}

func TestPlanWrites_TheSameInputPlansTheSameWrites(t *testing.T) {
	var cs []meter.Contribution
	for i := range 40 {
		cs = append(cs, meter.Contribution{Meter: []string{"a", "b"}[i%2], Aggregation: meter.Sum, AtMs: ms(t0.Add(time.Duration(i) * 17 * time.Second)),
			Group: []string{[]string{"x", "y", "z"}[i%3]}, Value: int64(i)})
	}
	read := mustRead(t, Keys(acct, cs), nil)
	first, err := PlanWrites("tbl", acct, cs, read)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		again, _ := PlanWrites("tbl", acct, cs, read)
		if !reflect.DeepEqual(first, again) {
			t.Fatal("two plans of the same contributions and read differ")
		}
	}
	if n, want := len(first.Writes), WriteCount(acct, cs); n != want {
		t.Errorf("%d writes; WriteCount says %d", n, want)
	}
}

func TestGroupName_IsTheJSONArrayAsWritten(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{nil, "[]"},
		{[]string{"gpt-4", "eu"}, `["gpt-4","eu"]`},
		{[]string{"<a&b>", ""}, `["<a&b>",""]`},
		{[]string{`say "hi"`}, `["say \"hi\""]`},
		{[]string{"é"}, `["é"]`},
	} {
		got, err := GroupName(tc.values)
		if err != nil || got != tc.want {
			t.Errorf("GroupName(%q) = %q, %v; want %q", tc.values, got, err, tc.want)
		}
		back, err := groupValues(got)
		if err != nil || len(back) != len(tc.values) {
			t.Errorf("groupValues(%q) = %q, %v", got, back, err)
		}
	}
	if _, err := GroupName([]string{"\xff"}); err == nil {
		t.Error("a value that is not UTF-8 was named (JSON would have rewritten it)")
	}
}

func TestReadItems_AbsentKeysAreReadAbsent_ItemsNotAskedForAreLeftOut(t *testing.T) {
	keys := []map[string]types.AttributeValue{
		{"pk": dynamo.S("acct_r#peak"), "sk": dynamo.S("h#2026-11-05T13:00:00Z")},
		{"pk": dynamo.S("acct_r#peak"), "sk": dynamo.S("m#2026-11-05T13:07:00Z")},
	}
	read := mustRead(t, keys, []map[string]types.AttributeValue{stored("h#2026-11-05T13:00:00Z", 3, map[string]types.AttributeValue{"[]": dynamo.N(8)})})
	if it := read[itemID("acct_r#peak", "h#2026-11-05T13:00:00Z")]; !it.Exists || it.Rev != 3 || it.Cells["[]"].Value != 8 {
		t.Errorf("the hour: %+v", it)
	}
	if it, ok := read[itemID("acct_r#peak", "m#2026-11-05T13:07:00Z")]; !ok || it.Exists {
		t.Errorf("the minute: %+v, %v; want read absent", it, ok)
	}
	// A unit reads the items of every member it may admit; what it plans needs fewer.
	if read, err := ReadItems(keys[:1], []map[string]types.AttributeValue{stored("h#2026-11-05T14:00:00Z", 1, nil)}); err != nil || len(read) != 1 {
		t.Errorf("an item the keys did not list: %v, %v", read, err)
	}
}
