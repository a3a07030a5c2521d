package holds

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the holds table's writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "holds.reserve.absent", Kind: "Put", Table: resources.TableHolds, SortKeyPrefix: holdSK, Clause: absentCondition,
		Keeps: "a repeated job key never opens a second hold (nor holds its amount twice)"},
	{Name: "holds.charge.rev", Kind: "Update", Table: resources.TableHolds, Update: chargeUpdate, Clause: revCondition,
		Keeps: "a charge applies to the hold it was decided on: no lost updates, none after the settlement, no step charged twice"},
	{Name: "holds.settle.rev", Kind: "Put", Table: resources.TableHolds, SortKeyPrefix: holdSK, Clause: revCondition,
		Keeps: "a hold is settled once, on its latest usage: concurrent settles, or a settle racing the sweeper or a charge, move the budget once"},
}
