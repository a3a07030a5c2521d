package usage

import (
	"github.com/ferrymeter/ferry/internal/dynamo"
	"github.com/ferrymeter/ferry/internal/resources"
)

// Capacity conditions of the budget row (see Table.capped): a fresh row passes only when the
// amount fits; a room below zero is a condition no row meets.
const (
	capCondition      = "#committed <= :room"
	capFreshCondition = "attribute_not_exists(#committed) OR " + capCondition
)

// Guards are the condition clauses the usage table's writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "usage.consume.cap", Kind: "Update", Table: resources.TableUsage, Update: consumeUpdate, Clause: capFreshCondition,
		Keeps: "the meter never moves past the monthly cap (a fresh budget row)"},
	{Name: "usage.consume.cap-room", Kind: "Update", Table: resources.TableUsage, Update: consumeUpdate, Clause: capCondition,
		Keeps: "the meter never moves past the monthly cap (an amount over the whole limit)"},
	{Name: "usage.hold.cap", Kind: "Update", Table: resources.TableUsage, Update: holdUpdate, Clause: capFreshCondition,
		Keeps: "holds never commit more than the limit"},
	{Name: "usage.hold.cap-room", Kind: "Update", Table: resources.TableUsage, Update: holdUpdate, Clause: capCondition,
		Keeps: "a hold over the whole limit is never admitted"},
}
