package accounts

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/dynamo"
	"github.com/ferrymeter/ferry/internal/plans"
)

// DynamoStore keeps accounts in the accounts table and key hashes in the apikeys table.
type DynamoStore struct {
	DB            *dynamodb.Client
	AccountsTable string
	KeysTable     string
}

type accountItem struct {
	ID               string            `dynamodbav:"id"`
	Plan             string            `dynamodbav:"plan"`
	Status           string            `dynamodbav:"status"`
	Limits           map[string]*int64 `dynamodbav:"limits,omitempty"`
	AgreementDay     int               `dynamodbav:"agreementDay,omitempty"`
	CreatedAtMs      int64             `dynamodbav:"createdAtMs"`
	UpdatedAtMs      int64             `dynamodbav:"updatedAtMs"`
	UsageStartedAtMs int64             `dynamodbav:"usageStartedAtMs,omitempty"`
}

type keyItem struct {
	KeyHash     string `dynamodbav:"keyHash"`
	AccountID   string `dynamodbav:"accountId"`
	CreatedAtMs int64  `dynamodbav:"createdAtMs"`
}

func limitsToItem(l map[string]plans.Limit) map[string]*int64 {
	if len(l) == 0 {
		return nil
	}
	out := make(map[string]*int64, len(l))
	for f, v := range l {
		if v.Unlimited {
			out[f] = nil
			continue
		}
		out[f] = aws.Int64(v.Max)
	}
	return out
}

func (it accountItem) account() Account {
	a := Account{
		ID: it.ID, Plan: it.Plan, Status: Status(it.Status), AgreementDay: it.AgreementDay,
		CreatedAtMs: it.CreatedAtMs, UpdatedAtMs: it.UpdatedAtMs, UsageStartedAtMs: it.UsageStartedAtMs,
		Known: true,
	}
	if len(it.Limits) > 0 {
		a.Limits = make(map[string]plans.Limit, len(it.Limits))
		for f, v := range it.Limits {
			if v == nil {
				a.Limits[f] = plans.Unlimited
			} else {
				a.Limits[f] = plans.Max(*v)
			}
		}
	}
	return a
}

const markUsageStarted = "SET #usageStartedAtMs = if_not_exists(#usageStartedAtMs, :now)"

// Create implements Store.
func (s *DynamoStore) Create(ctx context.Context, a Account, keyHash string) error {
	acct, err := attributevalue.MarshalMap(accountItem{
		ID: a.ID, Plan: a.Plan, Status: string(a.Status), Limits: limitsToItem(a.Limits),
		CreatedAtMs: a.CreatedAtMs, UpdatedAtMs: a.UpdatedAtMs,
	})
	if err != nil {
		return err
	}
	key, err := attributevalue.MarshalMap(keyItem{KeyHash: keyHash, AccountID: a.ID, CreatedAtMs: a.CreatedAtMs})
	if err != nil {
		return err
	}
	_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{
			TableName: aws.String(s.AccountsTable), Item: acct,
			ConditionExpression: aws.String("attribute_not_exists(#id)"), ExpressionAttributeNames: dynamo.Names("#id"),
		}},
		{Put: &types.Put{
			TableName: aws.String(s.KeysTable), Item: key,
			ConditionExpression: aws.String("attribute_not_exists(#keyHash)"), ExpressionAttributeNames: dynamo.Names("#keyHash"),
		}},
	}})
	if dynamo.IsTransactionCanceled(err) {
		// A 256-bit key never collides; the only durable reason is an existing account.
		if _, gerr := s.Get(ctx, a.ID); gerr == nil {
			return ErrExists
		}
		return fmt.Errorf("create account %s: %w", a.ID, err)
	}
	if err != nil {
		return fmt.Errorf("create account %s: %w", a.ID, err)
	}
	return nil
}

