// Package usage keeps what each account has used per feature and billing cycle. One partition
// per (account, feature, cycle) holds the budget row — used, held and their maintained sum
// committed, the value a hard cap's condition compares against — and, for usage that is counted
// but not capped, up to NumShards counter shards so that no single row is hot. A read sums the
// partition in one strongly consistent Query.
package usage

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// NumShards is how many counter rows share an uncapped counter. One DynamoDB item takes about
// 1,000 write units a second; 64 shards lift that ceiling to ~64,000 transactional halves a
// second per (account, feature, cycle), and a read still fits in one Query page.
const NumShards = 64

// maxQueryPages bounds the paging of one usage read: NumShards+1 small items fit in one page,
// and the rest of the bound is room for correction rows (thousands fit in a page).
const maxQueryPages = 8

// Sort keys within a usage partition.
const (
	budgetSK    = "budget"
	shardPrefix = "shard#"
	// CorrectionPrefix starts the sort key of a correction row (see marks.go).
	CorrectionPrefix = "correction#"
	// MarkPrefix starts the sort key of a counter row's report mark (see marks.go).
	MarkPrefix = "mark#"
)

// Attribute names. Holds maintain committed = used + held on the budget row.
const (
	AttrUsed      = "used"
	AttrHeld      = "held"
	AttrCommitted = "committed"
	// AttrAlerts is the set of alerts decided on the row this cycle ("t<threshold>", "limit").
	AttrAlerts = "alerts"
)

// setLabels stamps the partition's identity on a row so it reads on its own (ad-hoc queries,
// exports). Every name goes through an alias: "cycle" is a DynamoDB reserved word.
const setLabels = "SET #accountId = :account, #feature = :feature, #cycle = :cycle, #updatedAtMs = :now"

// Expressions. Every attribute name is written as an alias (see dynamo.Names). Every write adds
// one to the row's rev (see marks.go).
const (
	consumePrefix = "ADD #used :n, #committed :n, #rev :one"
	consumeUpdate = consumePrefix + " " + setLabels
	// consumeAlertedUpdate also records the alerts the consuming claim decides (AttrAlerts).
	consumeAlertedUpdate = consumePrefix + ", #alerts :alerts " + setLabels
	// alertedUpdate records alerts decided by a claim that consumes nothing on the row (an event
	// refused for the limit); it changes no figure, so it leaves the rev alone.
	alertedUpdate    = "ADD #alerts :alerts " + setLabels
	shardUpdate      = "ADD #used :n, #rev :one " + setLabels
	budgetProjection = "#used, #held, #committed"
)

// PartitionKey is the usage partition of (account, feature, cycle). Account ids cannot contain
// '#', so the key is unambiguous.
func PartitionKey(accountID, feature, cycleLabel string) string {
	return accountID + "#" + feature + "#" + cycleLabel
}

// BudgetKey is the key of the budget row.
func BudgetKey(accountID, feature, cycleLabel string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": dynamo.S(PartitionKey(accountID, feature, cycleLabel)),
		"sk": dynamo.S(budgetSK),
	}
}

// ShardFor picks the counter shard of a unit of work from its stable id, so a replay of the
// same work lands on the same shard.
func ShardFor(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % NumShards)
}

// Table is the usage table.
type Table struct {
	DB   *dynamodb.Client
	Name string
}

// ConsumeCapped is the transaction item that consumes amount on the budget row only if the
// result stays within limit: the capacity rule (plans.Limit.Check), stated as a condition on the
// maintained committed (= used + held) against room = limit − amount (Limit.CommittedAtMost),
// since DynamoDB conditions cannot add.
func (t Table) ConsumeCapped(accountID, feature, cycleLabel string, amount int64, limit plans.Limit, nowMs int64) types.TransactWriteItem {
	return t.capped(consumeUpdate, accountID, feature, cycleLabel, amount, limit, nowMs)
}

