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

	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
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

// MaxLimit is the largest finite limit: 2^53−1, the largest integer every store and JSON reader
// keeps exactly (jsonbody.MaxInteger). A larger one would be stored or read back as another
// number (2^53+1 as 2^53); an account that needs more is unlimited (null).
const MaxLimit = jsonbody.MaxInteger

// errLimit says what a limit may be, wherever one is read (a request, the plans file).
var errLimit = fmt.Errorf("a limit is an integer from 0 to %d, or null (unlimited)", int64(MaxLimit))

// UnmarshalJSON reads an integer from 0 to MaxLimit, or null.
func (l *Limit) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*l = Unlimited
		return nil
	}
	var n int64
	if err := json.Unmarshal(data, &n); err != nil || n < 0 || n > MaxLimit {
		return errLimit
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
	// Grant is, for an allowance feature (see Definition.Allowance), what this plan tops a
	// cycle's allowance up to. It is set for allowance features only, and Limit is then unused:
	// the cycle's limit is the sum of the cycle's keyed grant rows.
	Grant *int64 `json:"grant,omitempty"`
	// Alerts are the feature's thresholds (alerts.go): nil means DefaultThresholds on a capped
	// plan, an empty list none.
	Alerts *[]Threshold `json:"alerts,omitempty"`
}

// Plan is one plan.
type Plan struct {
	Name          string             `json:"-"`
	Tier          Tier               `json:"tier"`
	MonthlyMicros int64              `json:"monthlyMicros"`
	Features      map[string]Feature `json:"features"`
	// KindePlanKeys are the Kinde plan keys (data.plan.key in Kinde's billing webhooks) that
	// mean this plan; StripePriceIDs are the Stripe price ids of its subscriptions. Each key or
	// id names at most one plan of the catalog.
	KindePlanKeys  []string `json:"kindePlanKeys,omitempty"`
	StripePriceIDs []string `json:"stripePriceIds,omitempty"`
}

// Definition says what a feature is, across plans: whether it is an allowance granted per cycle,
// and how the billing providers name its meter.
type Definition struct {
	// Allowance marks a feature whose cycle limit is the sum of keyed grant rows written when a
	// plan is entered or paid for in the cycle (e.g. credits), rather than a plan's fixed limit.
	Allowance bool `json:"allowance,omitempty"`
	// Kinde names the feature's meter in Kinde; nil means the feature is not reported to Kinde.
	Kinde *KindeMeter `json:"kinde,omitempty"`
	// Stripe names the feature's meter in Stripe; nil means it is not reported to Stripe.
	Stripe *StripeMeter `json:"stripe,omitempty"`
}

// KindeMeter is a feature's meter in Kinde: the billing feature code usage is recorded against.
type KindeMeter struct {
	FeatureCode string `json:"featureCode"`
}

// StripeMeter is a feature's meter in Stripe: the event name meter events are sent under, the
// meter's id, which its event summaries are read back from, and the meter's aggregation formula.
type StripeMeter struct {
	MeterEventName string `json:"meterEventName"`
	MeterID        string `json:"meterId"`
	// Aggregation is the Stripe meter's formula, which decides what Ferry sends it: "sum" takes
	// deltas (SUM and COUNT meters: each report sends what the total moved since the last),
	// "last" takes absolute values (MAX, UNIQUE_COUNT and LATEST meters: each report sends the
	// figure itself). Empty means the one the feature's meter needs (StripeAggregationFor).
	Aggregation StripeAggregation `json:"aggregation,omitempty"`
}

// StripeAggregation is a Stripe meter's aggregation formula, as Ferry uses it.
type StripeAggregation string

// Stripe aggregation formulas Ferry sends to.
const (
	// StripeSum: the meter adds the values of its events; Ferry sends deltas.
	StripeSum StripeAggregation = "sum"
	// StripeLast: the meter takes its last event's value in the period; Ferry sends the figure.
	StripeLast StripeAggregation = "last"
)

// StripeAggregationFor is the formula a Stripe meter must have for a Ferry meter of aggregation
// a. Additive sums (SUM, COUNT) go as deltas to a "sum" meter, as events always have: the
// deltas land in the windows their usage was reported in, so Stripe's own per-window summaries
// of the meter say something true. The others go as absolute values to a "last" meter: the
// figure of a MAX, a distinct count or a LATEST value is not a sum of increments (LATEST goes
// down; a correction can lower any of them), and an absolute write is safe to repeat and
// repairs in both directions (see docs/meters.md).
func StripeAggregationFor(a meter.Aggregation) StripeAggregation {
	if a == meter.Sum || a == meter.Count {
		return StripeSum
	}
	return StripeLast
}

// Catalog is every plan, the plan an unknown account is on, and what each feature is.
type Catalog struct {
	Default string `json:"default"`
	// Definitions says what each feature is; a feature without one is a plain metered feature
	// with a fixed limit per plan, reported to no provider.
	Definitions map[string]Definition `json:"features,omitempty"`
	Plans       map[string]Plan       `json:"plans"`
	// Meters are what events are worth (package meter): which events move which feature, by
	// what value, aggregated how. A catalog that defines none still counts every event toward
	// events (the built-in meter).
	Meters meter.Set `json:"meters"`
}

