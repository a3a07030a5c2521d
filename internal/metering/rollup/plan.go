package rollup

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// The conditions of MAX and LATEST writes (see Guards), and how their update expressions begin.
const (
	// newCondition: the item was read absent, so the plan holds every value it has.
	newCondition = "attribute_not_exists(#pk)"
	// revCondition: the item is still at the rev read, so nothing raised a value since.
	revCondition = "#rev = :rev"
	// setUpdatePrefix begins every MAX and LATEST write; addUpdatePrefix every additive one.
	setUpdatePrefix = "SET #rev = :next"
	addUpdatePrefix = "ADD #rev :one"
)

// Item is a rollup item as read before a claim.
type Item struct {
	PK, SK string
	// Exists: the read found the item. An item Keys listed that the read did not return is
	// absent.
	Exists bool
	// Rev is the item's rev as read.
	Rev int64
	// Cells are its groups, by attribute name (GroupName, or OtherGroup).
	Cells map[string]Cell
}

// Cell is one group's value in an item.
type Cell struct {
	Value int64
	// OrderKey is a LATEST cell's order key.
	OrderKey string
}

// Plan is what a claim adds to its transaction for the rollups: at most one write per item.
type Plan struct {
	Writes []types.TransactWriteItem
}

// itemID identifies an item in a read.
func itemID(pk, sk string) string { return pk + "\n" + sk }

// needsRead reports whether the item of c's meter (its hour item when hour) must be read before
// a claim plans its writes: every item of a MAX or LATEST meter (the write is guarded by the rev
// read), and the hour item of an additive meter with dimensions (the groups it keeps decide
// which of them a plan may add, MaxItemGroupBytes). An additive meter without dimensions has one
// group and reads nothing.
func needsRead(c meter.Contribution, hour bool) bool {
	return !c.Aggregation.Additive() || hour && len(c.Group) > 0
}

// Keys lists the items to read, strongly consistent, before planning a claim of these
// contributions (see needsRead), deduplicated and in key order. The contributions may be those of
// more events than the claim then admits: PlanWrites needs only the items of what it plans.
func Keys(account string, cs []meter.Contribution) []map[string]types.AttributeValue {
	seen := map[string]bool{}
	type key struct{ pk, sk string }
	var keys []key
	for _, c := range cs {
		at := time.UnixMilli(c.AtMs)
		pk := PartitionKey(account, c.Meter)
		for _, hour := range []bool{true, false} {
			if !needsRead(c, hour) {
				continue
			}
			sk := MinuteKey(at)
			if hour {
				sk = HourKey(at)
			}
			if id := itemID(pk, sk); !seen[id] {
				seen[id] = true
				keys = append(keys, key{pk, sk})
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].pk < keys[j].pk || keys[i].pk == keys[j].pk && keys[i].sk < keys[j].sk
	})
	out := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		out[i] = map[string]types.AttributeValue{attrPK: dynamo.S(k.pk), attrSK: dynamo.S(k.sk)}
	}
	return out
}

// WriteCount is how many items a claim of these contributions writes at most: one per (meter,
// minute) and one per (meter, hour). A unit counts it against the transaction's 100 items as it
// grows.
func WriteCount(account string, cs []meter.Contribution) int {
	seen := map[string]bool{}
	for _, c := range cs {
		at := time.UnixMilli(c.AtMs)
		pk := PartitionKey(account, c.Meter)
		seen[itemID(pk, MinuteKey(at))] = true
		seen[itemID(pk, HourKey(at))] = true
	}
	return len(seen)
}

// ReadItems is the read PlanWrites takes: every item of keys, as got returned it (a
// BatchGetItem's items, in any order), or absent. got may hold more (a unit reads the items of
// every member it may admit, and plans the writes of those it does): the others are left out.
func ReadItems(keys, got []map[string]types.AttributeValue) (map[string]Item, error) {
	read := make(map[string]Item, len(keys))
	for _, k := range keys {
		pk, sk := dynamo.Str(k, attrPK), dynamo.Str(k, attrSK)
		read[itemID(pk, sk)] = Item{PK: pk, SK: sk}
	}
	for _, raw := range got {
		id := itemID(dynamo.Str(raw, attrPK), dynamo.Str(raw, attrSK))
		if _, listed := read[id]; !listed {
			continue
		}
		it, err := decodeItem(raw)
		if err != nil {
			return nil, err
		}
		read[id] = it
	}
	return read, nil
}

