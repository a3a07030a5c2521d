package usage

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// Budget-row expressions of usage holds. A hold adds to held and committed; a settlement moves
// the charged part of the hold to used and gives the rest back, so committed = used + held stays
// true after every write.
const (
	holdUpdate = "ADD #held :n, #committed :n, #rev :one " + setLabels
	// A settlement carries no condition of its own: the hold's revision guard in the same
	// transaction settles each hold once, and until then its amount is on held (the
	// reservation added it in the transaction that created the hold), so held never drops
	// below zero.
	settleUpdate = "ADD #used :charged, #held :minusHeld, #committed :minusReleased, #rev :one SET #updatedAtMs = :now"
)

// HoldCapped is the transaction item that holds amount on the budget row only if committed stays
// within limit. As in ConsumeCapped, the condition compares the maintained committed against
// room = limit − amount, computed here; an unlimited feature has no condition.
func (t Table) HoldCapped(accountID, feature, cycleLabel string, amount int64, limit plans.Limit, nowMs int64) types.TransactWriteItem {
	return t.capped(holdUpdate, accountID, feature, cycleLabel, amount, limit, nowMs)
}

// SettleHold is the transaction item that settles a hold of held units on the budget row:
// charged moves to used, held − charged is released.
func (t Table) SettleHold(accountID, feature, cycleLabel string, held, charged, nowMs int64) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(t.Name),
		Key:                      BudgetKey(accountID, feature, cycleLabel),
		UpdateExpression:         aws.String(settleUpdate),
		ExpressionAttributeNames: dynamo.Names(settleUpdate),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":charged":       dynamo.N(charged),
			":minusHeld":     dynamo.N(-held),
			":minusReleased": dynamo.N(-(held - charged)),
			":now":           dynamo.N(nowMs),
			":one":           dynamo.N(1),
		},
	}}
}

// GetBudget is the transactional read of the budget row, for resolving a cancelled transaction
// together with the other items it touched.
func (t Table) GetBudget(accountID, feature, cycleLabel string) types.TransactGetItem {
	return types.TransactGetItem{Get: &types.Get{
		TableName:                aws.String(t.Name),
		Key:                      BudgetKey(accountID, feature, cycleLabel),
		ProjectionExpression:     aws.String(budgetProjection),
		ExpressionAttributeNames: dynamo.Names(budgetProjection),
	}}
}

// BudgetOf reads the budget from an item returned for GetBudget; a missing row is all zeros.
func BudgetOf(item map[string]types.AttributeValue) Totals {
	return Totals{
		Used:      dynamo.Int(item, AttrUsed),
		Held:      dynamo.Int(item, AttrHeld),
		Committed: dynamo.Int(item, AttrCommitted),
	}
}