// catalogJSON is a catalog as the plans file writes it.
type catalogJSON struct {
	Default     string                      `json:"default"`
	Definitions map[string]Definition       `json:"features,omitempty"`
	Plans       map[string]Plan             `json:"plans"`
	Meters      map[string]meter.Definition `json:"meters,omitempty"`
}

// MarshalJSON writes the catalog as the plans file does, its meters included.
func (c Catalog) MarshalJSON() ([]byte, error) {
	return json.Marshal(catalogJSON{Default: c.Default, Definitions: c.Definitions, Plans: c.Plans, Meters: c.Meters.Definitions()})
}

// Default returns the built-in catalog.
func Default() Catalog {
	c, err := Parse(defaultJSON)
	if err != nil {
		panic(fmt.Sprintf("plans: the built-in catalog is invalid: %v", err)) // a build defect
	}
	return c
}

// Parse reads and validates a catalog, naming every problem it finds.
func Parse(data []byte) (Catalog, error) {
	// A member named twice anywhere (two meters, two plans of one name) would otherwise be read
	// as the last one, silently.
	if err := jsonbody.Check(data); err != nil {
		return Catalog{}, fmt.Errorf("parse plans: %w", err)
	}
	var in catalogJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return Catalog{}, fmt.Errorf("parse plans: %w", err)
	}
	c := Catalog{Default: in.Default, Definitions: in.Definitions, Plans: in.Plans}
	var errs []error
	set, err := meter.NewSet(in.Meters)
	if err != nil {
		errs = append(errs, err)
	}
	c.Meters = set
	if len(c.Plans) == 0 {
		errs = append(errs, errors.New("no plans"))
	}
	if _, ok := c.Plans[c.Default]; !ok {
		errs = append(errs, fmt.Errorf("default plan %q is not defined", c.Default))
	}
	kindeKeys, stripePrices := map[string]string{}, map[string]string{}
	for name, p := range c.Plans {
		for _, k := range p.KindePlanKeys {
			if other, taken := kindeKeys[k]; taken || k == "" {
				errs = append(errs, fmt.Errorf("plan %s: Kinde plan key %q is empty or also names plan %s", name, k, other))
			}
			kindeKeys[k] = name
		}
		for _, id := range p.StripePriceIDs {
			if other, taken := stripePrices[id]; taken || id == "" {
				errs = append(errs, fmt.Errorf("plan %s: Stripe price id %q is empty or also names plan %s", name, id, other))
			}
			stripePrices[id] = name
		}
		switch p.Tier {
		case Capped, Counted, Internal:
		default:
			errs = append(errs, fmt.Errorf("plan %s: unknown tier %q", name, p.Tier))
		}
		if _, ok := p.Features[FeatureEvents]; !ok {
			errs = append(errs, fmt.Errorf("plan %s: no %q feature", name, FeatureEvents))
		}
		for f, feat := range p.Features {
			if feat.Included < 0 || feat.OverageMicros < 0 || (feat.Grant != nil && *feat.Grant < 0) {
				errs = append(errs, fmt.Errorf("plan %s feature %s: negative quantity", name, f))
			}
			if feat.Alerts != nil {
				if err := CheckThresholds(*feat.Alerts); err != nil {
					errs = append(errs, fmt.Errorf("plan %s feature %s alerts: %w", name, f, err))
				}
				if p.Tier != Capped && len(*feat.Alerts) > 0 {
					errs = append(errs, fmt.Errorf("plan %s feature %s: alerts are decided on a capped plan's budget rows; a %s plan has none", name, f, p.Tier))
				}
				if c.Definitions[f].Allowance && len(*feat.Alerts) > 0 {
					errs = append(errs, fmt.Errorf("plan %s feature %s: an allowance feature has no alerts", name, f))
				}
			}
			allowance := c.Definitions[f].Allowance
			switch {
			case allowance && feat.Grant == nil:
				errs = append(errs, fmt.Errorf("plan %s feature %s: an allowance feature needs a grant", name, f))
			case !allowance && feat.Grant != nil:
				errs = append(errs, fmt.Errorf("plan %s feature %s: only an allowance feature has a grant", name, f))
			}
		}
		p.Name = name
		c.Plans[name] = p
	}
	for f, d := range c.Definitions {
		if !c.HasFeature(f) {
			errs = append(errs, fmt.Errorf("feature %s is defined but no plan has it", f))
		}
		if d.Allowance && f == FeatureEvents {
			errs = append(errs, fmt.Errorf("feature %s cannot be an allowance: events are capped by a plan limit", f))
		}
		if d.Kinde != nil && d.Kinde.FeatureCode == "" {
			errs = append(errs, fmt.Errorf("feature %s: kinde.featureCode is empty", f))
		}
		if d.Stripe != nil && (d.Stripe.MeterEventName == "" || d.Stripe.MeterID == "") {
			errs = append(errs, fmt.Errorf("feature %s: stripe needs meterEventName and meterId", f))
		}
	}
	for _, f := range c.Features() {
		if err := meter.CheckName("feature", f); err != nil {
			errs = append(errs, err)
		}
	}
	if err == nil {
		errs = append(errs, c.checkMeters()...)
	}
	if err := errors.Join(errs...); err != nil {
		return Catalog{}, fmt.Errorf("invalid plans: %w", err)
	}
	return c, nil
}

