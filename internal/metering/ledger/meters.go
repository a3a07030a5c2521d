package ledger

import (
	"fmt"
	"sort"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/usage"
)

// Meters in the claim. A unit's claim moves every meter its admitted members match, in the same
// transaction that claims them: per feature moved, one counter write (an ADD of the unit's sum
// for SUM, COUNT and new distinct values; a SET of the unit's maximum or latest value for MAX
// and LATEST, when it beats the row as read) with its report mark, and the unit's record of what
// it moved; per distinct value first counted, its marker; the rollup items. Each admitted entry
// keeps the values it moved (MeterValue), so its status shows them and a reader can re-derive
// what the unit did.
//
// Admission is decided here, as a pure function of the unit and the state read before the claim
// (PlanUnit): members are taken in unit order and each is admitted when every capped meter it
// moves still fits, counting the members admitted before it; a member that does not fit is
// REJECTED whole, its reason naming the meter, what is committed, the limit and what the event
// needed, and none of its meters moves. An event is a record of work already done: billing part
// of it would make the provider's meter disagree with the event, and admitting before the work
// is what holds are for.

// MeterValue is what an admitted event moved on one meter, as its entry keeps it.
type MeterValue struct {
	Meter string `dynamodbav:"m"`
	// Value is the value moved: the event's value (SUM, MAX, LATEST), 1 (COUNT), 1 for a
	// UNIQUE_COUNT sighting.
	Value int64 `dynamodbav:"v"`
	// Group is the meter's dimension values, in definition order.
	Group []string `dynamodbav:"g,omitempty"`
	// Distinct is a UNIQUE_COUNT value as rendered; New says this event counted it (its first
	// sighting in the cycle).
	Distinct string `dynamodbav:"d,omitempty"`
	New      bool   `dynamodbav:"n,omitempty"`
}

// implicitEvents reports whether a reading is the built-in events count with no dimensions: every
// billed entry moved it, so entries leave it out (the entry stays as small as before meters) and
// readers add it back (Entry.MeterValues).
func implicitEvents(r meter.Reading) bool { return r.BareCount() }

// MeterValues are the values the entry's billed event gave its meters, the built-in events count
// included (see implicitEvents); whether they moved a counter is the tier's (internal traffic
// consumes nothing).
func (e Entry) MeterValues() []MeterValue {
	out := append([]MeterValue(nil), e.Meters...)
	if e.Billed() {
		for _, m := range out {
			if m.Meter == meter.EventsMeter {
				return out
			}
		}
		out = append([]MeterValue{{Meter: meter.EventsMeter, Value: 1}}, out...)
	}
	return out
}

// UnitMember is one unclaimed member of a unit, as the claim plans it.
type UnitMember struct {
	// Entry is the member's entry as the claim would put it (its archive location, its unit).
	Entry Entry
	// Readings are what the event gives its meters; Refused, when set, is why it cannot give
	// them (a *meter.Rejection), and the member is REJECTED with it.
	Readings []meter.Reading
	Refused  error
}

// UnitState is what a unit's claim reads before it plans: per feature, the budget row (its
// figures, rev and order) and whether the counter row the unit moves is marked; the distinct
// values already counted this cycle.
type UnitState struct {
	Rows     map[string]usage.Row
	Marked   map[string]bool
	Distinct map[string]bool // DistinctKey(feature, hash)
}

// DistinctKey names a distinct value of a feature in UnitState.Distinct.
func DistinctKey(feature, hash string) string { return feature + "\x00" + hash }

// UnitInput is what planning a unit's claim takes.
type UnitInput struct {
	AccountID string
	Unit      string
	Cycle     string
	NowMs     int64
	Billing   Billing
	// Limit is the account's limit of a feature (plans.Limit; the account's override or its
	// plan's).
	Limit func(feature string) plans.Limit
	// Open are the members without an entry, in unit order.
	Open  []UnitMember
	State UnitState
	// Thresholds are the account's thresholds of a feature, resolved against its limit, lowest
	// first; nil decides no alerts (a store without a notifications table).
	Thresholds func(feature string) []plans.Level
}

// Move is one feature's counter write in a unit's claim.
type Move struct {
	Feature     string
	Meter       string
	Aggregation meter.Aggregation
	// Row is the counter row's sort key: the budget row, or a shard for counted additive usage.
	Row string
	// Add is what an additive meter adds; Capped says the add is conditional on the budget row's
	// room under Limit.
	Add    int64
	Capped bool
	Limit  plans.Limit
	// Set says a MAX or LATEST figure is replaced by Value (Order: its event's order key), from
	// the row as read at Rev.
	Set   bool
	Value int64
	Order string
	Rev   int64
	// MarkPresent: the counter row's report mark was read present (checked, not put).
	MarkPresent bool
	// Record is the unit's record of what it moved, for every meter that keeps records.
	Record *usage.Record
	// Alerts are what a capped add decides about the budget row's alerts (alerts.go).
	Alerts usage.Alerts
}

