// Package meter is what a usage event is worth: the catalog's meter definitions, which events
// each takes, and the readings an event gives them. A meter maps events (a CloudEvents type, and
// optionally a source prefix; no match takes every event) to one feature of the plans, reads its
// value from the event's data with an RFC 6901 JSON Pointer (none for a count), aggregates the
// values of a cycle one way (SUM, COUNT, MAX, UNIQUE_COUNT, LATEST), and names up to
// MaxDimensions dimensions whose values group its usage.
//
// Everything here is a pure function of the definitions and the event: the definitions are
// checked once, at start, with every problem named; an event's readings either all exist or the
// event is refused whole, with a reason naming each meter and pointer that failed (a Rejection).
// A value is never read as 0, rounded, or otherwise rewritten into another value.
package meter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/go-openapi/jsonpointer"
)

// Bounds of a catalog's meters and of an event's readings.
const (
	// MaxMeters bounds the meters of a catalog.
	MaxMeters = 32
	// MaxMatchedPerEvent bounds the meters one event can move: a catalog in which one event
	// could match more is refused at start. Each meter an event moves costs the unit's claim
	// transaction items (its counter row, its mark, its record, its rollups), so the bound keeps
	// a unit of several events within one transaction.
	MaxMatchedPerEvent = 4
	// MaxDimensions bounds the dimensions of one meter.
	MaxDimensions = 3
	// MaxDimensionValueBytes bounds a dimension value once rendered (a string as sent, an
	// integer in decimal).
	MaxDimensionValueBytes = 64
	// MaxValue is the largest value a SUM, MAX or LATEST meter takes: 2^53 − 1, the largest
	// integer every JSON reader (and DynamoDB's emulator, which keeps numbers as float64) holds
	// exactly.
	MaxValue = 1<<53 - 1
	// MaxDistinctValueBytes bounds a UNIQUE_COUNT value once rendered: it identifies a thing (a
	// user, a device), and the entry that moved the meter keeps it.
	MaxDistinctValueBytes = 256
	// maxNameBytes bounds the name of a meter, a dimension or a feature.
	maxNameBytes = 64
	// maxQuotedBytes bounds how much of a refused value a reason repeats.
	maxQuotedBytes = 40
	// maxNumberLiteralBytes bounds the JSON number literal a value is read from: a longer one
	// cannot be an integer within MaxValue written sensibly, and reading it exactly would cost
	// more than the event is worth.
	maxNumberLiteralBytes = 64
)

// Aggregation is how a meter combines the values of one cycle.
type Aggregation string

// Aggregations.
const (
	// Sum adds the values.
	Sum Aggregation = "SUM"
	// Count counts the events; it takes no value.
	Count Aggregation = "COUNT"
	// Max keeps the largest value.
	Max Aggregation = "MAX"
	// UniqueCount counts the distinct values: a value counts once a cycle, however often it
	// recurs.
	UniqueCount Aggregation = "UNIQUE_COUNT"
	// Latest keeps the value of the latest event by event time (CloudEvents time, else the
	// instant Ferry received it), ties broken by event id, the greater being the later.
	Latest Aggregation = "LATEST"
)

// Aggregations lists every aggregation, in the order the documentation gives them.
var Aggregations = []Aggregation{Sum, Count, Max, UniqueCount, Latest}

// Valid reports whether a is an aggregation Ferry knows.
func (a Aggregation) Valid() bool {
	for _, x := range Aggregations {
		if a == x {
			return true
		}
	}
	return false
}

// TakesValue reports whether a meter of this aggregation reads a value from the event's data.
func (a Aggregation) TakesValue() bool { return a != Count && a.Valid() }

// Additive reports whether a cycle's figure is the sum of what each event adds (SUM, COUNT, and
// UNIQUE_COUNT, whose new distinct values each add one): such a counter can be split over
// shards and moved with ADD. MAX and LATEST replace the figure and live on one row.
func (a Aggregation) Additive() bool { return a == Sum || a == Count || a == UniqueCount }

// Capped reports whether a plan's limit caps a meter of this aggregation. LATEST is a reading
// of the present (seats, a plan size), not an accumulation: a limit on it has nothing to refuse.
func (a Aggregation) Capped() bool { return a.Valid() && a != Latest }

// Literal dimension sources: the CloudEvents attributes a dimension may name instead of a
// pointer into data.
const (
	LiteralSubject = "subject"
	LiteralSource  = "source"
)

