package session

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the session store's writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "session.put.new", Kind: "Put", Table: resources.TableConsole, Clause: dynamo.AbsentCondition,
		Keeps: "a new session never silently replaces another with the same token hash"},
}
