package ledger

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the ledger sends, each with what it keeps. The guard-ablation
// test removes each one at the wire and must find the money or the state going wrong.
var Guards = []dynamo.Guard{
	// A batch's transaction puts each member's entry under the same condition: it is the same
	// write (an entry's first put), so it is the same guard, needed there too
	// (TestGuard_BatchClaimOfAnEventClaimedAlone_IsCancelled).
	{Name: "ledger.claim.first-writer", Kind: "Put", Table: resources.TableLedger, Clause: claimCondition,
		Keeps: "exactly one delivery of an event wins the claim and runs the pipeline from the top; a batch never overwrites, nor bills again, an entry another unit claimed"},
	{Name: "ledger.batch-done.first", Kind: "Put", Table: resources.TableLedger, KeyPrefix: batchKeyPrefix, Clause: claimCondition,
		Keeps: "a batch is recorded done once: a redelivery never moves the instant its entries were shown INSERTED"},
	{Name: "ledger.checkpoint.inserting", Kind: "Update", Table: resources.TableLedger, Update: checkpointUpdate, Clause: "#status = :inserting",
		Keeps: "an event another delivery rejected or finished is never billed"},
	{Name: "ledger.checkpoint.unbilled", Kind: "Update", Table: resources.TableLedger, Update: checkpointUpdate, Clause: "attribute_not_exists(#billingAcceptedAtMs)",
		Keeps: "a redelivered, already billed event never moves the meter again (the double-charge defence)"},
	// An event billed against a counter row has its checkpoint put whole (it enters the meter
	// index with it), under the same condition.
	{Name: "ledger.checkpoint-put.inserting", Kind: "Put", Table: resources.TableLedger, Clause: "#status = :inserting",
		Keeps: "an event another delivery rejected or finished is never billed against a counter row"},
	{Name: "ledger.checkpoint-put.unbilled", Kind: "Put", Table: resources.TableLedger, Clause: "attribute_not_exists(#billingAcceptedAtMs)",
		Keeps: "a redelivered, already billed event never moves a counter row again (the double-charge defence)"},
	{Name: "ledger.reject.inserting", Kind: "Update", Table: resources.TableLedger, Update: rejectUpdate, Clause: "#status = :inserting",
		Keeps: "a finished event is never turned into a rejected one"},
	{Name: "ledger.reject.unbilled", Kind: "Update", Table: resources.TableLedger, Update: rejectUpdate, Clause: "attribute_not_exists(#billingAcceptedAtMs)",
		Keeps: "an event is never both billed and REJECTED"},
	{Name: "ledger.mark.inserting", Kind: "Update", Table: resources.TableLedger, Update: insertedUpdate, Clause: markCondition,
		Keeps: "a REJECTED or UNINSERTABLE event is never marked INSERTED"},
	{Name: "ledger.quarantine.inserting", Kind: "Update", Table: resources.TableLedger, Update: quarantineUpdate, Clause: insertingCondition,
		Keeps: "a refused row is counted only against an unfinished event"},
	{Name: "ledger.uninsertable.inserting", Kind: "Update", Table: resources.TableLedger, Update: uninsertableUpdate, Clause: insertingCondition,
		Keeps: "an INSERTED or REJECTED event never ends UNINSERTABLE"},
	{Name: "ledger.reopen.uninsertable", Kind: "Update", Table: resources.TableLedger, Update: reopenUpdate, Clause: uninsertableCondition,
		Keeps: "a redrive reopens only an UNINSERTABLE event, never a finished or rejected one"},
}