// checkMeters names every problem between the meters and the features they move: a feature no
// plan has, an allowance (granted per cycle, consumed by holds, never by events), a LATEST
// feature a plan caps, a Stripe meter whose formula the aggregation cannot be sent to.
func (c *Catalog) checkMeters() []error {
	var errs []error
	for _, name := range c.Meters.Names() {
		m, _ := c.Meters.Named(name)
		switch {
		case !c.HasFeature(m.Feature):
			errs = append(errs, fmt.Errorf("meter %s moves feature %s, which no plan has", name, m.Feature))
			continue
		case c.Definitions[m.Feature].Allowance:
			errs = append(errs, fmt.Errorf("meter %s moves feature %s, an allowance: allowances are granted per cycle and consumed by holds, not moved by events", name, m.Feature))
		}
		if !m.Aggregation.Capped() {
			for _, pn := range c.Names() {
				if f, ok := c.Plans[pn].Features[m.Feature]; ok && !f.Limit.Unlimited {
					errs = append(errs, fmt.Errorf("plan %s caps feature %s at %d, but its meter %s is a %s, which no limit caps: give it limit null",
						pn, m.Feature, f.Limit.Max, name, m.Aggregation))
				}
			}
		}
		d := c.Definitions[m.Feature]
		if d.Stripe == nil {
			continue
		}
		want := StripeAggregationFor(m.Aggregation)
		switch d.Stripe.Aggregation {
		case "":
			d.Stripe.Aggregation = want
		case want:
		default:
			errs = append(errs, fmt.Errorf("feature %s: its Stripe meter's aggregation is %q, but its meter %s (%s) is sent to a %q meter",
				m.Feature, d.Stripe.Aggregation, name, m.Aggregation, want))
		}
	}
	for f, d := range c.Definitions {
		if d.Stripe != nil && d.Stripe.Aggregation != "" && d.Stripe.Aggregation != StripeSum && d.Stripe.Aggregation != StripeLast {
			errs = append(errs, fmt.Errorf("feature %s: Stripe aggregation %q is not sum or last", f, d.Stripe.Aggregation))
		}
	}
	return errs
}

// MeterFor returns the meter that moves feature, if one does (holds and corrections move
// features no meter moves, such as tokens reserved by jobs).
func (c Catalog) MeterFor(feature string) (meter.Definition, bool) {
	return c.Meters.ForFeature(feature)
}

// StripeAggregation is the formula of feature's Stripe meter: its own, or the one its meter
// needs, or sum for a feature only holds and corrections move.
func (c Catalog) StripeAggregation(feature string) StripeAggregation {
	if d := c.Definitions[feature]; d.Stripe != nil && d.Stripe.Aggregation != "" {
		return d.Stripe.Aggregation
	}
	if m, ok := c.MeterFor(feature); ok {
		return StripeAggregationFor(m.Aggregation)
	}
	return StripeSum
}

// Definition returns what a feature is (the zero value for a plain metered feature).
func (c Catalog) Definition(feature string) Definition { return c.Definitions[feature] }

// Allowance reports whether feature is an allowance: its cycle limit is the sum of its grant rows.
func (c Catalog) Allowance(feature string) bool { return c.Definitions[feature].Allowance }

// AllowanceFeatures returns the allowance features, sorted.
func (c Catalog) AllowanceFeatures() []string {
	var out []string
	for f, d := range c.Definitions {
		if d.Allowance {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// PlanForKindeKey returns the plan a Kinde plan key names.
func (c Catalog) PlanForKindeKey(key string) (Plan, bool) {
	for _, p := range c.Plans {
		for _, k := range p.KindePlanKeys {
			if k == key {
				return p, true
			}
		}
	}
	return Plan{}, false
}

// PlanForStripePrice returns the plan a Stripe price id names.
func (c Catalog) PlanForStripePrice(priceID string) (Plan, bool) {
	for _, p := range c.Plans {
		for _, id := range p.StripePriceIDs {
			if id == priceID {
				return p, true
			}
		}
	}
	return Plan{}, false
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
// plan does not include it). For an allowance feature it is the plan's grant: what a cycle spent
// wholly on this plan may use. The limit of a cycle is the sum of its grant rows.
func (p Plan) Limit(feature string) Limit {
	f, ok := p.Features[feature]
	if !ok {
		return Max(0)
	}
	if f.Grant != nil {
		return Max(*f.Grant)
	}
	return f.Limit
}

// Grant is what the plan tops a cycle's allowance of feature up to (0 when it grants none).
func (p Plan) Grant(feature string) int64 {
	if f, ok := p.Features[feature]; ok && f.Grant != nil {
		return *f.Grant
	}
	return 0
}
