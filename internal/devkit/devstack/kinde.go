package devstack

import (
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	standin "github.com/ferrymeter/ferry/internal/devkit/standin/kinde"
	"github.com/ferrymeter/ferry/internal/platform/kinde"
)

// Credentials of the Kinde stand-in ferry dev starts when FERRY_LIMITS_SOURCE=kinde names no
// FERRY_KINDE_DOMAIN. They are not secrets: the stand-in listens on loopback only.
const (
	standInClientID     = "ferry-dev"
	standInClientSecret = "ferry-dev-secret"
)

// grantDefaultPlan makes the Kinde stand-in grant every customer the catalog's default plan's
// limits as entitlements.
func grantDefaultPlan(stand *standin.Server, catalog plans.Catalog) {
	plan, _ := catalog.Plan(catalog.Default)
	var ents []kinde.Entitlement
	for feature, f := range plan.Features {
		var limitMax *int64
		if !f.Limit.Unlimited {
			limitMax = &f.Limit.Max
		}
		ents = append(ents, standin.Limit(feature, limitMax))
	}
	stand.SetDefault(ents...)
}
