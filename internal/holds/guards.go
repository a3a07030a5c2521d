package holds

import (
	"github.com/ferrymeter/ferry/internal/dynamo"
	"github.com/ferrymeter/ferry/internal/resources"
)

// Guards are the condition clauses the holds table's writes carry, each with what it keeps.
// Revision guards come whole and clause by clause: the settlement and the charge are decided on
// one read of the hold, and each clause is shown to matter on its own.
var Guards = []dynamo.Guard{
	{Name: "holds.reserve.absent", Kind: "Put", Table: resources.TableHolds, SortKeyPrefix: holdSK, Clause: absentCondition,
		Keeps: "a repeated job key never opens a second hold (nor holds its amount twice)"},
	{Name: "holds.step.absent", Kind: "Put", Table: resources.TableHolds, SortKeyPrefix: stepPrefix, Clause: absentCondition,
		Keeps: "a repeated step key never charges twice"},
	{Name: "holds.charge.status-rev", Kind: "Update", Table: resources.TableHolds, Update: chargeUpdate, Clause: revCondition,
		Keeps: "a charge applies to the hold it was decided on: no lost updates, none after the settlement"},
	{Name: "holds.charge.rev", Kind: "Update", Table: resources.TableHolds, Update: chargeUpdate, Clause: "#rev = :rev",
		Keeps: "concurrent charges of one hold never overwrite each other's usage"},
	{Name: "holds.charge.running", Kind: "Update", Table: resources.TableHolds, Update: chargeUpdate, Clause: "#status = :running",
		Keeps: "a late worker's charge never lands on a settled or expired hold"},
	{Name: "holds.settle.status-rev", Kind: "Put", Table: resources.TableHolds, SortKeyPrefix: holdSK, Clause: revCondition,
		Keeps: "a hold is settled once: concurrent settles, or a settle racing the sweeper, move the budget once"},
	{Name: "holds.settle.rev", Kind: "Put", Table: resources.TableHolds, SortKeyPrefix: holdSK, Clause: "#rev = :rev",
		Keeps: "a settlement is decided on the hold's latest usage"},
	{Name: "holds.settle.running", Kind: "Put", Table: resources.TableHolds, SortKeyPrefix: holdSK, Clause: "#status = :running",
		Keeps: "a final hold is never settled again"},
}