// Alerts is what a claim decides about a budget row's alerts (package internal/alerts/notify):
// the alert keys it records as decided this cycle, and Below, when set, the usage the row must
// still be under for the claim's plan of them to hold — the lowest usage at which one more
// threshold would be crossed by this claim's amount. A claim that planned to cross no
// threshold is cancelled when another claim has moved the row to where this amount crosses
// one, and plans again: two claims can never both step over a threshold without either
// deciding it.
type Alerts struct {
	Record []string
	Below  int64
}

// ConsumeCappedAlerted is ConsumeCapped that also records the claim's alerts and holds it to
// their Below.
func (t Table) ConsumeCappedAlerted(accountID, feature, cycleLabel string, amount int64, limit plans.Limit, a Alerts, nowMs int64) types.TransactWriteItem {
	expr := consumeUpdate
	if len(a.Record) > 0 {
		expr = consumeAlertedUpdate
	}
	item := t.capped(expr, accountID, feature, cycleLabel, amount, limit, nowMs)
	u := item.Update
	if len(a.Record) > 0 {
		u.ExpressionAttributeValues[":alerts"] = &types.AttributeValueMemberSS{Value: a.Record}
	}
	if a.Below > 0 {
		u.ExpressionAttributeValues[":alertBelow"] = dynamo.N(a.Below)
		cond := alertBelowCondition
		if c := aws.ToString(u.ConditionExpression); c != "" {
			cond = "(" + c + ") AND (" + alertBelowCondition + ")"
		}
		u.ConditionExpression = aws.String(cond)
	}
	u.ExpressionAttributeNames = dynamo.Names(expr, aws.ToString(u.ConditionExpression))
	return item
}

// RecordAlerts is the transaction item that records alerts decided by a claim that moves nothing
// on the row. No condition: the notification the alert stands for is put once by its own
// condition, in the same transaction.
func (t Table) RecordAlerts(accountID, feature, cycleLabel string, keys []string, nowMs int64) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(t.Name),
		Key:                      BudgetKey(accountID, feature, cycleLabel),
		UpdateExpression:         aws.String(alertedUpdate),
		ExpressionAttributeNames: dynamo.Names(alertedUpdate),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":alerts": &types.AttributeValueMemberSS{Value: keys}, ":now": dynamo.N(nowMs),
			":account": dynamo.S(accountID), ":feature": dynamo.S(feature), ":cycle": dynamo.S(cycleLabel),
		},
	}}
}

// capped is a budget-row update (consume or hold) that adds amount to committed only if the
// result stays within limit; an unlimited feature has no condition.
func (t Table) capped(updateExpr, accountID, feature, cycleLabel string, amount int64, limit plans.Limit, nowMs int64) types.TransactWriteItem {
	values := map[string]types.AttributeValue{
		":n":       dynamo.N(amount),
		":now":     dynamo.N(nowMs),
		":account": dynamo.S(accountID),
		":feature": dynamo.S(feature),
		":cycle":   dynamo.S(cycleLabel),
		":one":     dynamo.N(1),
	}
	update := &types.Update{
		TableName:                 aws.String(t.Name),
		Key:                       BudgetKey(accountID, feature, cycleLabel),
		UpdateExpression:          aws.String(updateExpr),
		ExpressionAttributeValues: values,
	}
	if !limit.Unlimited {
		room := limit.CommittedAtMost(amount)
		values[":room"] = dynamo.N(room)
		// A missing committed compares false, so a fresh row passes only when the amount fits.
		cond := capCondition
		if room >= 0 {
			cond = capFreshCondition
		}
		update.ConditionExpression = aws.String(cond)
	}
	update.ExpressionAttributeNames = dynamo.Names(updateExpr, aws.ToString(update.ConditionExpression))
	return types.TransactWriteItem{Update: update}
}