// Match selects the events a meter takes: the CloudEvents type, exactly, and optionally the
// source's prefix.
type Match struct {
	Type         string `json:"type"`
	SourcePrefix string `json:"sourcePrefix,omitempty"`
}

// Definition is one meter as the plans file defines it.
type Definition struct {
	// Name is the meter's name (its key in the plans file).
	Name string `json:"-"`
	// Match selects the events the meter takes; nil takes every event.
	Match *Match `json:"match,omitempty"`
	// Feature is the plans' feature the meter moves: its limits, price and provider meters.
	Feature string `json:"feature"`
	// Value is the JSON Pointer (RFC 6901) to the value in the event's data; empty for COUNT.
	Value string `json:"value,omitempty"`
	// Aggregation combines the values of a cycle.
	Aggregation Aggregation `json:"aggregation"`
	// Dimensions name the values that group the meter's usage, in definition order.
	Dimensions Dimensions `json:"dimensions,omitempty"`

	value *jsonpointer.Pointer
}

// Dimension is one dimension of a meter: its name and where its value comes from, a JSON
// Pointer into data or one of the literals subject and source.
type Dimension struct {
	Name string
	From string

	pointer *jsonpointer.Pointer
}

// Dimensions are a meter's dimensions in definition order. In JSON they are an object whose
// member order is the order: the rollups name a group by its values in this order.
type Dimensions []Dimension

// MarshalJSON writes the dimensions as an object, in order.
func (d Dimensions) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, dim := range d {
		if i > 0 {
			b.WriteByte(',')
		}
		name, err := json.Marshal(dim.Name)
		if err != nil {
			return nil, err
		}
		from, err := json.Marshal(dim.From)
		if err != nil {
			return nil, err
		}
		b.Write(name)
		b.WriteByte(':')
		b.Write(from)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object of name → source, keeping the members' order and refusing a
// name given twice (a JSON reader would otherwise keep one of them silently).
func (d *Dimensions) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '{' {
		return errors.New("dimensions are an object of name → JSON Pointer (or subject, or source)")
	}
	var out Dimensions
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name := tok.(string) // an object's member names are strings
		var from string
		if err := dec.Decode(&from); err != nil {
			return fmt.Errorf("dimension %s: its source is a string (a JSON Pointer, subject or source)", name)
		}
		if seen[name] {
			return fmt.Errorf("dimension %s is named twice", name)
		}
		seen[name] = true
		out = append(out, Dimension{Name: name, From: from})
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	*d = out
	return nil
}

// Names are the dimensions' names, in definition order.
func (d Dimensions) Names() []string {
	out := make([]string, len(d))
	for i, dim := range d {
		out[i] = dim.Name
	}
	return out
}

// Set is a catalog's meters, checked.
type Set struct {
	byName map[string]*Definition
	names  []string // sorted
}

// FeatureEvents is the feature of the built-in meter, and EventsMeter its name: a catalog that
// defines no meter of this feature gets BuiltinEvents.
const (
	FeatureEvents = "events"
	EventsMeter   = "events"
)

// BuiltinEvents is the meter every catalog has: every event counts one toward events.
func BuiltinEvents() Definition {
	return Definition{Name: EventsMeter, Feature: FeatureEvents, Aggregation: Count}
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// CheckName reports why a name (of a meter, a dimension or a feature) is unusable, or nil. Names
// appear in keys joined by '#', in URLs and in JSON, so they keep to a plain alphabet.
func CheckName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a %s name is empty", kind)
	case len(name) > maxNameBytes:
		return fmt.Errorf("%s name %q is %d bytes; the limit is %d", kind, quoteCut(name), len(name), maxNameBytes)
	case !namePattern.MatchString(name):
		return fmt.Errorf("%s name %q may use only letters, digits, '_', '.' and '-'", kind, quoteCut(name))
	}
	return nil
}