// decodeItem reads a stored rollup item.
func decodeItem(raw map[string]types.AttributeValue) (Item, error) {
	it := Item{PK: dynamo.Str(raw, attrPK), SK: dynamo.Str(raw, attrSK), Exists: true, Rev: dynamo.Int(raw, attrRev), Cells: map[string]Cell{}}
	for name, v := range raw {
		if !isGroup(name) {
			continue
		}
		c, err := decodeCell(v)
		if err != nil {
			return Item{}, fmt.Errorf("rollup item %s %s, group %s: %w", it.PK, it.SK, name, err)
		}
		it.Cells[name] = c
	}
	return it, nil
}

func decodeCell(v types.AttributeValue) (Cell, error) {
	switch x := v.(type) {
	case *types.AttributeValueMemberN:
		n, err := strconv.ParseInt(x.Value, 10, 64)
		if err != nil {
			return Cell{}, fmt.Errorf("value %q is not an integer", x.Value)
		}
		return Cell{Value: n}, nil
	case *types.AttributeValueMemberM:
		n, ok := x.Value[cellValue].(*types.AttributeValueMemberN)
		k, kok := x.Value[cellOrderKey].(*types.AttributeValueMemberS)
		if !ok || !kok {
			return Cell{}, errors.New("a LATEST cell without its value and order key")
		}
		v, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return Cell{}, fmt.Errorf("value %q is not an integer", n.Value)
		}
		return Cell{Value: v, OrderKey: k.Value}, nil
	}
	return Cell{}, fmt.Errorf("a cell of type %T", v)
}

// cellBytes is what a group adds to an item, by DynamoDB's sizing (a number takes at most 21
// bytes; a map 3 bytes and 1 a member beside its members' names and values).
func cellBytes(name string, c Cell) int {
	if c.OrderKey != "" {
		return len(name) + 3 + (len(cellValue) + 21 + 1) + (len(cellOrderKey) + len(c.OrderKey) + 1)
	}
	return len(name) + 21
}

// validate refuses contributions no caller should build: each is a programmer's error, since the
// worker validates every event against its meters before it contributes.
func validate(account string, cs []meter.Contribution) error {
	if account == "" || strings.Contains(account, "#") {
		return fmt.Errorf("rollup: account %q", account)
	}
	type shape struct {
		agg   meter.Aggregation
		arity int
	}
	shapes := map[string]shape{}
	for i, c := range cs {
		var problems []string
		if !ValidMeterName(c.Meter) {
			problems = append(problems, fmt.Sprintf("meter %q is not a meter name", c.Meter))
		}
		if !c.Aggregation.Valid() {
			problems = append(problems, fmt.Sprintf("aggregation %q", c.Aggregation))
		}
		if s, ok := shapes[c.Meter]; ok && (s.agg != c.Aggregation || s.arity != len(c.Group)) {
			problems = append(problems, fmt.Sprintf("meter %s is %s with %d dimensions in one contribution and %s with %d in another",
				c.Meter, s.agg, s.arity, c.Aggregation, len(c.Group)))
		}
		shapes[c.Meter] = shape{c.Aggregation, len(c.Group)}
		if len(c.Group) > meter.MaxDimensions {
			problems = append(problems, fmt.Sprintf("%d dimensions (at most %d)", len(c.Group), meter.MaxDimensions))
		}
		for j, v := range c.Group {
			if len(v) > meter.MaxDimensionValueBytes || !utf8.ValidString(v) {
				problems = append(problems, fmt.Sprintf("dimension %d is not valid UTF-8 of at most %d bytes", j+1, meter.MaxDimensionValueBytes))
			}
		}
		switch {
		case c.Value < 0 || c.Value > meter.MaxValue:
			problems = append(problems, fmt.Sprintf("value %d is not within 0..%d", c.Value, int64(meter.MaxValue)))
		case (c.Aggregation == meter.Count || c.Aggregation == meter.UniqueCount) && c.Value != 1:
			problems = append(problems, fmt.Sprintf("a %s contribution is 1, not %d", c.Aggregation, c.Value))
		}
		if (c.Aggregation == meter.Latest) != (c.OrderKey != "") || len(c.OrderKey) > maxOrderKeyBytes {
			problems = append(problems, "a LATEST contribution, and only one, carries an order key (LatestOrderKey)")
		}
		if c.AtMs < 0 || c.AtMs >= maxInstantMs {
			problems = append(problems, fmt.Sprintf("instant %d is not within the years 1970 to 9999", c.AtMs))
		}
		if len(problems) > 0 {
			return fmt.Errorf("rollup: contribution %d: %s", i+1, strings.Join(problems, "; "))
		}
	}
	return nil
}

