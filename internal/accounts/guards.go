package accounts

import (
	"fmt"

	"github.com/ferrymeter/ferry/internal/dynamo"
	"github.com/ferrymeter/ferry/internal/resources"
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
