package accounts

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// BillingChange is what one billing event changes on an account: its plan, its status, or both.
// Each changes only if the event is newer than the billing event the account's plan (or status)
// came from, compared by change key, only while the account still has the plan (or status) the
// change was decided from, and only while the account is still linked to the provider id the
// event was resolved through.
type BillingChange struct {
	AccountID string
	LinkKind  LinkKind
	LinkID    string
	// Plan is the plan to set ("" leaves the plan alone); FromPlan is the plan as read, the one
	// the change replaces (what account.plan_changed tells it changed from).
	Plan            string
	FromPlan        string
	PlanChangedAtMs int64
	PlanChangeKey   string
	// Status is the status to set ("" leaves the status alone); FromStatus is the status as
	// read, the one the change replaces.
	Status            Status
	FromStatus        Status
	StatusChangedAtMs int64
	StatusChangeKey   string
	NowMs             int64
}

// Conditions of a billing change. A change key is a string that sorts like the event's time
// (then its identity), so "newer" is one comparison DynamoDB can make; an account that no
// billing event changed yet has no key.
//
// The operator's updates (PATCH /v1/accounts) set the plan and the status and leave the change
// keys alone, so the keys cannot show that one landed after the read: the change also holds the
// plan (or status) itself to the value it was read at, which makes what the change tells it
// replaced the value it does replace. An account item always carries both attributes (accountItem
// writes them, empty or not, and no update removes them), so no flag for "absent" is needed:
// equality with the value as read, "" included, is the whole check.
const (
	billingLinked       = "#%s = :link"
	billingPlanNewer    = "(attribute_not_exists(#planChangeKey) OR #planChangeKey < :planKey)"
	billingStatusNewer  = "(attribute_not_exists(#statusChangeKey) OR #statusChangeKey < :statusKey)"
	billingPlanAsRead   = "#plan = :fromPlan"
	billingStatusAsRead = "#status = :fromStatus"
)

// BillingChangeItem is the transaction item that applies c, for the billing event's own
// transaction (its effect and its APPLIED mark commit together). The caller decided c from the
// account as read; the conditions make the write refuse a decision that a newer change, an
// operator's update of the plan or status it changes, or an unlinking overtook since. A refused
// item cancels the transaction, which the caller resolves by reading the account again.
func (s *Table) BillingChangeItem(c BillingChange) types.TransactWriteItem {
	sets := []string{"#updatedAtMs = :now"}
	conds := []string{strings.Replace(billingLinked, "%s", c.LinkKind.Field(), 1)}
	values := map[string]types.AttributeValue{":now": dynamo.N(c.NowMs), ":link": dynamo.S(c.LinkID)}
	if c.Plan != "" {
		sets = append(sets, "#plan = :plan", "#planChangedAtMs = :planAt", "#planChangeKey = :planKey")
		conds = append(conds, billingPlanNewer, billingPlanAsRead)
		values[":plan"], values[":planAt"], values[":planKey"] = dynamo.S(c.Plan), dynamo.N(c.PlanChangedAtMs), dynamo.S(c.PlanChangeKey)
		values[":fromPlan"] = dynamo.S(c.FromPlan)
	}
	if c.Status != "" {
		sets = append(sets, "#status = :status", "#statusChangedAtMs = :statusAt", "#statusChangeKey = :statusKey")
		conds = append(conds, billingStatusNewer, billingStatusAsRead)
		values[":status"], values[":statusAt"], values[":statusKey"] = dynamo.S(string(c.Status)), dynamo.N(c.StatusChangedAtMs), dynamo.S(c.StatusChangeKey)
		values[":fromStatus"] = dynamo.S(string(c.FromStatus))
	}
	update := "SET " + strings.Join(sets, ", ")
	cond := strings.Join(conds, " AND ")
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(s.AccountsTable),
		Key:                       map[string]types.AttributeValue{"id": dynamo.S(c.AccountID)},
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  dynamo.Names(update, cond),
		ExpressionAttributeValues: values,
	}}
}

// LinkCheckItem is the transaction item that holds a billing event's other effects (its grant
// rows, its meter mark) to the account it was resolved to when the event changes nothing on the
// account itself: it refuses the transaction unless the account is still linked to the provider
// id the event was resolved through.
func (s *Table) LinkCheckItem(accountID string, kind LinkKind, linkID string) types.TransactWriteItem {
	cond := strings.Replace(billingLinked, "%s", kind.Field(), 1)
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                 aws.String(s.AccountsTable),
		Key:                       map[string]types.AttributeValue{"id": dynamo.S(accountID)},
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  dynamo.Names(cond),
		ExpressionAttributeValues: map[string]types.AttributeValue{":link": dynamo.S(linkID)},
	}}
}
