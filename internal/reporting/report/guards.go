package report

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the report state's writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "report.claim.lease-free", Kind: "Update", Table: resources.TableMeters, Update: claimUpdate, Clause: claimCondition,
		Keeps: "one run at a time reports a cycle"},
	{Name: "report.release.owner", Kind: "Update", Table: resources.TableMeters, Update: releaseUpdate, Clause: releaseCondition,
		Keeps: "a run whose lease lapsed never frees the lease another run has taken since"},
	{Name: "report.sent.prev", Kind: "Update", Table: resources.TableMeters, Update: stripeSentUpdate, Clause: stripeSentCondition,
		Keeps: "two runs never both write a delta computed from the same lastSent"},
	{Name: "report.cancelled.prev", Kind: "Update", Table: resources.TableMeters, Update: stripeCancelledUpdate, Clause: stripeSentCondition,
		Keeps: "lastSent is lowered after cancellations only from the value the cancellations were computed from"},
}
