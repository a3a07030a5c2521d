package usage

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// Meters' rows. A feature moved by a meter keeps its usage where every feature does — the budget
// row of its (account, feature, cycle) partition, or its counter shards — and adds two kinds of
// item, each in a partition of its own beside it, so that the usage partition a report reads
// stays a few rows however many events a cycle has:
//
//   - a distinct-value marker per (account, feature, cycle, value) of a UNIQUE_COUNT meter
//     (partition "<usage partition>#distinct", sort key "distinct#<value hash>"), put with
//     attribute_not_exists in the claim that first counts the value: a value counts once a
//     cycle, whichever unit meets it and however often;
//   - a unit's record per (account, cycle, unit) (partition "<account>#<cycle>#units", sort key
//     "unit#<unit>"), put in the claim with what the unit moved on each feature that keeps
//     records (one map entry per feature, under "features"): the reconciler sums a feature's
//     entries, as it counts the ledger's entries for events, to check and rebuild the counters.
//     One item for all the unit's features, not one per feature: an LLM call moving two token
//     meters writes one record a unit instead of two (2 write units a unit less; the reconciler
//     reads every feature's entries of a record to take its own, which it can afford). Two
//     claims of one unit never both commit (each claims every member the unit had unclaimed,
//     conditional on its having no entry), so a record is written once and needs no condition.
//
// MAX and LATEST replace the figure instead of adding to it: their counter is the budget row,
// written with SET from the value read before the claim, conditional on the row's rev being the
// one read (absent: still absent), so a write made since cancels the claim, which reads again
// and plans anew.

// Attribute names of the meters' rows.
const (
	// AttrOrder is, on a LATEST meter's counter row, the order key (meter.OrderKey) of the
	// event whose value it holds.
	AttrOrder = "latestOrder"
	// AttrAmount is what a unit's record says it added (additive meters), or its largest value
	// (MAX) or its latest value (LATEST).
	AttrAmount = "amount"
	// attrFeatures holds, on a unit's record, one map per feature the unit moved.
	attrFeatures = "features"
	// attrRow names, in a feature's map of a unit's record, the counter row the unit moved.
	attrRow = "row"
	// attrEvents counts, in a feature's map of a unit's record, the events it admitted that
	// moved the meter.
	attrEvents = "events"
)

// Sort key prefixes of the meters' items.
const (
	DistinctPrefix = "distinct#"
	RecordPrefix   = "unit#"
)

// Expressions of the meters' writes.
const (
	// setPrefix begins the writes that replace a MAX or LATEST meter's figure. committed
	// follows used, as on every budget row (no hold is ever taken on such a feature); LATEST
	// also keeps the order key of the event the value came from.
	setPrefix       = "SET #used = :v, #committed = :v, "
	setMaxUpdate    = setPrefix + "#accountId = :account, #feature = :feature, #cycle = :cycle, #updatedAtMs = :now ADD #rev :one"
	setLatestUpdate = setPrefix + "#latestOrder = :order, #accountId = :account, #feature = :feature, #cycle = :cycle, #updatedAtMs = :now ADD #rev :one"
	// markerCondition: a distinct value's marker is put once a cycle.
	markerCondition = "attribute_not_exists(#pk)"
)

// DistinctPartition is the partition of a UNIQUE_COUNT feature's markers.
func DistinctPartition(accountID, feature, cycleLabel string) string {
	return PartitionKey(accountID, feature, cycleLabel) + "#distinct"
}

// RecordPartition is the partition of the units' records of an account's cycle. It can never be
// a usage partition (PartitionKey), whose third part is a cycle label, never "units".
func RecordPartition(accountID, cycleLabel string) string {
	return accountID + "#" + cycleLabel + "#units"
}

// MarkerKey is the key of a distinct value's marker.
func MarkerKey(accountID, feature, cycleLabel, hash string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": dynamo.S(DistinctPartition(accountID, feature, cycleLabel)), "sk": dynamo.S(DistinctPrefix + hash),
	}
}

