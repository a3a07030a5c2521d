package meter

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The bounds are part of the contract: the docs, the claim's item budget and the API promise
// these values.
func TestBounds_ArePinned(t *testing.T) {
	if MaxMeters != 32 || MaxMatchedPerEvent != 4 || MaxDimensions != 3 || MaxDimensionValueBytes != 64 ||
		MaxValue != 9007199254740991 || MaxDistinctValueBytes != 256 {
		t.Fatalf("bounds moved: %d %d %d %d %d %d", MaxMeters, MaxMatchedPerEvent, MaxDimensions, MaxDimensionValueBytes, MaxValue, MaxDistinctValueBytes)
	}
}

func parseSet(t *testing.T, src string) (Set, error) {
	t.Helper()
	var defs map[string]Definition
	if err := json.Unmarshal([]byte(src), &defs); err != nil {
		return Set{}, err
	}
	return NewSet(defs)
}

func mustSet(t *testing.T, src string) Set {
	t.Helper()
	s, err := parseSet(t, src)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const designMeters = `{
  "events":     { "feature": "events",     "aggregation": "COUNT" },
  "tokens_in":  { "match": { "type": "llm.call", "sourcePrefix": "/api" }, "feature": "tokens_in",
                  "value": "/usage/input_tokens", "aggregation": "SUM",
                  "dimensions": { "model": "/model", "region": "/region" } },
  "storage_gb": { "match": { "type": "storage.sampled" }, "feature": "storage_gb", "value": "/gb", "aggregation": "MAX" },
  "users":      { "match": { "type": "app.login" }, "feature": "active_users", "value": "/user_id", "aggregation": "UNIQUE_COUNT" },
  "seats":      { "match": { "type": "seats.set" }, "feature": "seats", "value": "/seats", "aggregation": "LATEST" }
}`

func TestNewSet_TheDesignsCatalogParses(t *testing.T) {
	s := mustSet(t, designMeters)
	if got := strings.Join(s.Names(), ","); got != "events,seats,storage_gb,tokens_in,users" {
		t.Fatalf("names = %s", got)
	}
	d, _ := s.Named("tokens_in")
	if got := strings.Join(d.Dimensions.Names(), ","); got != "model,region" {
		t.Errorf("dimensions lost their definition order: %s", got)
	}
	if m, ok := s.ForFeature("active_users"); !ok || m.Name != "users" {
		t.Errorf("ForFeature(active_users) = %+v %v", m, ok)
	}
}

func TestNewSet_WithoutAnEventsMeter_GetsTheBuiltinOne(t *testing.T) {
	s := mustSet(t, `{"gb": {"match": {"type": "s"}, "feature": "gb", "value": "/gb", "aggregation": "MAX"}}`)
	d, ok := s.Named(EventsMeter)
	if !ok || d.Feature != FeatureEvents || d.Aggregation != Count || d.Match != nil {
		t.Fatalf("built-in events meter = %+v %v", d, ok)
	}
	var zero Set
	if got := zero.Matching("any", "/x"); len(got) != 1 || got[0].Name != EventsMeter {
		t.Fatalf("a zero Set counts events: %+v", got)
	}
}

// Every problem of a definition is named, all at once, so an operator fixes the file in one go.
func TestNewSet_BadDefinitions_NameEachProblem(t *testing.T) {
	for name, tc := range map[string]struct {
		src  string
		want []string
	}{
		"unknown aggregation": {`{"a": {"feature": "f", "aggregation": "AVG"}}`, []string{`meter a: aggregation "AVG"`}},
		"count with a value":  {`{"a": {"feature": "f", "value": "/x", "aggregation": "COUNT"}}`, []string{"meter a: a COUNT meter counts events and takes no value"}},
		"sum without value":   {`{"a": {"feature": "f", "aggregation": "SUM"}}`, []string{"meter a: a SUM meter needs value"}},
		"not a pointer":       {`{"a": {"feature": "f", "value": "tokens", "aggregation": "SUM"}}`, []string{`meter a: value "tokens": a JSON Pointer into data starts with "/"`}},
		"bad escape":          {`{"a": {"feature": "f", "value": "/a~2b", "aggregation": "SUM"}}`, []string{"neither ~0 nor ~1"}},
		"odd index":           {`{"a": {"feature": "f", "value": "/items/01", "aggregation": "SUM"}}`, []string{`token "01" is not a canonical array index`}},
		"no feature":          {`{"a": {"aggregation": "COUNT"}}`, []string{"meter a: feature is missing"}},
		"match without type":  {`{"a": {"match": {"sourcePrefix": "/x"}, "feature": "f", "aggregation": "COUNT"}}`, []string{"meter a: match needs type"}},
		"events matched":      {`{"e": {"match": {"type": "x"}, "feature": "events", "aggregation": "COUNT"}}`, []string{"feature events is the count of every event"}},
		"events named elsewhere": {`{"events": {"match": {"type": "x"}, "feature": "calls", "aggregation": "COUNT"}}`,
			[]string{"meter events must move feature events"}},
		"two meters one feature": {`{"a": {"feature": "f", "aggregation": "COUNT"}, "b": {"match": {"type": "t"}, "feature": "f", "aggregation": "COUNT"}}`,
			[]string{"meters a and b both move feature f"}},
		"too many dimensions": {`{"a": {"feature": "f", "aggregation": "COUNT", "dimensions": {"a": "/a", "b": "/b", "c": "/c", "d": "/d"}}}`,
			[]string{"meter a: 4 dimensions; a meter has at most 3"}},
		"bad dimension source": {`{"a": {"feature": "f", "aggregation": "COUNT", "dimensions": {"who": "user"}}}`,
			[]string{`dimension who: "user" is neither subject, source nor a JSON Pointer`}},
		"bad meter name":   {`{"a#b": {"feature": "f", "aggregation": "COUNT"}}`, []string{`meter name "a#b" may use only`}},
		"bad feature name": {`{"a": {"feature": "f/g", "aggregation": "COUNT"}}`, []string{`feature name "f/g" may use only`}},
		"dimension named twice": {`{"a": {"feature": "f", "aggregation": "COUNT", "dimensions": {"m": "/m", "m": "/n"}}}`,
			[]string{"dimension m is named twice"}},
		"several at once": {`{"a": {"feature": "f", "aggregation": "SUM"}, "b": {"feature": "g", "value": "x", "aggregation": "MAX"},
			"c": {"feature": "h", "aggregation": "COUNT"}, "d": {"feature": "i", "aggregation": "COUNT"}}`,
			[]string{"meter a: a SUM meter needs value", `meter b: value "x"`, "meters a, b, c, d, events take every event: an event would move 5 meters"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseSet(t, tc.src)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestNewSet_TooManyMeters_Refused(t *testing.T) {
	defs := map[string]Definition{}
	for i := range MaxMeters + 1 {
		name := "m" + strings.Repeat("x", i)
		defs[name] = Definition{Match: &Match{Type: name}, Feature: name, Aggregation: Count}
	}
	if _, err := NewSet(defs); err == nil || !strings.Contains(err.Error(), "33 meters; a catalog has at most 32") {
		t.Fatalf("err = %v", err)
	}
}

// One event moves at most MaxMatchedPerEvent meters: a catalog where a type and a source could
// match more is refused; prefixes that cannot both match one source do not add up.
func TestNewSet_OneEventMatchingMoreThanFourMeters_Refused(t *testing.T) {
	chain := `{
	  "a": {"match": {"type": "t"}, "feature": "a", "aggregation": "COUNT"},
	  "b": {"match": {"type": "t", "sourcePrefix": "/x"}, "feature": "b", "aggregation": "COUNT"},
	  "c": {"match": {"type": "t", "sourcePrefix": "/x/y"}, "feature": "c", "aggregation": "COUNT"},
	  "d": {"match": {"type": "t", "sourcePrefix": "/x/y/z"}, "feature": "d", "aggregation": "COUNT"}
	}`
	if _, err := parseSet(t, chain); err == nil || !strings.Contains(err.Error(), `an event of type "t" from a source starting with "/x/y/z" would move 5 meters`) {
		t.Fatalf("err = %v", err)
	}
	apart := `{
	  "a": {"match": {"type": "t", "sourcePrefix": "/a"}, "feature": "a", "aggregation": "COUNT"},
	  "b": {"match": {"type": "t", "sourcePrefix": "/b"}, "feature": "b", "aggregation": "COUNT"},
	  "c": {"match": {"type": "t", "sourcePrefix": "/c"}, "feature": "c", "aggregation": "COUNT"},
	  "d": {"match": {"type": "t", "sourcePrefix": "/d"}, "feature": "d", "aggregation": "COUNT"},
	  "e": {"match": {"type": "t", "sourcePrefix": "/e"}, "feature": "e", "aggregation": "COUNT"}
	}`
	if _, err := parseSet(t, apart); err != nil {
		t.Fatalf("prefixes no source can share are refused: %v", err)
	}
}

func TestMatching_TypeExactlyAndSourcePrefix(t *testing.T) {
	s := mustSet(t, designMeters)
	names := func(ds []Definition) string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct{ typ, source, want string }{
		{"llm.call", "/api/v1", "events,tokens_in"},
		{"llm.call", "/batch", "events"},
		{"llm.calls", "/api", "events"},
		{"app.login", "x", "events,users"},
	} {
		if got := names(s.Matching(tc.typ, tc.source)); got != tc.want {
			t.Errorf("%s from %s matches %s, want %s", tc.typ, tc.source, got, tc.want)
		}
	}
}

func llm(data string) Event {
	return Event{ID: "e1", Type: "llm.call", Source: "/api", Subject: "job-7", ReceivedAtMs: 1_700_000_000_000, Data: []byte(data), DataIsJSON: true}
}

func TestRead_ValuesAndDimensions(t *testing.T) {
	s := mustSet(t, designMeters)
	rs, err := s.Read(llm(`{"usage": {"input_tokens": 1532}, "model": "gpt-4", "region": 7}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Meter != "events" || rs[0].Value != 1 || rs[1].Meter != "tokens_in" || rs[1].Value != 1532 {
		t.Fatalf("readings = %+v", rs)
	}
	if got := strings.Join(rs[1].Group, "|"); got != "gpt-4|7" {
		t.Errorf("group = %q", got)
	}
	// A missing dimension is the empty value; so is null.
	rs, err = s.Read(llm(`{"usage": {"input_tokens": 0}, "region": null}`))
	if err != nil || strings.Join(rs[1].Group, "|") != "|" {
		t.Fatalf("readings = %+v, %v", rs, err)
	}
}

// A bad value refuses the event whole, naming the meter and the pointer: never read as 0.
func TestRead_BadValues_RejectWithTheMeterAndThePointer(t *testing.T) {
	s := mustSet(t, designMeters)
	for name, tc := range map[string]struct {
		ev   Event
		want string
	}{
		"missing":    {llm(`{"model": "m"}`), "meter tokens_in: /usage/input_tokens is missing from the event's data"},
		"fractional": {llm(`{"usage": {"input_tokens": 1.5}}`), "is 1.5, not an integer"},
		"exponent":   {llm(`{"usage": {"input_tokens": 1e3}}`), "is 1e3, not an integer"},
		"negative":   {llm(`{"usage": {"input_tokens": -3}}`), "is -3, below 0"},
		"string":     {llm(`{"usage": {"input_tokens": "12"}}`), `is "12", not a number`},
		"null":       {llm(`{"usage": {"input_tokens": null}}`), "is null, not a number"},
		"past bound": {llm(`{"usage": {"input_tokens": 9007199254740992}}`), "past the bound 9007199254740991"},
		"not json":   {Event{Type: "llm.call", Source: "/api", Data: []byte("x"), DataIsJSON: false}, "cannot be read: the event has no JSON data"},
		"dimension object": {llm(`{"usage": {"input_tokens": 1}, "model": {"a": 1}}`),
			"meter tokens_in: /model (dimension model) is an object; a dimension value is a string or an integer"},
		"dimension too long": {llm(`{"usage": {"input_tokens": 1}, "model": "` + strings.Repeat("m", 65) + `"}`),
			"(dimension model) is 65 bytes"},
		"unique bool":  {Event{Type: "app.login", Data: []byte(`{"user_id": true}`), DataIsJSON: true}, "meter users: /user_id is true; a distinct value is a string or an integer"},
		"unique empty": {Event{Type: "app.login", Data: []byte(`{"user_id": ""}`), DataIsJSON: true}, "is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			rs, err := s.Read(tc.ev)
			var rej *Rejection
			if err == nil || !asRejection(err, &rej) {
				t.Fatalf("read %+v, %v", rs, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("reason %q does not say %q", err, tc.want)
			}
		})
	}
	// At the bound exactly, the value is taken.
	rs, err := s.Read(llm(`{"usage": {"input_tokens": 9007199254740991}}`))
	if err != nil || rs[1].Value != MaxValue {
		t.Fatalf("%+v %v", rs, err)
	}
}

func asRejection(err error, out **Rejection) bool {
	r, ok := err.(*Rejection)
	*out = r
	return ok
}

// 42 and "42" are one distinct thing; the marker key is its hash.
func TestRead_DistinctValues_RenderedIdentity(t *testing.T) {
	s := mustSet(t, designMeters)
	a, err := s.Read(Event{Type: "app.login", Data: []byte(`{"user_id": 42}`), DataIsJSON: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Read(Event{Type: "app.login", Data: []byte(`{"user_id": "42"}`), DataIsJSON: true})
	if a[1].Distinct != "42" || a[1].DistinctHash() != b[1].DistinctHash() || a[1].Value != 1 {
		t.Fatalf("%+v %+v", a[1], b[1])
	}
}

// LATEST orders by event time to the nanosecond, else the instant received, then by event id.
func TestOrderKey_TimeThenEventID(t *testing.T) {
	at := time.Date(2026, 11, 15, 12, 0, 0, 5, time.UTC)
	early := OrderKey(Event{ID: "z", Time: at.Add(-1)})
	late := OrderKey(Event{ID: "a", Time: at})
	tieLow, tieHigh := OrderKey(Event{ID: "a", Time: at}), OrderKey(Event{ID: "b", Time: at})
	received := OrderKey(Event{ID: "a", ReceivedAtMs: at.UnixMilli() + 1})
	old := OrderKey(Event{ID: "a", Time: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)})
	if !(early < late && tieLow < tieHigh && late < received && old < early) {
		t.Fatalf("order: %s %s %s %s %s %s", early, late, tieLow, tieHigh, received, old)
	}
}

// The footprint bounds a claim's items: per feature its counter row and mark, per meter a minute
// and an hour item, per distinct value a marker, and one record for every meter that keeps
// records in the unit (the events count keeps none).
func TestFootprint_OneRecordAUnit_HoweverManyMetersKeepOne(t *testing.T) {
	at := time.Date(2026, 11, 3, 10, 15, 20, 0, time.UTC).UnixMilli()
	llmCall := []Reading{
		{Meter: EventsMeter, Feature: FeatureEvents, Aggregation: Count, Value: 1},
		{Meter: "tokens_in", Feature: "tokens_in", Aggregation: Sum, Value: 1532},
		{Meter: "tokens_out", Feature: "tokens_out", Aggregation: Sum, Value: 210},
	}
	var events, calls Footprint
	events.Add(llmCall[:1], at)
	calls.Add(llmCall, at)
	calls.Add(llmCall, at+1_000) // the same minute: nothing new
	if got := events.Items(); got != 2+1+1 {
		t.Errorf("events only: %d items, want 4 (row, mark, minute, hour)", got)
	}
	if got := calls.Items(); got != 3*2+1+3+3 {
		t.Errorf("three meters: %d items, want 13 (3 rows and marks, 1 record, 3 minutes, 3 hours)", got)
	}
	calls.Add(llmCall, at+60_000) // the next minute: three more minute items
	if got := calls.Items(); got != 16 {
		t.Errorf("three meters over two minutes: %d items, want 16", got)
	}
}
