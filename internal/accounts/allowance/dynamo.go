package allowance

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// Sort keys in a cycle's partition: the head that versions the rows, and one row per plan.
const (
	headSK    = "head"
	rowPrefix = "plan#"
)

// maxReadPages bounds one cycle read: a cycle has at most one row per plan of the catalog.
const maxReadPages = 4

// Expressions. Every attribute name is an alias (see dynamo.Names).
const (
	// headUpdate moves the head to the next revision and records the rows' sum beside it.
	headUpdate = "SET #rev = :next, #granted = :granted, #accountId = :account, #feature = :feature, #cycle = :cycle, #updatedAtMs = :now"
	// headFirst and headAt are the version guard: the rows are written only if no one wrote
	// the cycle's rows since they were read.
	headFirst = "attribute_not_exists(#pk)"
	headAt    = "#rev = :rev"
)

// Table keeps grant rows in the grants table.
type Table struct {
	DB    *dynamodb.Client
	Table string
}

type rowItem struct {
	PK          string `dynamodbav:"pk"`
	SK          string `dynamodbav:"sk"`
	AccountID   string `dynamodbav:"accountId"`
	Feature     string `dynamodbav:"feature"`
	Cycle       string `dynamodbav:"cycle"`
	Plan        string `dynamodbav:"plan"`
	Amount      int64  `dynamodbav:"amount"`
	Reason      string `dynamodbav:"reason"`
	EventID     string `dynamodbav:"eventId,omitempty"`
	GrantedAtMs int64  `dynamodbav:"grantedAtMs"`
}

// partition is the cycle's partition key. Account ids never contain '#'.
func partition(accountID, feature, label string) string {
	return accountID + "#" + feature + "#" + label
}

func headKey(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(pk), "sk": dynamo.S(headSK)}
}

// Read returns a cycle's rows and their revision, strongly consistent, in one Query.
func (s *Table) Read(ctx context.Context, accountID, feature, label string) (Cycle, error) {
	c := Cycle{AccountID: accountID, Feature: feature, Label: label}
	pk := partition(accountID, feature, label)
	var start map[string]types.AttributeValue
	for range maxReadPages {
		out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.Table),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  dynamo.Names("#pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(pk)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return Cycle{}, fmt.Errorf("read grants %s: %w", pk, err)
		}
		for _, item := range out.Items {
			sk := dynamo.Str(item, "sk")
			switch {
			case sk == headSK:
				c.Rev = dynamo.Int(item, "rev")
			case strings.HasPrefix(sk, rowPrefix):
				var it rowItem
				if err := attributevalue.UnmarshalMap(item, &it); err != nil {
					return Cycle{}, fmt.Errorf("decode grant %s %s: %w", pk, sk, err)
				}
				c.Grants = append(c.Grants, Grant{Plan: it.Plan, Amount: it.Amount, Reason: Reason(it.Reason), EventID: it.EventID, GrantedAtMs: it.GrantedAtMs})
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return c, nil
		}
		start = out.LastEvaluatedKey
	}
	return Cycle{}, fmt.Errorf("read grants %s: more than %d pages", pk, maxReadPages)
}

// Items are the transaction items that add rows to a cycle read as c: one Put per row and the
// head's move to the next revision, conditioned on the revision c was read at. The rows carry
// no condition of their own: the head's guard already refuses any write decided on rows that
// changed since, a repeated row included. Callers that commit them in a transaction of their
// own (with an effect and its mark) resolve a cancellation by reading the cycle again.
func (s *Table) Items(c Cycle, add []Grant, nowMs int64) ([]types.TransactWriteItem, error) {
	if err := Validate(c, add); err != nil {
		return nil, err
	}
	if len(add) == 0 {
		return nil, nil
	}
	pk := partition(c.AccountID, c.Feature, c.Label)
	items := make([]types.TransactWriteItem, 0, len(add)+1)
	total := c.Total()
	for _, g := range add {
		total += g.Amount
		row, err := attributevalue.MarshalMap(rowItem{
			PK: pk, SK: rowPrefix + g.Plan, AccountID: c.AccountID, Feature: c.Feature, Cycle: c.Label,
			Plan: g.Plan, Amount: g.Amount, Reason: string(g.Reason), EventID: g.EventID, GrantedAtMs: g.GrantedAtMs,
		})
		if err != nil {
			return nil, fmt.Errorf("encode grant %s %s: %w", pk, g.Plan, err)
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.Table), Item: row}})
	}
	cond, values := headFirst, map[string]types.AttributeValue{
		":next": dynamo.N(c.Rev + 1), ":granted": dynamo.N(total), ":now": dynamo.N(nowMs),
		":account": dynamo.S(c.AccountID), ":feature": dynamo.S(c.Feature), ":cycle": dynamo.S(c.Label),
	}
	if c.Rev > 0 {
		cond = headAt
		values[":rev"] = dynamo.N(c.Rev)
	}
	items = append(items, types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(s.Table),
		Key:                       headKey(pk),
		UpdateExpression:          aws.String(headUpdate),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  dynamo.Names(headUpdate, cond),
		ExpressionAttributeValues: values,
	}})
	return items, nil
}

// Add writes rows to a cycle read as c in a transaction of their own. It returns ErrCancelled
// when the transaction was cancelled (nothing was written); the caller reads the cycle again.
func (s *Table) Add(ctx context.Context, c Cycle, add []Grant, nowMs int64) error {
	items, err := s.Items(c, add, nowMs)
	if err != nil || len(items) == 0 {
		return err
	}
	_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if dynamo.IsTransactionCanceled(err) {
		return fmt.Errorf("add grants to %s %s %s: %w", c.AccountID, c.Feature, c.Label, ErrCancelled)
	}
	if err != nil {
		return fmt.Errorf("add grants to %s %s %s: %w", c.AccountID, c.Feature, c.Label, err)
	}
	return nil
}