// maxInstantMs is the first instant of the year 10000, which a sort key cannot write.
var maxInstantMs = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// pending is one item's share of a plan.
type pending struct {
	pk, sk string
	minute bool
	at     time.Time
	agg    meter.Aggregation
	cells  map[string]Cell
}

// fold adds c's value to cell as its aggregation folds.
func fold(agg meter.Aggregation, cell Cell, had bool, c Cell) Cell {
	switch {
	case !had:
		return c
	case agg.Additive():
		cell.Value += c.Value
	case agg == meter.Max:
		cell.Value = max(cell.Value, c.Value)
	case agg == meter.Latest && c.OrderKey > cell.OrderKey:
		cell = c
	}
	return cell
}

// PlanWrites plans the rollup writes of a claim that admits the events behind cs, from read
// (ReadItems over Keys, strongly consistent, before the claim). Every item gets at most one
// write, with every group the claim moves in it:
//   - SUM, COUNT and UNIQUE_COUNT add (ADD), unconditionally: any order of any claims adds up.
//   - MAX and LATEST set the groups the claim raises (a larger value; a larger order key), on
//     the condition that the item is still as read (absent, or at the rev read); a group the
//     claim does not raise is left alone, and an item with none is not written.
//
// A group an hour item has no room for is counted in OtherGroup, there and in the minute item.
// Minute items carry their expiry. The writes are in key order, so the same contributions and
// read always plan the same writes.
func PlanWrites(table, account string, cs []meter.Contribution, read map[string]Item) (Plan, error) {
	if err := validate(account, cs); err != nil {
		return Plan{}, err
	}
	items := map[string]*pending{}
	// kept are the groups each hour item keeps, as read and as this plan adds them, and used
	// their bytes.
	type hourGroups struct {
		kept map[string]bool
		used int
	}
	hours := map[string]*hourGroups{}
	lookup := func(id string) (Item, error) {
		it, ok := read[id]
		if !ok {
			return Item{}, fmt.Errorf("rollup: item %q was not read before planning (Keys lists it)", strings.ReplaceAll(id, "\n", " "))
		}
		return it, nil
	}
	for _, c := range cs {
		name, err := GroupName(c.Group)
		if err != nil {
			return Plan{}, err
		}
		at := time.UnixMilli(c.AtMs).UTC()
		pk := PartitionKey(account, c.Meter)
		hourID := itemID(pk, HourKey(at))
		hg := hours[hourID]
		if hg == nil {
			hg = &hourGroups{kept: map[string]bool{}}
			if needsRead(c, true) {
				it, err := lookup(hourID)
				if err != nil {
					return Plan{}, err
				}
				for n, cell := range it.Cells {
					if n != OtherGroup {
						hg.kept[n] = true
						hg.used += cellBytes(n, cell)
					}
				}
			}
			hours[hourID] = hg
		}
		target := name
		if len(c.Group) > 0 && !hg.kept[name] {
			// The largest a cell of this group can grow to.
			if b := cellBytes(name, Cell{OrderKey: c.OrderKey}); hg.used+b <= MaxItemGroupBytes {
				hg.kept[name], hg.used = true, hg.used+b
			} else {
				target = OtherGroup
			}
		}
		for _, minute := range []bool{true, false} {
			sk := HourKey(at)
			if minute {
				sk = MinuteKey(at)
			}
			p := items[itemID(pk, sk)]
			if p == nil {
				p = &pending{pk: pk, sk: sk, minute: minute, at: at, agg: c.Aggregation, cells: map[string]Cell{}}
				items[itemID(pk, sk)] = p
			}
			cell, had := p.cells[target]
			p.cells[target] = fold(c.Aggregation, cell, had, Cell{Value: c.Value, OrderKey: c.OrderKey})
		}
	}
	ids := make([]string, 0, len(items))
	for id := range items {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var plan Plan
	for _, id := range ids {
		p := items[id]
		if len(p.cells) > MaxWriteGroups {
			return Plan{}, fmt.Errorf("rollup: %d groups for the item %s %s in one plan (at most %d)", len(p.cells), p.pk, p.sk, MaxWriteGroups)
		}
		if p.agg.Additive() {
			plan.Writes = append(plan.Writes, addWrite(table, p))
			continue
		}
		it, err := lookup(id)
		if err != nil {
			return Plan{}, err
		}
		if w, ok := setWrite(table, p, it); ok {
			plan.Writes = append(plan.Writes, w)
		}
	}
	return plan, nil
}

// sortedNames are a pending item's groups in name order.
func sortedNames(cells map[string]Cell) []string {
	names := make([]string, 0, len(cells))
	for n := range cells {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// expiry is when a minute item expires (epoch seconds).
func expiry(minute time.Time) int64 {
	return minute.Truncate(time.Minute).Add(resources.RollupMinuteRetention).Unix()
}

// addWrite adds an additive item's groups: ADD needs no read and no condition, since additions
// commute and each claim commits once.
func addWrite(table string, p *pending) types.TransactWriteItem {
	names := map[string]string{"#rev": attrRev}
	values := map[string]types.AttributeValue{":one": dynamo.N(1)}
	expr := addUpdatePrefix
	for i, n := range sortedNames(p.cells) {
		ph := "g" + strconv.Itoa(i)
		names["#"+ph], values[":"+ph] = n, dynamo.N(p.cells[n].Value)
		expr += fmt.Sprintf(", #%s :%s", ph, ph)
	}
	if p.minute {
		names["#expiresAt"], values[":expiresAt"] = attrExpiresAt, dynamo.N(expiry(p.at))
		expr += " SET #expiresAt = :expiresAt"
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(table), Key: itemKey(p.pk, p.sk),
		UpdateExpression: aws.String(expr), ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}}
}

// setWrite sets the groups of a MAX or LATEST item that the plan raises above what was read,
// guarded by the item being as read; false when the plan raises none.
func setWrite(table string, p *pending, it Item) (types.TransactWriteItem, bool) {
	names := map[string]string{"#rev": attrRev}
	values := map[string]types.AttributeValue{":next": dynamo.N(it.Rev + 1)}
	expr := setUpdatePrefix
	n := 0
	for _, name := range sortedNames(p.cells) {
		c := p.cells[name]
		if old, ok := it.Cells[name]; ok && !raises(p.agg, old, c) {
			continue
		}
		ph := "g" + strconv.Itoa(n)
		n++
		names["#"+ph], values[":"+ph] = name, cellValueOf(p.agg, c)
		expr += fmt.Sprintf(", #%s = :%s", ph, ph)
	}
	if n == 0 {
		return types.TransactWriteItem{}, false
	}
	if p.minute {
		names["#expiresAt"], values[":expiresAt"] = attrExpiresAt, dynamo.N(expiry(p.at))
		expr += ", #expiresAt = :expiresAt"
	}
	cond := revCondition
	if it.Exists {
		values[":rev"] = dynamo.N(it.Rev)
	} else {
		cond = newCondition
		names["#pk"] = attrPK
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(table), Key: itemKey(p.pk, p.sk),
		UpdateExpression: aws.String(expr), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}}, true
}

// raises reports whether c replaces old: a larger value (MAX), a later order key (LATEST).
func raises(agg meter.Aggregation, old, c Cell) bool {
	if agg == meter.Latest {
		return c.OrderKey > old.OrderKey
	}
	return c.Value > old.Value
}

func cellValueOf(agg meter.Aggregation, c Cell) types.AttributeValue {
	if agg == meter.Latest {
		return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			cellValue: dynamo.N(c.Value), cellOrderKey: dynamo.S(c.OrderKey),
		}}
	}
	return dynamo.N(c.Value)
}

func itemKey(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: dynamo.S(pk), attrSK: dynamo.S(sk)}
}
