package accounts

import (
	"fmt"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the account writes carry, each with what it keeps.
var Guards = guards()

func guards() []dynamo.Guard {
	g := []dynamo.Guard{
		{Name: "accounts.create.absent", Kind: "Put", Table: resources.TableAccounts, Clause: accountAbsent,
			Keeps: "creating an account never overwrites an existing one (409 instead)"},
		{Name: "accounts.link.absent", Kind: "Put", Table: resources.TableAccountLinks, Clause: linkAbsent,
			Keeps: "a provider id is linked to one account only"},
		{Name: "accounts.update.exists", Kind: "Update", Table: resources.TableAccounts, UpdatePrefix: updatePrefix, Clause: accountExists,
			Keeps: "an update never creates an account that does not exist (404 instead)"},
		{Name: "accounts.update.agreement-open", Kind: "Update", Table: resources.TableAccounts, UpdatePrefix: updatePrefix, Clause: agreementOpen,
			Keeps: "the agreement day never changes after the first usage fixed the billing cycle"},
	}
	g = append(g,
		dynamo.Guard{Name: "accounts.billing.plan-newer", Kind: "Update", Table: resources.TableAccounts, UpdatePrefix: updatePrefix, Clause: billingPlanNewer,
			Keeps: "a billing event older than the one the plan came from never changes the plan"},
		dynamo.Guard{Name: "accounts.billing.status-newer", Kind: "Update", Table: resources.TableAccounts, UpdatePrefix: updatePrefix, Clause: billingStatusNewer,
			Keeps: "a billing event older than the one the status came from never changes the status"},
		dynamo.Guard{Name: "accounts.billing.plan-as-read", Kind: "Update", Table: resources.TableAccounts, UpdatePrefix: updatePrefix, Clause: billingPlanAsRead,
			Keeps: "a billing event's plan change commits only over the plan it was decided from, so account.plan_changed tells the plan it replaced, not one an operator's update replaced since the read"},
		dynamo.Guard{Name: "accounts.billing.status-as-read", Kind: "Update", Table: resources.TableAccounts, UpdatePrefix: updatePrefix, Clause: billingStatusAsRead,
			Keeps: "a billing event's status change commits only over the status it was decided from, so account.status_changed tells the status it replaced, not one an operator's update replaced since the read"},
	)
	// One template for every kind of link: the provider id the event was resolved through.
	g = append(g,
		dynamo.Guard{Name: "accounts.billing.linked", Kind: "Update", Table: resources.TableAccounts, UpdatePrefix: updatePrefix, Clause: billingLinked,
			Keeps: "a billing event changes the account only while it is linked to the provider id the event was resolved through"},
		dynamo.Guard{Name: "accounts.billing-check.linked", Kind: "ConditionCheck", Table: resources.TableAccounts, Clause: billingLinked,
			Keeps: "a billing event's grants and meter mark land only while the account is linked to the provider id the event was resolved through"})
	for _, kind := range LinkKinds {
		f := kind.Field()
		g = append(g,
			dynamo.Guard{Name: "accounts.update." + f + ".was-absent", Kind: "Update", Table: resources.TableAccounts, UpdatePrefix: updatePrefix,
				Clause: fmt.Sprintf(linkWasAbsent, f, f), Keeps: "linking " + f + " never overwrites a link made meanwhile"},
			dynamo.Guard{Name: "accounts.update." + f + ".unchanged", Kind: "Update", Table: resources.TableAccounts, UpdatePrefix: updatePrefix,
				Clause: fmt.Sprintf(linkUnchanged, f, f), Keeps: "relinking " + f + " never leaves a stale link row behind"})
	}
	return g
}
