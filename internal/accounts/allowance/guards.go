package allowance

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the grant rows' head carries.
var Guards = []dynamo.Guard{
	{Name: "allowance.head.first", Kind: "Update", Table: resources.TableGrants, Update: headUpdate, Clause: headFirst,
		Keeps: "the first grants of a cycle are written once, by whoever read it empty"},
	{Name: "allowance.head.rev", Kind: "Update", Table: resources.TableGrants, Update: headUpdate, Clause: headAt,
		Keeps: "grants decided on rows that changed since (a repeated grant among them) are never written"},
}
