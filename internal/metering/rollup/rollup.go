// Package rollup keeps each meter's usage per minute and per hour, and answers the usage query
// from it.
//
// A rollup item is one (account, meter) and one minute or hour: pk = "<account>#<meter>", sk =
// "m#<minute start>" or "h#<hour start>" (RFC 3339, UTC, so keys sort by time). It holds one
// attribute per group of the meter's dimension values, named by the JSON array of those values
// in the meter's definition order (`["gpt-4","eu"]`, `[]` for a meter without dimensions), and
// `rev`, the number of writes it took. Minute items expire resources.RollupMinuteRetention after
// their minute (`expiresAt`); hour items are kept.
//
// The writes are planned here (PlanWrites) and committed by the caller in the same
// TransactWriteItems that claims and bills the events they count, so a rollup moves exactly when
// the ledger does: a redelivery, a crash, a unit regrouped differently — the claim's conditions
// decide, and the rollup follows. Additive aggregations (SUM, COUNT, UNIQUE_COUNT's first
// sightings) write with ADD and need no condition. MAX and LATEST write with SET, guarded by the
// item's rev as read before the claim (Keys lists the items to read); a cancelled claim re-reads
// and re-plans.
//
// The window of an event is the instant Ferry received it, the instant its billing cycle is
// taken from, so a CYCLE window equals the ledger's total for the cycle exactly.
package rollup

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Bounds of what a rollup holds. A contribution's value and dimensions are bounded by the
// meter package's (meter.MaxValue, meter.MaxDimensions, meter.MaxDimensionValueBytes).
const (
	// MaxItemGroupBytes bounds the groups an hour item takes on: a group not yet in the item
	// joins it only while the item's groups, as read before the claim, and the ones the plan adds
	// stay within it. A group past it is counted in OtherGroup. It bounds what a write costs
	// (DynamoDB bills a transactional write 2 units per KB of the larger of the item before and
	// after) and what a month of hour items costs to read. Concurrent claims planned from one read
	// can pass it by what each adds; DynamoDB's 400 KB item bound is far beyond that, and a write
	// refused for it leaves the item as it was, for the next read to see full.
	MaxItemGroupBytes = 8 << 10
	// MaxWriteGroups bounds the groups one plan writes to one item, which keeps each write's
	// update expression inside DynamoDB's bounds (4 KB of expression, 300 operators). A claim
	// writes at most one group per event and meter, and a unit holds at most 97 events.
	MaxWriteGroups = 128
	// maxOrderKeyBytes bounds a LATEST contribution's order key.
	maxOrderKeyBytes = 300
)

// OtherGroup is the attribute that counts the groups an hour item had no room for (see
// MaxItemGroupBytes), in the hour item and in the minute items of that hour alike: a group is
// counted under its own name in a minute item only if the hour item keeps it too, so minute and
// hour items of one hour always agree on what is "other". It is not a JSON array, so no group's
// name is ever the same.
const OtherGroup = "other"

// Attributes of a rollup item besides its groups.
const (
	attrPK        = "pk"
	attrSK        = "sk"
	attrRev       = "rev"
	attrExpiresAt = resources.RollupTTLAttribute
	// A LATEST cell is a map of the value and its order key.
	cellValue    = "v"
	cellOrderKey = "k"
)

// Key prefixes of minute and hour items.
const (
	minutePrefix = "m#"
	hourPrefix   = "h#"
	// keyLayout writes an instant in a sort key: RFC 3339 in UTC, so keys sort by time.
	keyLayout = "2006-01-02T15:04:05Z"
)

// LatestOrderKey is the order key of a LATEST contribution: the event's time (its CloudEvents
// `time`, or without one the instant Ferry received it), then its id, so that of two events at the
// same instant the one with the larger id is the latest. Keys of any two instants compare as the
// instants do, before 1970 included.
func LatestOrderKey(eventTimeMs int64, eventID string) string {
	// Flipping the sign bit orders every int64 as an unsigned number.
	return fmt.Sprintf("%020d#%s", uint64(eventTimeMs)^(1<<63), eventID)
}

// PartitionKey is the partition of an account's meter.
func PartitionKey(account, meter string) string { return account + "#" + meter }

// MinuteKey is the sort key of the minute item holding t.
func MinuteKey(t time.Time) string {
	return minutePrefix + t.UTC().Truncate(time.Minute).Format(keyLayout)
}

// HourKey is the sort key of the hour item holding t.
func HourKey(t time.Time) string { return hourPrefix + t.UTC().Truncate(time.Hour).Format(keyLayout) }

// keyInstant reads the kind and the instant of a sort key.
func keyInstant(sk string) (hour bool, t time.Time, err error) {
	switch {
	case len(sk) > len(hourPrefix) && sk[:len(hourPrefix)] == hourPrefix:
		hour = true
	case len(sk) > len(minutePrefix) && sk[:len(minutePrefix)] == minutePrefix:
	default:
		return false, time.Time{}, fmt.Errorf("rollup key %q is neither a minute's nor an hour's", sk)
	}
	t, err = time.Parse(keyLayout, sk[2:])
	if err != nil {
		return false, time.Time{}, fmt.Errorf("rollup key %q: %w", sk, err)
	}
	return hour, t, nil
}

// GroupName is the attribute that holds a group: the JSON array of its values, as written (no
// HTML escaping, nothing replaced). A value that is not valid UTF-8 has no name: JSON would
// rewrite it.
func GroupName(values []string) (string, error) {
	for i, v := range values {
		if !utf8.ValidString(v) {
			return "", fmt.Errorf("dimension value %d is not valid UTF-8", i+1)
		}
	}
	if values == nil {
		values = []string{}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(values); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// groupValues reads a group's name back into its values.
func groupValues(name string) ([]string, error) {
	var values []string
	if err := json.Unmarshal([]byte(name), &values); err != nil {
		return nil, fmt.Errorf("rollup group %q: %w", name, err)
	}
	return values, nil
}

// isGroup reports whether an item's attribute is a group (or OtherGroup).
func isGroup(attr string) bool { return attr == OtherGroup || len(attr) > 0 && attr[0] == '[' }

// ValidMeterName reports whether name can name a meter's rollups: a meter's name never holds
// '#', which keys are built with.
func ValidMeterName(name string) bool { return meter.CheckName("meter", name) == nil }
