package outbox

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the outbox's writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "outbox.insert.absent", Kind: "Put", Table: resources.TableOutbox, Clause: insertCondition,
		Keeps: "one identifier is one row: a second report of the same total never becomes a second event"},
	{Name: "outbox.rewrite.rev", Kind: "Put", Table: resources.TableOutbox, Clause: rewriteCondition,
		Keeps: "two drainers never both claim one row, and a late drainer never rewrites a row sent since"},
}
