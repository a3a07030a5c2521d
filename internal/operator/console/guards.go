package console

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the lab slots' writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "console.slot.free", Kind: "Put", Table: resources.TableConsole, Clause: slotFree,
		Keeps: "a lab slot is taken only when no run holds it or its run's lease lapsed"},
	{Name: "console.slot.holder", Kind: "Delete", Table: resources.TableConsole, Clause: slotHolder,
		Keeps: "a run gives back only the slot it holds, never one another run took over"},
}
