package drain

import (
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the notifier's writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "drain.delivery.put.absent", Kind: "Put", Table: resources.TableNotifications, SortKeyPrefix: notify.DeliveryPrefix, Clause: putDeliveryCondition,
		Keeps: "a fan-out run again (after a notifier died before its mark) never resets a delivery: one already DELIVERED is not sent again, one retrying keeps its attempts"},
	{Name: "drain.delivery.rewrite.rev", Kind: "Put", Table: resources.TableNotifications, SortKeyPrefix: notify.DeliveryPrefix, Clause: rewriteCondition,
		Keeps: "two notifiers never both claim one attempt of a delivery (the endpoint is sent it once), and one whose claim was taken over never overwrites what the new owner wrote"},
	{Name: "drain.notification.fanned.new", Kind: "Put", Table: resources.TableNotifications, SortKeyPrefix: notify.SKNotification, Clause: fannedCondition,
		Keeps: "a notification is marked fanned out once: a notifier that read it before another fanned it out (with the endpoints of that moment) cannot overwrite the record of whom it went to"},
}
