package idempotency

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the idempotency records carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "idempotency.claim.absent", Kind: "Put", Table: resources.TableIdempotency, Clause: claimCondition,
		Keeps: "exactly one request claims a key and runs"},
	{Name: "idempotency.takeover.token", Kind: "Put", Table: resources.TableIdempotency, Clause: "#token = :oldToken",
		Keeps: "of two requests taking over one expired claim, one runs"},
	{Name: "idempotency.takeover.expired", Kind: "Put", Table: resources.TableIdempotency,
		Clause: "(#expiresAt <= :nowSec OR (#state = :inFlight AND #leaseExpiresAtMs <= :nowMs))",
		Keeps:  "a claim that completed (or was renewed) since it was read as expired is never taken over"},
	{Name: "idempotency.complete.token", Kind: "Update", Table: resources.TableIdempotency, Update: completeUpdate, Clause: ownClaimCondition,
		Keeps: "an owner whose claim was taken over never overwrites the new owner's record"},
	{Name: "idempotency.release.token", Kind: "Delete", Table: resources.TableIdempotency, Clause: ownClaimCondition,
		Keeps: "an owner whose claim was taken over never deletes the new owner's claim"},
}
