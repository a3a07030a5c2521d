package rollup

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/meter"
)

// Claims plans the rollup writes of the worker's unit claims (the worker's Rollups): the items a
// unit reads before it plans, and the writes its claim transaction carries.
type Claims struct {
	// Table is the rollups table's name.
	Table string
}

// Keys lists the rollup items to read before planning a claim of cs (see Keys): the unit passes
// the contributions of every member it may admit, of every meter.
func (c Claims) Keys(accountID string, cs []meter.Contribution) []ledger.ItemKey {
	keys := Keys(accountID, cs)
	out := make([]ledger.ItemKey, len(keys))
	for i, k := range keys {
		out[i] = ledger.ItemKey{Table: c.Table, Key: k}
	}
	return out
}

// Writes plans the rollup writes of the contributions a claim admits, from what the unit read
// (the items of Keys that exist, by table).
func (c Claims) Writes(accountID string, cs []meter.Contribution, read map[string][]map[string]types.AttributeValue) ([]types.TransactWriteItem, error) {
	items, err := ReadItems(Keys(accountID, cs), read[c.Table])
	if err != nil {
		return nil, err
	}
	plan, err := PlanWrites(c.Table, accountID, cs, items)
	return plan.Writes, err
}