// MarkerPut is the transaction item that counts a distinct value once: its marker, put only if
// absent. A marker another unit put since the read cancels the claim.
func (t Table) MarkerPut(accountID, feature, cycleLabel, hash, unit string, nowMs int64) types.TransactWriteItem {
	item := MarkerKey(accountID, feature, cycleLabel, hash)
	item["unit"], item["createdAtMs"] = dynamo.S(unit), dynamo.N(nowMs)
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(t.Name), Item: item,
		ConditionExpression: aws.String(markerCondition), ExpressionAttributeNames: dynamo.Names(markerCondition),
	}}
}

// IsMarker reports whether an item, as read, is a distinct value's marker, and its hash.
func IsMarker(item map[string]types.AttributeValue) (string, bool) {
	sk := dynamo.Str(item, "sk")
	if len(sk) > len(DistinctPrefix) && sk[:len(DistinctPrefix)] == DistinctPrefix {
		return sk[len(DistinctPrefix):], true
	}
	return "", false
}

// SetValue is the transaction item that replaces a MAX or LATEST meter's figure on the budget row
// with v (and order, the order key of the event it came from; empty for MAX), conditional on the
// row's rev being rev as read (0: the row had none).
func (t Table) SetValue(accountID, feature, cycleLabel string, v int64, order string, rev, nowMs int64) types.TransactWriteItem {
	values := map[string]types.AttributeValue{
		":v": dynamo.N(v), ":now": dynamo.N(nowMs), ":one": dynamo.N(1),
		":account": dynamo.S(accountID), ":feature": dynamo.S(feature), ":cycle": dynamo.S(cycleLabel),
	}
	setUpdate := setMaxUpdate
	if order != "" {
		setUpdate = setLatestUpdate
		values[":order"] = dynamo.S(order)
	}
	cond := rowStillNew
	if rev != 0 {
		cond = rowUnchanged
		values[":rev"] = dynamo.N(rev)
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(t.Name), Key: BudgetKey(accountID, feature, cycleLabel),
		UpdateExpression: aws.String(setUpdate), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: dynamo.Names(setUpdate, cond), ExpressionAttributeValues: values,
	}}
}

// Record is a unit's record of what it moved on one feature's counter.
type Record struct {
	Unit    string
	Feature string
	// Row is the sort key of the counter row the unit moved (or found above its value).
	Row string
	// Amount is what the unit added (SUM, COUNT, UNIQUE_COUNT: its new distinct values), or its
	// largest value (MAX), or its latest value (LATEST).
	Amount int64
	// Order is, for LATEST, the order key of the event Amount came from.
	Order string
	// Events counts the unit's admitted events that moved the meter.
	Events int64
	AtMs   int64
}

// RecordPut is the transaction item that puts a unit's record of every feature it moved (see the
// package comment on meters' rows: written once, so unconditioned). recs are one unit's, one per
// feature; the record's instant is the first's.
func (t Table) RecordPut(accountID, cycleLabel string, recs []Record) (types.TransactWriteItem, error) {
	if len(recs) == 0 {
		return types.TransactWriteItem{}, fmt.Errorf("record of %s %s: no feature", accountID, cycleLabel)
	}
	features := make(map[string]types.AttributeValue, len(recs))
	for _, r := range recs {
		if r.Unit != recs[0].Unit {
			return types.TransactWriteItem{}, fmt.Errorf("record of %s %s: units %s and %s in one record", accountID, cycleLabel, recs[0].Unit, r.Unit)
		}
		if _, twice := features[r.Feature]; twice || r.Feature == "" {
			return types.TransactWriteItem{}, fmt.Errorf("record of unit %s: feature %q named twice or empty", r.Unit, r.Feature)
		}
		f := map[string]types.AttributeValue{attrRow: dynamo.S(r.Row), AttrAmount: dynamo.N(r.Amount), attrEvents: dynamo.N(r.Events)}
		if r.Order != "" {
			f[AttrOrder] = dynamo.S(r.Order)
		}
		features[r.Feature] = &types.AttributeValueMemberM{Value: f}
	}
	item := map[string]types.AttributeValue{
		"pk": dynamo.S(RecordPartition(accountID, cycleLabel)), "sk": dynamo.S(RecordPrefix + recs[0].Unit),
		attrFeatures: &types.AttributeValueMemberM{Value: features}, "atMs": dynamo.N(recs[0].AtMs),
	}
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(t.Name), Item: item}}, nil
}

