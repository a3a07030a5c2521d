package rollup

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/metering/ledger"
)

// Claims plans the rollup writes of the worker's unit claims (the worker's Rollups): the items a
// unit reads before it plans, and the writes its claim transaction carries.
type Claims struct {
	// Table is the rollups table's name.
	Table string
}

// contributions are the ledger's contributions as the rollups take them (the same fields).
func contributions(cs []ledger.Contribution) []Contribution {
	out := make([]Contribution, len(cs))
	for i, c := range cs {
		out[i] = Contribution(c)
	}
	return out
}

// Keys lists the rollup items to read before planning a claim of cs (see Keys): the unit passes
// the contributions of every member it may admit, of every meter.
func (c Claims) Keys(accountID string, cs []ledger.Contribution) []ledger.ItemKey {
	keys := Keys(accountID, contributions(cs))
	out := make([]ledger.ItemKey, len(keys))
	for i, k := range keys {
		out[i] = ledger.ItemKey{Table: c.Table, Key: k}
	}
	return out
}

// Writes plans the rollup writes of the contributions a claim admits, from what the unit read
// (the items of Keys that exist, by table).
func (c Claims) Writes(accountID string, cs []ledger.Contribution, read map[string][]map[string]types.AttributeValue) ([]types.TransactWriteItem, error) {
	rcs := contributions(cs)
	items, err := ReadItems(Keys(accountID, rcs), read[c.Table])
	if err != nil {
		return nil, err
	}
	plan, err := PlanWrites(c.Table, accountID, rcs, items)
	return plan.Writes, err
}
