package endpoints

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the endpoints' writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "endpoints.create.absent", Kind: "Put", Table: resources.TableWebhookEndpoints, Clause: createCondition,
		Keeps: "a registration never replaces an endpoint that has its id: the first one's URL and the secret its caller was shown stay"},
	{Name: "endpoints.rewrite.rev", Kind: "Put", Table: resources.TableWebhookEndpoints, Clause: rewriteCondition,
		Keeps: "a rotation or update decided on an older read never lands over a newer write: two racing rotations cannot both succeed " +
			"(the loser's secret would have replaced the winner's, which its caller was shown), and an update never writes back secrets read before a rotation"},
}
