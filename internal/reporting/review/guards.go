package review

import (
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Guards are the condition clauses the review list's writes carry, each with what it keeps.
var Guards = []dynamo.Guard{
	{Name: "review.add.absent", Kind: "Put", Table: resources.TableReview, Clause: dynamo.AbsentCondition,
		Keeps: "an entry is listed once, so its alarm calls a person once"},
}