// maxRecordPages bounds the pages of one cycle's records (one record per unit of up to 97
// events: a page of 1 MB holds several thousand, some hundred thousand events or more).
const maxRecordPages = 2_000

// Records reads every unit's record of a feature's cycle, paged (eventually consistent: a
// record committed a moment ago may be missing, like an entry from the ledger's meter index).
// A unit's record that did not move the feature has no entry for it and is passed over.
func (t Table) Records(ctx context.Context, accountID, feature, cycleLabel string) ([]Record, int, error) {
	var out []Record
	var start map[string]types.AttributeValue
	for page := 1; page <= maxRecordPages; page++ {
		res, err := t.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(t.Name),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  dynamo.Names("#pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(RecordPartition(accountID, cycleLabel))},
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, page, fmt.Errorf("read the unit records of %s %s %s: %w", accountID, feature, cycleLabel, err)
		}
		for _, item := range res.Items {
			features, _ := item[attrFeatures].(*types.AttributeValueMemberM)
			if features == nil {
				return nil, page, fmt.Errorf("read the unit records of %s %s %s: record %s has no features", accountID, feature, cycleLabel, dynamo.Str(item, "sk"))
			}
			f, ok := features.Value[feature].(*types.AttributeValueMemberM)
			if !ok {
				continue
			}
			out = append(out, Record{
				Unit: dynamo.Str(item, "sk")[len(RecordPrefix):], Feature: feature, Row: dynamo.Str(f.Value, attrRow),
				Amount: dynamo.Int(f.Value, AttrAmount), Order: dynamo.Str(f.Value, AttrOrder),
				Events: dynamo.Int(f.Value, attrEvents), AtMs: dynamo.Int(item, "atMs"),
			})
		}
		if len(res.LastEvaluatedKey) == 0 {
			return out, page, nil
		}
		start = res.LastEvaluatedKey
	}
	return nil, maxRecordPages, fmt.Errorf("read the unit records of %s %s %s: more than %d pages", accountID, feature, cycleLabel, maxRecordPages)
}

// Row is a counter row as a claim reads it: its figures, its rev and, for LATEST, its order.
type Row struct {
	Totals
	// Exists: the row was found.
	Exists bool
	Rev    int64
	Order  string
	// Alerted are the alerts decided on the row this cycle (AttrAlerts).
	Alerted map[string]bool
}

// RowOf reads a budget row as a claim's read returned it (a nil item is an absent row).
func RowOf(item map[string]types.AttributeValue) Row {
	return Row{
		Totals: Totals{Used: dynamo.Int(item, AttrUsed), Held: dynamo.Int(item, AttrHeld), Committed: dynamo.Int(item, AttrCommitted)},
		Exists: item != nil, Rev: Rev(item), Order: dynamo.Str(item, AttrOrder), Alerted: alerted(item),
	}
}

// alerted reads a row's AttrAlerts.
func alerted(item map[string]types.AttributeValue) map[string]bool {
	ss, ok := item[AttrAlerts].(*types.AttributeValueMemberSS)
	if !ok {
		return nil
	}
	out := make(map[string]bool, len(ss.Value))
	for _, k := range ss.Value {
		out[k] = true
	}
	return out
}
