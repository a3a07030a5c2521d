package rollup

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses rollup writes carry, each with what it keeps. Additive writes
// carry none: ADD commutes, and the claim's own conditions decide whether the transaction, and
// with it the rollup, commits at all.
var Guards = []dynamo.Guard{
	{Name: "rollup.set.new", Kind: "Update", Table: resources.TableRollups, UpdatePrefix: setUpdatePrefix, Clause: newCondition,
		Keeps: "a MAX or LATEST item planned from a read that found none never replaces the value a claim committed since (a smaller maximum, an earlier latest)"},
	{Name: "rollup.set.rev", Kind: "Update", Table: resources.TableRollups, UpdatePrefix: setUpdatePrefix, Clause: revCondition,
		Keeps: "a MAX or LATEST item is set only while it is at the rev read: a larger maximum or a later value committed since is never lowered"},
}
