package meter

import "time"

// Footprint counts the items the meters of a unit's events add to its claim transaction
// (DynamoDB allows 100 items in one TransactWriteItems). A unit of the worker — the events of one
// account claimed, metered and rowed in one transaction — grows message by message while its
// items fit, so the count is taken as it grows, before anything is read: it is an upper bound of
// what the claim will write.
//
// Per feature moved: its counter row's write and its report mark (a check or a put). Per unit, if
// it moves any meter but the built-in events count (whose ledger entries are indexed by the
// counter row they moved): the unit's record of what it moved, one item for all its features,
// which the reconciler sums. Per distinct value
// of a UNIQUE_COUNT meter: its marker (a value already counted this cycle writes none, but the
// bound counts it). Per meter: its rollup items, one per minute and one per hour the unit's events
// were received in.
type Footprint struct {
	features map[string]bool
	recorded bool
	distinct map[string]bool
	minutes  map[string]bool
	hours    map[string]bool
}

// Items per feature moved: the counter row and its mark; per unit whose meters keep records: one.
const (
	itemsPerFeature = 2
	itemsPerRecord  = 1
)

// Add counts one event's readings, received at receivedAtMs.
func (f *Footprint) Add(rs []Reading, receivedAtMs int64) {
	if f.features == nil {
		f.features, f.distinct = map[string]bool{}, map[string]bool{}
		f.minutes, f.hours = map[string]bool{}, map[string]bool{}
	}
	at := time.UnixMilli(receivedAtMs).UTC()
	minute, hour := at.Truncate(time.Minute).Format(time.RFC3339), at.Truncate(time.Hour).Format(time.RFC3339)
	for _, r := range rs {
		f.features[r.Feature] = true
		f.recorded = f.recorded || KeepsRecords(r.Meter, r.Feature)
		if r.Aggregation == UniqueCount {
			f.distinct[r.Feature+"\x00"+r.DistinctHash()] = true
		}
		f.minutes[r.Meter+"\x00"+minute] = true
		f.hours[r.Meter+"\x00"+hour] = true
	}
}

// Items is the bound of the items the counted readings add to a claim.
func (f Footprint) Items() int {
	n := itemsPerFeature*len(f.features) + len(f.distinct) + len(f.minutes) + len(f.hours)
	if f.recorded {
		n += itemsPerRecord
	}
	return n
}

// Clone returns an independent copy, for trying whether one more message fits.
func (f Footprint) Clone() Footprint {
	c := Footprint{}
	if f.features == nil {
		return c
	}
	c.features, c.recorded, c.distinct = clone(f.features), f.recorded, clone(f.distinct)
	c.minutes, c.hours = clone(f.minutes), clone(f.hours)
	return c
}

func clone(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// KeepsRecords reports whether a meter's claims write the unit's record of what they moved: every
// meter but the built-in events count, whose entries the ledger's meter index already finds.
func KeepsRecords(meterName, feature string) bool {
	return !(meterName == EventsMeter && feature == FeatureEvents)
}
