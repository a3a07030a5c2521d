package ledger

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the ledger sends, each with what it keeps. The guard-ablation
// test removes each one at the wire and must find the money or the state going wrong.
var Guards = []dynamo.Guard{
	// A unit's transaction puts each member's entry conditional on its absence: the claim.
	{Name: "ledger.claim.first-writer", Kind: "Put", Table: resources.TableLedger, Clause: claimCondition,
		Keeps: "exactly one claim of an event ever commits: a unit never overwrites, nor bills again, an entry another unit claimed"},
	{Name: "ledger.batch-done.first", Kind: "Put", Table: resources.TableLedger, KeyPrefix: batchKeyPrefix, Clause: claimCondition,
		Keeps: "a batch is recorded done once: a redelivery never moves the instant its entries were shown INSERTED"},
	// An entry an earlier release's per-event worker claimed alone and never billed is taken
	// over by a unit's claim, put whole under these two clauses instead of the first-writer one.
	{Name: "ledger.takeover.inserting", Kind: "Put", Table: resources.TableLedger, Clause: "#status = :inserting",
		Keeps: "a unit takes over only an entry still INSERTING: never one another delivery rejected or finished"},
	{Name: "ledger.takeover.unbilled", Kind: "Put", Table: resources.TableLedger, Clause: "attribute_not_exists(#billingAcceptedAtMs)",
		Keeps: "a unit never takes over, and bills again, an entry claimed alone that has been billed since (the double-charge defence for entries an earlier release claimed)"},
	{Name: "ledger.mark.inserting", Kind: "Update", Table: resources.TableLedger, Update: insertedUpdate, Clause: markCondition,
		Keeps: "a REJECTED or UNINSERTABLE event is never marked INSERTED"},
	{Name: "ledger.quarantine.inserting", Kind: "Update", Table: resources.TableLedger, Update: quarantineUpdate, Clause: insertingCondition,
		Keeps: "a refused row is counted only against an unfinished event"},
	{Name: "ledger.uninsertable.inserting", Kind: "Update", Table: resources.TableLedger, Update: uninsertableUpdate, Clause: insertingCondition,
		Keeps: "an INSERTED or REJECTED event never ends UNINSERTABLE"},
	{Name: "ledger.reopen.uninsertable", Kind: "Update", Table: resources.TableLedger, Update: reopenUpdate, Clause: uninsertableCondition,
		Keeps: "a redrive reopens only an UNINSERTABLE event, never a finished or rejected one"},
}
