package inbox

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// transitionPrefix begins every status transition's update expression (see transition).
const transitionPrefix = "SET #"

// Guards are the condition clauses the inbox's writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "inbox.insert.first", Kind: "Put", Table: resources.TableInbox, SortKeyPrefix: eventSK, Clause: insertCondition,
		Keeps: "exactly one delivery of a provider's event stores it; every copy only counts"},
	{Name: "inbox.copy.exists", Kind: "Update", Table: resources.TableInbox, Update: copyUpdate, Clause: copyCondition,
		Keeps: "a copy of an event that is gone creates no stray item"},
	{Name: "inbox.transition.rev", Kind: "Update", Table: resources.TableInbox, UpdatePrefix: transitionPrefix, Clause: revCondition,
		Keeps: "no two workers both claim, or both apply, one event; a replay never races a mark"},
	{Name: "inbox.meter-mark.clear-rev", Kind: "Delete", Table: resources.TableInbox, Clause: clearCondition,
		Keeps: "a meter mark set again since it was listed is not cleared"},
}