// NewSet checks meter definitions (name → definition) and returns them as a Set, adding the
// built-in events meter when no meter moves the events feature. Every problem is named; the
// error joins them all. Checks that need the plans (the feature exists, is not an allowance,
// its limits suit the aggregation) are the plans package's.
func NewSet(defs map[string]Definition) (Set, error) {
	s := Set{byName: map[string]*Definition{}}
	var errs []error
	if len(defs) > MaxMeters {
		errs = append(errs, fmt.Errorf("%d meters; a catalog has at most %d", len(defs), MaxMeters))
	}
	byFeature := map[string]string{}
	names := make([]string, 0, len(defs))
	for name := range defs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		d := defs[name]
		d.Name = name
		if err := CheckName("meter", name); err != nil {
			errs = append(errs, err)
		}
		for _, err := range d.check() {
			errs = append(errs, fmt.Errorf("meter %s: %w", name, err))
		}
		if other, taken := byFeature[d.Feature]; taken && d.Feature != "" {
			errs = append(errs, fmt.Errorf("meters %s and %s both move feature %s; a feature is moved by one meter", other, name, d.Feature))
		} else {
			byFeature[d.Feature] = name
		}
		dd := d
		s.byName[name] = &dd
	}
	if _, ok := byFeature[FeatureEvents]; !ok {
		if _, taken := s.byName[EventsMeter]; taken {
			errs = append(errs, fmt.Errorf("meter %s must move feature %s (the built-in count of every event), or another meter must", EventsMeter, FeatureEvents))
		} else {
			b := BuiltinEvents()
			s.byName[EventsMeter] = &b
		}
	}
	for name := range s.byName {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	errs = append(errs, s.checkMatches()...)
	if err := errors.Join(errs...); err != nil {
		return Set{}, err
	}
	return s, nil
}

// check names every problem of one definition.
func (d *Definition) check() []error {
	var errs []error
	if d.Feature == "" {
		errs = append(errs, errors.New("feature is missing: name the plans' feature the meter moves"))
	} else if err := CheckName("feature", d.Feature); err != nil {
		errs = append(errs, err)
	}
	if !d.Aggregation.Valid() {
		errs = append(errs, fmt.Errorf("aggregation %q is not one of SUM, COUNT, MAX, UNIQUE_COUNT, LATEST", d.Aggregation))
	}
	switch {
	case d.Aggregation == Count && d.Value != "":
		errs = append(errs, errors.New("a COUNT meter counts events and takes no value; remove value"))
	case d.Aggregation.TakesValue() && d.Value == "":
		errs = append(errs, fmt.Errorf("a %s meter needs value: a JSON Pointer into the event's data, like /tokens", d.Aggregation))
	case d.Value != "":
		p, err := parsePointer(d.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("value %q: %w", d.Value, err))
		}
		d.value = p
	}
	if d.Match != nil {
		if d.Match.Type == "" {
			errs = append(errs, errors.New("match needs type (the CloudEvents type, exactly); leave match out to take every event"))
		}
	}
	if d.Feature == FeatureEvents && (d.Match != nil || d.Aggregation != Count) {
		errs = append(errs, fmt.Errorf("feature %s is the count of every event: its meter is a COUNT with no match", FeatureEvents))
	}
	if len(d.Dimensions) > MaxDimensions {
		errs = append(errs, fmt.Errorf("%d dimensions; a meter has at most %d", len(d.Dimensions), MaxDimensions))
	}
	for i := range d.Dimensions {
		dim := &d.Dimensions[i]
		if err := CheckName("dimension", dim.Name); err != nil {
			errs = append(errs, err)
		}
		switch dim.From {
		case LiteralSubject, LiteralSource:
		default:
			p, err := parsePointer(dim.From)
			if err != nil {
				errs = append(errs, fmt.Errorf("dimension %s: %q is neither subject, source nor a JSON Pointer: %w", dim.Name, dim.From, err))
			}
			dim.pointer = p
		}
	}
	return errs
}

// parsePointer reads a JSON Pointer into data. The empty pointer (the whole data) is refused: a
// value is a member of the data, not the data. A token that an array would read as an index
// written unusually ("01", "+1") is refused too: RFC 6901 reads only canonical indexes, and a
// reader that takes "01" as 1 would meter a value the event did not name.
func parsePointer(s string) (*jsonpointer.Pointer, error) {
	if s == "" || !strings.HasPrefix(s, "/") {
		return nil, errors.New(`a JSON Pointer into data starts with "/", like /usage/input_tokens`)
	}
	p, err := jsonpointer.New(s)
	if err != nil {
		return nil, err
	}
	for _, tok := range strings.Split(s[1:], "/") {
		if tok == "" {
			continue // an empty member name is a valid token
		}
		if _, err := strconv.Atoi(tok); err == nil && strconv.Itoa(mustAtoi(tok)) != tok {
			return nil, fmt.Errorf("token %q is not a canonical array index (RFC 6901 allows 0 or digits without a leading zero or sign)", tok)
		}
		for i := 0; i < len(tok); i++ {
			if tok[i] == '~' && (i+1 == len(tok) || (tok[i+1] != '0' && tok[i+1] != '1')) {
				return nil, fmt.Errorf("token %q has a '~' that is neither ~0 nor ~1", tok)
			}
		}
	}
	return &p, nil
}

