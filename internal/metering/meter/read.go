package meter

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Event is what the meters read of a usage event: its CloudEvents attributes, the instant Ferry
// received it, and its data when the data is JSON.
type Event struct {
	ID      string
	Type    string
	Source  string
	Subject string
	// Time is the event's CloudEvents time; zero when the event has none.
	Time time.Time
	// ReceivedAtMs is the instant Ferry received the event.
	ReceivedAtMs int64
	// Data is the event's data as JSON; DataIsJSON is false when the event has no data or its
	// data is not JSON (a datacontenttype that is not JSON, or data_base64).
	Data       []byte
	DataIsJSON bool
}

// Reading is what one event gives one meter.
type Reading struct {
	Meter       string
	Feature     string
	Aggregation Aggregation
	// Value is what the event brings: the value for SUM, MAX and LATEST, 1 for COUNT and for
	// UNIQUE_COUNT (one sighting of a distinct value, which counts only if it is new).
	Value int64
	// Distinct is, for UNIQUE_COUNT, the value as rendered (a string as sent, an integer in
	// decimal): the identity of the thing counted, so 42 and "42" are one thing.
	Distinct string
	// Group is the dimensions' values in definition order ("" for one the event lacks).
	Group []string
	// OrderKey orders LATEST readings: the event time, then the event id (see OrderKey).
	OrderKey string
}

// BareCount reports whether r is the built-in events count with no dimensions: the one reading
// every billed event gives, which an entry leaves implicit (its readers add it back).
func (r Reading) BareCount() bool {
	return r.Meter == EventsMeter && r.Feature == FeatureEvents && r.Aggregation == Count && r.Value == 1 && len(r.Group) == 0
}

// DistinctHash is the identity of a UNIQUE_COUNT reading's value within its meter: the key of
// its marker.
func (r Reading) DistinctHash() string { return DistinctHash(r.Distinct) }

// DistinctHash hashes a rendered distinct value (SHA-256, the first 16 bytes in hex).
func DistinctHash(rendered string) string {
	sum := sha256.Sum256([]byte(rendered))
	return hex.EncodeToString(sum[:16])
}

// OrderKey orders the events of a LATEST meter: by event time (the CloudEvents time to the
// nanosecond; without one, the instant Ferry received the event), then by event id in byte
// order, the greater being the later. The key compares as a string in that order: the time is
// written as 20 digits of an order-preserving unsigned form of its nanoseconds.
func OrderKey(ev Event) string {
	var ns int64
	if ev.Time.IsZero() {
		ns = ev.ReceivedAtMs * int64(time.Millisecond)
	} else {
		ns = ev.Time.UnixNano()
	}
	return fmt.Sprintf("%020d#%s", uint64(ns)^(1<<63), ev.ID)
}

// Problem is one reason an event's readings failed.
type Problem struct {
	Meter string
	// Pointer is the JSON Pointer (or dimension source) that failed.
	Pointer string
	Detail  string
}

func (p Problem) String() string {
	if p.Pointer == "" {
		return fmt.Sprintf("meter %s: %s", p.Meter, p.Detail)
	}
	return fmt.Sprintf("meter %s: %s %s", p.Meter, p.Pointer, p.Detail)
}

// Rejection refuses an event whole: one of its meters could not read a usable value. Its
// message, the reason stored with the REJECTED event, names every meter and pointer that failed.
type Rejection struct {
	Problems []Problem
}

func (r *Rejection) Error() string {
	parts := make([]string, len(r.Problems))
	for i, p := range r.Problems {
		parts[i] = p.String()
	}
	return "bad meter value: " + strings.Join(parts, "; ")
}