// Writes reports whether the move writes its counter row (and so its mark).
func (m Move) Writes() bool { return m.Add > 0 || m.Set }

// Marker is a distinct value first counted by the unit.
type Marker struct {
	Feature string
	Hash    string
}

// UnitPlan is a unit's claim, planned.
type UnitPlan struct {
	// Admit are the admitted entries, each with the values it moves; Reject the refused ones,
	// each with its reason.
	Admit  []Entry
	Reject []Entry
	Moves  []Move
	// Markers are the distinct values the unit counts first.
	Markers       []Marker
	Contributions []meter.Contribution
	// Notes are the notifications the claim decides (alerts.go), and Alerted the alerts it
	// records on budget rows it moves nothing on.
	Notes   []notify.Notification
	Alerted []Alerted
}

// feature accumulates one feature's part of a unit's claim as members are admitted.
type featureAcc struct {
	def       meter.Definition
	committed int64 // the budget row's committed as read, plus what earlier members added
	add       int64
	events    int64
	max       int64
	hasMax    bool
	latest    int64
	order     string
	seen      map[string]bool
}

// PlanUnit decides a unit's claim: which open members are admitted and what each moves, from the
// unit alone and the state read before the claim. The same unit and the same state always give
// the same plan.
func PlanUnit(in UnitInput) UnitPlan {
	var p UnitPlan
	accs := map[string]*featureAcc{}
	limited := map[string]string{} // feature → meter, for the features whose limit refused a member
	acc := func(r meter.Reading) *featureAcc {
		a := accs[r.Feature]
		if a == nil {
			row := in.State.Rows[r.Feature]
			a = &featureAcc{committed: row.Committed, seen: map[string]bool{}}
			a.def.Name, a.def.Feature, a.def.Aggregation = r.Meter, r.Feature, r.Aggregation
			accs[r.Feature] = a
		}
		return a
	}
	capped := in.Billing.Kind == BillCapped
	for _, m := range in.Open {
		e := m.Entry
		switch {
		case in.Billing.Kind == BillReject:
			e.Reason = in.Billing.Reason
		case m.Refused != nil:
			e.Reason = m.Refused.Error()
		case in.Billing.Kind == BillCheckpointOnly:
			// Nothing is consumed; the values are kept on the entry, for the record.
			e.Meters = keptValues(m.Readings, nil)
		default:
			if reason, at := refusal(in, m.Readings, acc, capped); reason != "" {
				e.Reason = reason
				if at.Aggregation.Additive() {
					limited[at.Feature] = at.Meter
				}
			} else {
				e.Meters = keptValues(m.Readings, func(r meter.Reading) bool {
					a := acc(r)
					h := r.DistinctHash()
					return !in.State.Distinct[DistinctKey(r.Feature, h)] && !a.seen[h]
				})
				admit(&p, in, m, acc)
			}
		}
		if e.Reason != "" {
			p.Reject = append(p.Reject, e)
			continue
		}
		p.Admit = append(p.Admit, e)
	}
	features := make([]string, 0, len(accs))
	for f := range accs {
		features = append(features, f)
	}
	sort.Strings(features)
	for _, f := range features {
		if mv, ok := move(in, accs[f]); ok {
			p.Moves = append(p.Moves, mv)
		}
	}
	if capped && in.Thresholds != nil {
		decideAlerts(&p, in, limited)
	}
	return p
}

// refusal is why a member cannot be admitted under the caps, or "": every capped meter it moves
// must fit, counting what the members admitted before it added.
func refusal(in UnitInput, rs []meter.Reading, acc func(meter.Reading) *featureAcc, capped bool) (string, meter.Reading) {
	if !capped {
		return "", meter.Reading{}
	}
	for _, r := range rs {
		limit := in.Limit(r.Feature)
		if limit.Unlimited || !r.Aggregation.Capped() {
			continue
		}
		a := acc(r)
		switch r.Aggregation {
		case meter.Max:
			if r.Value > limit.Max {
				return fmt.Sprintf("monthly limit reached: %s limit is %d (meter %s: this event's value %d is above it)",
					r.Feature, limit.Max, r.Meter, r.Value), r
			}
		case meter.UniqueCount:
			h := r.DistinctHash()
			if in.State.Distinct[DistinctKey(r.Feature, h)] || a.seen[h] {
				continue // already counted this cycle: it adds nothing
			}
			if !limit.Check(a.committed, 1).Fits {
				return fmt.Sprintf("monthly limit reached: %s limit is %d (meter %s has %d distinct values; this event brings a new one)",
					r.Feature, limit.Max, r.Meter, a.committed), r
			}
		default:
			if !limit.Check(a.committed, r.Value).Fits {
				return fmt.Sprintf("monthly limit reached: %s limit is %d (meter %s has %d committed; this event needs %d)",
					r.Feature, limit.Max, r.Meter, a.committed, r.Value), r
			}
		}
	}
	return "", meter.Reading{}
}

