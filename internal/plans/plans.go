// Package plans holds Ferry's plans as data: each plan's tier (how its events are billed), its
// monthly price and, per feature, its limit, included quantity and overage price. The defaults
// are the published pricing (Free: 1,000 events a month, no overage; Plus: $28 a month with
// 100,000 events included and $0.00028 per extra event); a catalog in FERRY_PLANS replaces them.
package plans

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
)

//go:embed plans.json
var defaultJSON []byte

// Tier is how a plan's events are billed.
type Tier string

// Tiers.
const (
	// Capped runs the meter transaction against the monthly limit: the limit is a hard cap.
	Capped Tier = "capped"
	// Counted stamps the checkpoint and moves a sharded counter: usage is billed, not capped.
	Counted Tier = "counted"
	// Internal stamps the checkpoint and consumes nothing (canaries, the operator's own traffic).
	Internal Tier = "internal"
)

// Limit is a feature's monthly maximum; Unlimited means none. In JSON it is a number or null.
type Limit struct {
	Max       int64
	Unlimited bool
}

// Unlimited is the limit of a feature with no maximum.
var Unlimited = Limit{Unlimited: true}

// Max returns a finite limit.
func Max(n int64) Limit { return Limit{Max: n} }

// MarshalJSON writes null for an unlimited feature.
func (l Limit) MarshalJSON() ([]byte, error) {
	if l.Unlimited {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, l.Max, 10), nil
}

// UnmarshalJSON reads a non-negative integer or null.
func (l *Limit) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*l = Unlimited
		return nil
	}
	var n int64
	if err := json.Unmarshal(data, &n); err != nil {
		return errors.New("a limit is a non-negative integer or null")
	}
	if n < 0 {
		return errors.New("a limit is a non-negative integer or null")
	}
	*l = Max(n)
	return nil
}

// Remaining is what is left under the limit after committed units, never negative; nil when
// unlimited. It is Check's Remaining, for a caller that asks for nothing.
func (l Limit) Remaining(committed int64) *int64 { return l.Check(committed, 0).Remaining }

// Feature is one metered feature of a plan.
type Feature struct {
	Limit Limit `json:"limit"`
	// Included is the quantity the monthly price covers; usage past it is overage.
	Included int64 `json:"included,omitempty"`
	// OverageMicros is the price of one unit past Included, in micro-dollars.
	OverageMicros int64 `json:"overageMicros,omitempty"`
}

// Plan is one plan.
type Plan struct {
	Name          string             `json:"-"`
	Tier          Tier               `json:"tier"`
	MonthlyMicros int64              `json:"monthlyMicros"`
	Features      map[string]Feature `json:"features"`
}

// Catalog is every plan and the plan an unknown account is on.
type Catalog struct {
	Default string          `json:"default"`
	Plans   map[string]Plan `json:"plans"`
}

// Default returns the built-in catalog.
func Default() Catalog {
	c, err := Parse(defaultJSON)
	if err != nil {
		panic(fmt.Sprintf("plans: the built-in catalog is invalid: %v", err)) // a build defect
	}
	return c
}

// Parse reads and validates a catalog.
func Parse(data []byte) (Catalog, error) {
	var c Catalog
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Catalog{}, fmt.Errorf("parse plans: %w", err)
	}
	var errs []error
	if len(c.Plans) == 0 {
		errs = append(errs, errors.New("no plans"))
	}
	if _, ok := c.Plans[c.Default]; !ok {
		errs = append(errs, fmt.Errorf("default plan %q is not defined", c.Default))
	}
	for name, p := range c.Plans {
		switch p.Tier {
		case Capped, Counted, Internal:
		default:
			errs = append(errs, fmt.Errorf("plan %s: unknown tier %q", name, p.Tier))
		}
		if _, ok := p.Features[FeatureEvents]; !ok {
			errs = append(errs, fmt.Errorf("plan %s: no %q feature", name, FeatureEvents))
		}
		for f, feat := range p.Features {
			if feat.Included < 0 || feat.OverageMicros < 0 {
				errs = append(errs, fmt.Errorf("plan %s feature %s: negative quantity", name, f))
			}
		}
		p.Name = name
		c.Plans[name] = p
	}
	if err := errors.Join(errs...); err != nil {
		return Catalog{}, fmt.Errorf("invalid plans: %w", err)
	}
	return c, nil
}

// FeatureEvents is the feature every event counts toward, EventAmount units each.
const FeatureEvents = "events"

// EventAmount is what one event consumes of FeatureEvents: the worker bills it, and ingest's gate
// refuses an event only when not even this much is left.
const EventAmount = 1

// Plan returns a plan by name.
func (c Catalog) Plan(name string) (Plan, bool) {
	p, ok := c.Plans[name]
	return p, ok
}

// Names returns the plan names, sorted.
func (c Catalog) Names() []string {
	names := make([]string, 0, len(c.Plans))
	for n := range c.Plans {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Features returns every feature any plan defines, sorted.
func (c Catalog) Features() []string {
	seen := map[string]bool{}
	for _, p := range c.Plans {
		for f := range p.Features {
			seen[f] = true
		}
	}
	out := make([]string, 0, len(seen))
	for f := range seen {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// HasFeature reports whether any plan defines feature.
func (c Catalog) HasFeature(feature string) bool {
	for _, p := range c.Plans {
		if _, ok := p.Features[feature]; ok {
			return true
		}
	}
	return false
}

// Limit is a plan's limit for a feature; a feature the plan does not define has limit 0 (the
// plan does not include it).
func (p Plan) Limit(feature string) Limit {
	f, ok := p.Features[feature]
	if !ok {
		return Max(0)
	}
	return f.Limit
}
