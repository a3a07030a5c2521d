package ratelimit

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the rate-limit counters carry.
var Guards = []dynamo.Guard{
	{Name: "ratelimit.take.room", Kind: "Update", Table: resources.TableRateLimits, Update: takeUpdate, Clause: takeCondition,
		Keeps: "no account opens more holds in a window than its rate allows"},
}
