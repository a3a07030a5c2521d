package usage

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Capacity conditions of the budget row (see Table.capped): a fresh row passes only when the
// amount fits; a room below zero is a condition no row meets.
const (
	capCondition      = "#committed <= :room"
	capFreshCondition = "attribute_not_exists(#committed) OR " + capCondition
	// alertBelowCondition holds a claim to the usage its alerts were planned at (see Alerts).
	alertBelowCondition = "attribute_not_exists(#used) OR #used < :alertBelow"
)

// Guards are the condition clauses the usage table's writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "usage.consume.cap", Kind: "Update", Table: resources.TableUsage, UpdatePrefix: consumePrefix, Clause: capFreshCondition,
		Keeps: "the meter never moves past the monthly cap (a fresh budget row)"},
	{Name: "usage.consume.cap-room", Kind: "Update", Table: resources.TableUsage, UpdatePrefix: consumePrefix, Clause: capCondition,
		Keeps: "the meter never moves past the monthly cap (an amount over the whole limit)"},
	{Name: "usage.consume.alert-below", Kind: "Update", Table: resources.TableUsage, UpdatePrefix: consumePrefix, Clause: alertBelowCondition,
		Keeps: "a threshold is never stepped over unnoticed: a claim that planned to cross none is cancelled when another has since moved the usage to where its amount crosses one"},
	{Name: "usage.hold.cap", Kind: "Update", Table: resources.TableUsage, Update: holdUpdate, Clause: capFreshCondition,
		Keeps: "holds never commit more than the limit"},
	{Name: "usage.hold.cap-room", Kind: "Update", Table: resources.TableUsage, Update: holdUpdate, Clause: capCondition,
		Keeps: "a hold over the whole limit is never admitted"},
	{Name: "usage.mark.present", Kind: "ConditionCheck", Table: resources.TableUsage, Clause: markPresent,
		Keeps: "a meter write that only checks its row's report mark lands only while the mark is there, so no write goes unreported"},
	{Name: "usage.mark-clear.rev", Kind: "ConditionCheck", Table: resources.TableUsage, Clause: rowUnchanged,
		Keeps: "a report mark comes off only while its row is at the rev the reporter read: a later write keeps it"},
	{Name: "usage.mark-clear.fresh", Kind: "ConditionCheck", Table: resources.TableUsage, Clause: rowStillNew,
		Keeps: "the mark of a row read without a rev comes off only while the row is still without one"},
	{Name: "usage.rebuild.rev", Kind: "Update", Table: resources.TableUsage, Update: rebuildUpdate, Clause: rowUnchanged,
		Keeps: "a rebuilt counter row loses no write made after the reconciler read it"},
	{Name: "usage.rebuild.fresh", Kind: "Update", Table: resources.TableUsage, Update: rebuildUpdate, Clause: rowStillNew,
		Keeps: "a counter row rebuilt from a read without a rev loses no first write made since"},
	// Meters (meters.go): a MAX or LATEST figure replaced from the row as read, and a distinct
	// value counted once a cycle.
	{Name: "usage.set.rev", Kind: "Update", Table: resources.TableUsage, UpdatePrefix: setPrefix, Clause: rowUnchanged,
		Keeps: "a MAX or LATEST figure is replaced only from the row as the claim read it: a larger maximum or a later value written since is never overwritten"},
	{Name: "usage.set.fresh", Kind: "Update", Table: resources.TableUsage, UpdatePrefix: setPrefix, Clause: rowStillNew,
		Keeps: "a MAX or LATEST figure planned on a row read absent never overwrites a first figure written since"},
	{Name: "usage.distinct.first", Kind: "Put", Table: resources.TableUsage, SortKeyPrefix: DistinctPrefix, Clause: markerCondition,
		Keeps: "a distinct value counts once a cycle: a unit that met it after another unit counted it is cancelled, reads again and counts it no more"},
	{Name: "usage.correction.absent", Kind: "Put", Table: resources.TableUsage, SortKeyPrefix: CorrectionPrefix, Clause: correctionCondition,
		Keeps: "a correction row is append-only: the same correction twice moves the bill once"},
	{Name: "usage.correction-head.rev", Kind: "Update", Table: resources.TableUsage, Update: correctionHeadUpdate, Clause: correctionHeadUnchanged,
		Keeps: "a correction commits only on the totals it was decided on: two negative corrections, each within the usage, never take it below zero together"},
	{Name: "usage.correction-head.fresh", Kind: "Update", Table: resources.TableUsage, Update: correctionHeadUpdate, Clause: correctionHeadFresh,
		Keeps: "the first corrections of a cycle, decided on the same totals, never both commit: together they could take it below zero"},
}
