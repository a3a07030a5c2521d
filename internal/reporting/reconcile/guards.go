package reconcile

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the reconciler's own writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "reconcile.evidence.absent", Kind: "Put", Table: resources.TableEvidence, Clause: dynamo.AbsentCondition,
		Keeps: "an evidence record is written once; the same numbers again add nothing"},
	{Name: "reconcile.request-done.at", Kind: "Delete", Table: resources.TableEvidence, Clause: doneCondition,
		Keeps: "a reconciliation requested again after this one was read stays requested"},
}