// Read returns the readings an event gives the meters it matches, in meter name order, or a
// *Rejection naming every meter that could not read a usable value: a missing value, one that is
// not an integer literal, negative, past MaxValue, or a dimension or distinct value of the wrong
// kind or size. A missing dimension is the empty value "", never a refusal.
func (s Set) Read(ev Event) ([]Reading, error) {
	matched := s.Matching(ev.Type, ev.Source)
	var doc any
	parsed, parseErr := false, ""
	data := func() (any, string) {
		if !parsed {
			parsed = true
			switch {
			case !ev.DataIsJSON || len(bytes.TrimSpace(ev.Data)) == 0:
				parseErr = "the event has no JSON data to read it from"
			default:
				dec := json.NewDecoder(bytes.NewReader(ev.Data))
				dec.UseNumber()
				if err := dec.Decode(&doc); err != nil {
					parseErr = "the event's data is not JSON"
				}
			}
		}
		return doc, parseErr
	}
	out := make([]Reading, 0, len(matched))
	var problems []Problem
	for _, d := range matched {
		r := Reading{Meter: d.Name, Feature: d.Feature, Aggregation: d.Aggregation, Value: 1}
		bad := func(pointer, detail string) {
			problems = append(problems, Problem{Meter: d.Name, Pointer: pointer, Detail: detail})
		}
		if d.Aggregation.TakesValue() {
			doc, perr := data()
			v, found := any(nil), false
			if perr == "" {
				if got, _, err := d.value.Get(doc); err == nil {
					v, found = got, true
				}
			}
			switch {
			case perr != "":
				bad(d.Value, "cannot be read: "+perr)
			case !found:
				bad(d.Value, "is missing from the event's data")
			case d.Aggregation == UniqueCount:
				rendered, detail := renderIdentity(v, MaxDistinctValueBytes)
				switch {
				case detail != "":
					bad(d.Value, detail+"; a distinct value is a string or an integer")
				case rendered == "":
					bad(d.Value, "is empty; a distinct value identifies something")
				default:
					r.Distinct = rendered
				}
			default:
				n, detail := integerValue(v)
				if detail != "" {
					bad(d.Value, detail)
				}
				r.Value = n
			}
		}
		if d.Aggregation == Latest {
			r.OrderKey = OrderKey(ev)
		}
		if len(d.Dimensions) > 0 {
			r.Group = make([]string, len(d.Dimensions))
		}
		for i, dim := range d.Dimensions {
			switch dim.From {
			case LiteralSubject:
				r.Group[i] = ev.Subject
				continue
			case LiteralSource:
				r.Group[i] = ev.Source
				continue
			}
			doc, perr := data()
			if perr != "" {
				continue // no data: every dimension read from it is missing, which is ""
			}
			v, _, err := dim.pointer.Get(doc)
			if err != nil || v == nil {
				continue // missing (or null): the empty value
			}
			rendered, detail := renderIdentity(v, MaxDimensionValueBytes)
			if detail != "" {
				bad(dim.From, fmt.Sprintf("(dimension %s) %s; a dimension value is a string or an integer", dim.Name, detail))
				continue
			}
			if len(rendered) > MaxDimensionValueBytes {
				bad(dim.From, fmt.Sprintf("(dimension %s) is %d bytes; the limit is %d", dim.Name, len(rendered), MaxDimensionValueBytes))
				continue
			}
			r.Group[i] = rendered
		}
		out = append(out, r)
	}
	if len(problems) > 0 {
		return nil, &Rejection{Problems: problems}
	}
	return out, nil
}

var integerLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// integerValue reads a meter value: an integer literal from 0 to MaxValue. detail says why not.
func integerValue(v any) (int64, string) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Sprintf("is %s, not a number", describe(v))
	}
	lit := string(num)
	switch {
	case len(lit) > maxNumberLiteralBytes:
		return 0, fmt.Sprintf("is a number of %d characters, past the bound %d", len(lit), MaxValue)
	case !integerLiteral.MatchString(lit):
		return 0, fmt.Sprintf("is %s, not an integer (write it without a fraction or an exponent)", quoteCut(lit))
	case strings.HasPrefix(lit, "-") && lit != "-0":
		return 0, fmt.Sprintf("is %s, below 0", quoteCut(lit))
	case lit == "-0":
		return 0, "is -0; write 0"
	}
	n, err := strconv.ParseUint(lit, 10, 64)
	if err != nil || n > MaxValue {
		return 0, fmt.Sprintf("is %s, past the bound %d", quoteCut(lit), MaxValue)
	}
	return int64(n), ""
}

// renderIdentity renders a dimension or distinct value: a string as it is, an integer literal in
// decimal as written (integer literals are canonical, so one integer has one rendering). detail
// says why it cannot be rendered; a string past limit bytes is refused too.
func renderIdentity(v any, limit int) (string, string) {
	switch x := v.(type) {
	case string:
		if len(x) > limit {
			return "", fmt.Sprintf("is %d bytes", len(x))
		}
		return x, ""
	case json.Number:
		lit := string(x)
		if !integerLiteral.MatchString(lit) || lit == "-0" || len(lit) > limit {
			return "", fmt.Sprintf("is %s, not an integer", quoteCut(lit))
		}
		return lit, ""
	}
	return "", "is " + describe(v)
}

// describe names a JSON value's kind for a reason, repeating a short string.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case string:
		return strconv.Quote(quoteCut(x))
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case json.Number:
		return quoteCut(string(x))
	}
	return fmt.Sprintf("%T", v)
}