// Get implements Store.
func (s *DynamoStore) Get(ctx context.Context, id string) (Account, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.AccountsTable),
		Key:            map[string]types.AttributeValue{"id": dynamo.S(id)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Account{}, fmt.Errorf("get account %s: %w", id, err)
	}
	if out.Item == nil {
		return Account{}, ErrNotFound
	}
	var it accountItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return Account{}, fmt.Errorf("decode account %s: %w", id, err)
	}
	return it.account(), nil
}

// Update implements Store.
func (s *DynamoStore) Update(ctx context.Context, id string, in UpdateInput, nowMs int64) (Account, error) {
	sets := []string{"#updatedAtMs = :now"}
	values := map[string]types.AttributeValue{":now": dynamo.N(nowMs)}
	cond := "attribute_exists(#id)"
	if in.Plan != nil {
		sets = append(sets, "#plan = :plan")
		values[":plan"] = &types.AttributeValueMemberS{Value: *in.Plan}
	}
	if in.Status != nil {
		sets = append(sets, "#status = :status")
		values[":status"] = &types.AttributeValueMemberS{Value: string(*in.Status)}
	}
	if in.Limits != nil {
		// NULL, not REMOVE or an empty map: it reads the same (no overrides), and minidyn ignores
		// REMOVE and garbles empty maps.
		var av types.AttributeValue = &types.AttributeValueMemberNULL{Value: true}
		if len(*in.Limits) > 0 {
			var err error
			if av, err = attributevalue.Marshal(limitsToItem(*in.Limits)); err != nil {
				return Account{}, err
			}
		}
		sets = append(sets, "#limits = :limits")
		values[":limits"] = av
	}
	if in.AgreementDay != nil {
		sets = append(sets, "#agreementDay = :day")
		values[":day"] = dynamo.N(int64(*in.AgreementDay))
		// Setting the day it already has is not a change, even after the first usage.
		cond += " AND (attribute_not_exists(#usageStartedAtMs) OR #agreementDay = :day)"
	}
	update := "SET " + strings.Join(sets, ", ")
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.AccountsTable),
		Key:                       map[string]types.AttributeValue{"id": dynamo.S(id)},
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  dynamo.Names(update, cond),
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if dynamo.IsConditionFailed(err) {
		if _, gerr := s.Get(ctx, id); errors.Is(gerr, ErrNotFound) {
			return Account{}, ErrNotFound
		} else if gerr != nil {
			return Account{}, gerr
		}
		return Account{}, ErrAgreementLocked
	}
	if err != nil {
		return Account{}, fmt.Errorf("update account %s: %w", id, err)
	}
	var it accountItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return Account{}, fmt.Errorf("decode account %s: %w", id, err)
	}
	return it.account(), nil
}

// AccountIDForKey implements Store.
func (s *DynamoStore) AccountIDForKey(ctx context.Context, keyHash string) (string, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.KeysTable),
		Key:       map[string]types.AttributeValue{"keyHash": dynamo.S(keyHash)},
	})
	if err != nil {
		return "", fmt.Errorf("look up API key: %w", err)
	}
	if out.Item == nil {
		return "", ErrUnauthenticated
	}
	var it keyItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return "", fmt.Errorf("decode API key: %w", err)
	}
	return it.AccountID, nil
}

// MarkUsageStarted implements Store.
func (s *DynamoStore) MarkUsageStarted(ctx context.Context, id string, nowMs int64) (Account, error) {
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.AccountsTable),
		Key:                       map[string]types.AttributeValue{"id": dynamo.S(id)},
		UpdateExpression:          aws.String(markUsageStarted),
		ConditionExpression:       aws.String("attribute_exists(#id)"),
		ExpressionAttributeNames:  dynamo.Names(markUsageStarted, "#id"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": dynamo.N(nowMs)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if dynamo.IsConditionFailed(err) {
		return Account{}, ErrNotFound
	}
	if err != nil {
		return Account{}, fmt.Errorf("mark usage started for %s: %w", id, err)
	}
	var it accountItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return Account{}, fmt.Errorf("decode account %s: %w", id, err)
	}
	return it.account(), nil
}