// admit adds an admitted member's readings to the unit's accumulators, markers and rollup
// contributions.
func admit(p *UnitPlan, in UnitInput, m UnitMember, acc func(meter.Reading) *featureAcc) {
	for _, r := range m.Readings {
		a := acc(r)
		a.events++
		c := meter.Contribution{Meter: r.Meter, Aggregation: r.Aggregation, AtMs: m.Entry.ReceivedAtMs, Group: r.Group, Value: r.Value, OrderKey: r.OrderKey}
		switch r.Aggregation {
		case meter.UniqueCount:
			h := r.DistinctHash()
			if in.State.Distinct[DistinctKey(r.Feature, h)] || a.seen[h] {
				continue // counted already: no marker, no contribution
			}
			a.seen[h] = true
			a.add++
			a.committed++
			p.Markers = append(p.Markers, Marker{Feature: r.Feature, Hash: h})
		case meter.Max:
			if !a.hasMax || r.Value > a.max {
				a.max, a.hasMax = r.Value, true
			}
		case meter.Latest:
			if r.OrderKey > a.order {
				a.latest, a.order = r.Value, r.OrderKey
			}
		default:
			a.add += r.Value
			a.committed += r.Value
		}
		p.Contributions = append(p.Contributions, c)
	}
}

// keptValues are the values an entry keeps of its readings (the plain events count left out);
// isNew says whether a UNIQUE_COUNT reading counts a new value (nil: none is counted).
func keptValues(rs []meter.Reading, isNew func(meter.Reading) bool) []MeterValue {
	var out []MeterValue
	for _, r := range rs {
		if implicitEvents(r) {
			continue
		}
		mv := MeterValue{Meter: r.Meter, Value: r.Value, Group: r.Group, Distinct: r.Distinct}
		if r.Aggregation == meter.UniqueCount && isNew != nil {
			mv.New = isNew(r)
		}
		out = append(out, mv)
	}
	return out
}

// move is a feature's counter write and record, if the unit moves it.
func move(in UnitInput, a *featureAcc) (Move, bool) {
	if a.events == 0 {
		return Move{}, false
	}
	m := Move{Feature: a.def.Feature, Meter: a.def.Name, Aggregation: a.def.Aggregation, MarkPresent: in.State.Marked[a.def.Feature]}
	row := in.State.Rows[a.def.Feature]
	rec := &usage.Record{Unit: in.Unit, Events: a.events, AtMs: in.NowMs}
	switch a.def.Aggregation {
	case meter.Max:
		m.Row, rec.Amount = usage.BudgetSK, a.max
		if !row.Exists || a.max > row.Used {
			m.Set, m.Value, m.Rev = true, a.max, row.Rev
		}
	case meter.Latest:
		m.Row, rec.Amount, rec.Order = usage.BudgetSK, a.latest, a.order
		if a.order > row.Order {
			m.Set, m.Value, m.Order, m.Rev = true, a.latest, a.order, row.Rev
		}
	default:
		m.Add, rec.Amount = a.add, a.add
		m.Row = MeterRowSK(in.Billing, in.Unit)
		if in.Billing.Kind == BillCapped {
			m.Capped, m.Limit = true, in.Limit(a.def.Feature)
		}
		if a.add == 0 {
			rec = nil // nothing moved: nothing to record
		}
	}
	if rec != nil && meter.KeepsRecords(a.def.Name, a.def.Feature) {
		rec.Row = m.Row
		m.Record = rec
	}
	if !m.Writes() && m.Record == nil {
		return Move{}, false
	}
	return m, true
}

// Items is how many items the plan's claim transaction holds, its rows item and rollup writes
// apart.
func (p UnitPlan) Items() int {
	n := len(p.Admit) + len(p.Reject) + len(p.Markers)
	recorded := false
	for _, m := range p.Moves {
		if m.Writes() {
			n += 2 // the counter row and its mark
		}
		recorded = recorded || m.Record != nil
	}
	if recorded {
		n++ // the unit's record, one for every feature it moved
	}
	return n + len(p.Notes) + len(p.Alerted)
}