// AddToShard is the transaction item that counts amount on one counter shard, uncapped.
func (t Table) AddToShard(accountID, feature, cycleLabel string, shard int, amount, nowMs int64) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(t.Name),
		Key: map[string]types.AttributeValue{
			"pk": dynamo.S(PartitionKey(accountID, feature, cycleLabel)),
			"sk": dynamo.S(fmt.Sprintf("%s%02d", shardPrefix, shard)),
		},
		UpdateExpression:         aws.String(shardUpdate),
		ExpressionAttributeNames: dynamo.Names(shardUpdate),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":n": dynamo.N(amount), ":now": dynamo.N(nowMs),
			":account": dynamo.S(accountID), ":feature": dynamo.S(feature), ":cycle": dynamo.S(cycleLabel),
			":one": dynamo.N(1),
		},
	}}
}

// Totals is one (account, feature, cycle)'s usage.
type Totals struct {
	// Used is final usage: the budget row's used plus every counter shard.
	Used int64
	// Held is the sum of running holds.
	Held int64
	// Committed is what a hard cap compares against: the budget row's used + held.
	Committed int64
	// Shards is how many counter shards carried usage.
	Shards int
	// Corrections is the sum of the partition's correction rows (±): they change what is
	// billed, never what a limit admitted.
	Corrections int64
}

// Billed is the total the provider's meter should hold: final usage plus corrections.
func (t Totals) Billed() int64 { return t.Used + t.Corrections }

// Read sums a usage partition with strongly consistent reads.
func (t Table) Read(ctx context.Context, accountID, feature, cycleLabel string) (Totals, error) {
	tot, _, err := t.ReadRows(ctx, accountID, feature, cycleLabel)
	return tot, err
}

// ReadRows sums a usage partition with strongly consistent reads and returns its rows as read:
// each row's values and its rev come from the same read of that row.
func (t Table) ReadRows(ctx context.Context, accountID, feature, cycleLabel string) (Totals, []map[string]types.AttributeValue, error) {
	var tot Totals
	var rows []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for range maxQueryPages {
		out, err := t.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(t.Name),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  dynamo.Names("#pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(PartitionKey(accountID, feature, cycleLabel))},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return Totals{}, nil, fmt.Errorf("read usage %s %s %s: %w", accountID, feature, cycleLabel, err)
		}
		for _, item := range out.Items {
			rows = append(rows, item)
			sk := dynamo.Str(item, "sk")
			switch {
			case sk == budgetSK:
				tot.Used += dynamo.Int(item, AttrUsed)
				tot.Held = dynamo.Int(item, AttrHeld)
				tot.Committed = dynamo.Int(item, AttrCommitted)
			case strings.HasPrefix(sk, CorrectionPrefix):
				tot.Corrections += dynamo.Int(item, AttrUnits)
			case strings.HasPrefix(sk, MarkPrefix), sk == correctionHeadSK:
				// A report mark, or the corrections head (marks.go): not usage.
			default:
				tot.Used += dynamo.Int(item, AttrUsed)
				tot.Shards++
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return tot, rows, nil
		}
		start = out.LastEvaluatedKey
	}
	return Totals{}, nil, fmt.Errorf("read usage %s %s %s: more than %d pages", accountID, feature, cycleLabel, maxQueryPages)
}

// ReadBudget reads only the budget row; consistent selects a strongly consistent read. The
// advisory gate reads it eventually consistent: it may be a moment stale, and that is fine for
// a courtesy check.
func (t Table) ReadBudget(ctx context.Context, accountID, feature, cycleLabel string, consistent bool) (Totals, error) {
	out, err := t.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(t.Name),
		Key:                      BudgetKey(accountID, feature, cycleLabel),
		ConsistentRead:           aws.Bool(consistent),
		ProjectionExpression:     aws.String(budgetProjection),
		ExpressionAttributeNames: dynamo.Names(budgetProjection),
	})
	if err != nil {
		return Totals{}, fmt.Errorf("read budget %s %s %s: %w", accountID, feature, cycleLabel, err)
	}
	return Totals{
		Used:      dynamo.Int(out.Item, AttrUsed),
		Held:      dynamo.Int(out.Item, AttrHeld),
		Committed: dynamo.Int(out.Item, AttrCommitted),
	}, nil
}