func mustAtoi(s string) int { n, _ := strconv.Atoi(s); return n }

// checkMatches refuses a catalog in which one event could match more than MaxMatchedPerEvent
// meters: the meters that take every event, plus, for one type, the longest chain of source
// prefixes each of which is a prefix of the next (one source can start with all of them).
func (s Set) checkMatches() []error {
	var all []string
	byType := map[string][]*Definition{}
	for _, n := range s.names {
		d := s.byName[n]
		if d.Match == nil {
			all = append(all, n)
			continue
		}
		byType[d.Match.Type] = append(byType[d.Match.Type], d)
	}
	var errs []error
	if len(all) > MaxMatchedPerEvent {
		errs = append(errs, fmt.Errorf("meters %s take every event: an event would move %d meters; the limit is %d",
			strings.Join(all, ", "), len(all), MaxMatchedPerEvent))
	}
	types := make([]string, 0, len(byType))
	for t := range byType {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		ds := byType[t]
		for _, longest := range ds {
			chain := append([]string(nil), all...)
			for _, d := range ds {
				if strings.HasPrefix(longest.Match.SourcePrefix, d.Match.SourcePrefix) {
					chain = append(chain, d.Name)
				}
			}
			if len(chain) > MaxMatchedPerEvent {
				sort.Strings(chain)
				errs = append(errs, fmt.Errorf("an event of type %q from a source starting with %q would move %d meters (%s); the limit is %d",
					t, longest.Match.SourcePrefix, len(chain), strings.Join(chain, ", "), MaxMatchedPerEvent))
				break
			}
		}
	}
	return errs
}

// builtin is the Set of a catalog that defines no meter: the built-in events meter alone. A zero
// Set reads as it, so a catalog is never without its count of events.
var builtin = func() Set {
	b := BuiltinEvents()
	return Set{byName: map[string]*Definition{EventsMeter: &b}, names: []string{EventsMeter}}
}()

func (s Set) orBuiltin() Set {
	if s.byName == nil {
		return builtin
	}
	return s
}

// Names returns the meters' names, sorted.
func (s Set) Names() []string { return append([]string(nil), s.orBuiltin().names...) }

// Len is the number of meters.
func (s Set) Len() int { return len(s.orBuiltin().names) }

// Named returns a meter by name.
func (s Set) Named(name string) (Definition, bool) {
	d, ok := s.orBuiltin().byName[name]
	if !ok {
		return Definition{}, false
	}
	return *d, true
}

// ForFeature returns the meter that moves feature, if one does.
func (s Set) ForFeature(feature string) (Definition, bool) {
	s = s.orBuiltin()
	for _, n := range s.names {
		if d := s.byName[n]; d.Feature == feature {
			return *d, true
		}
	}
	return Definition{}, false
}

// Definitions returns every meter, by name, for writing the catalog back out.
func (s Set) Definitions() map[string]Definition {
	s = s.orBuiltin()
	out := make(map[string]Definition, len(s.names))
	for _, n := range s.names {
		out[n] = *s.byName[n]
	}
	return out
}

// Matching returns the meters an event of type typ from source takes, sorted by name.
func (s Set) Matching(typ, source string) []Definition {
	s = s.orBuiltin()
	var out []Definition
	for _, n := range s.names {
		d := s.byName[n]
		if d.Match == nil || (d.Match.Type == typ && strings.HasPrefix(source, d.Match.SourcePrefix)) {
			out = append(out, *d)
		}
	}
	return out
}

// quoteCut is s cut to maxQuotedBytes at a character boundary, marked when cut.
func quoteCut(s string) string {
	if len(s) <= maxQuotedBytes {
		return s
	}
	cut := maxQuotedBytes
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Contribution is one admitted event's part in one meter: what a unit's claim adds to that
// meter's rollups (the ledger plans it, the rollups write it).
type Contribution struct {
	Meter       string
	Aggregation Aggregation
	// AtMs is the instant Ferry received the event (epoch milliseconds): its window, and its
	// billing cycle's.
	AtMs int64
	// Group are the event's values of the meter's dimensions, in definition order; a dimension
	// the event lacks is "".
	Group []string
	// Value is what the event adds (SUM), 1 (COUNT, and UNIQUE_COUNT's first sighting of a value
	// in the cycle), or the event's value (MAX, LATEST): 0..MaxValue.
	Value int64
	// OrderKey orders LATEST contributions: the one with the largest key is the latest
	// (LatestOrderKey builds it).
	OrderKey string
}
