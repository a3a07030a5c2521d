package notify

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses this package's writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "notify.put.once", Kind: "Put", Table: resources.TableNotifications, SortKeyPrefix: SKNotification, Clause: putCondition,
		Keeps: "a notification is decided once: a second unit deciding the same threshold or limit (a race, a redelivery) is cancelled, reads again and sends nothing more"},
}
