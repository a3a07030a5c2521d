package reconcile

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// AccountPager lists account ids a page at a time, in id order, from the accounts table's list
// index (every account is in it from its creation): the nightly run visits every account once.
type AccountPager struct {
	DB    *dynamodb.Client
	Table string
}

const listCondition = "#listKey = :list"

// Page returns up to size account ids after the id after ("" for the first page), and the id to
// continue after ("" when there are no more).
func (p *AccountPager) Page(ctx context.Context, after string, size int) ([]string, string, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(p.Table),
		IndexName:                 aws.String(resources.IndexAccountsList),
		KeyConditionExpression:    aws.String(listCondition),
		ExpressionAttributeNames:  dynamo.Names(listCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{":list": dynamo.S(resources.AccountsListValue)},
		Limit:                     aws.Int32(int32(size)),
	}
	if after != "" {
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			"id": dynamo.S(after), resources.IndexAccountsListKey: dynamo.S(resources.AccountsListValue),
		}
	}
	out, err := p.DB.Query(ctx, in)
	if err != nil {
		return nil, "", fmt.Errorf("list accounts: %w", err)
	}
	ids := make([]string, 0, len(out.Items))
	for _, item := range out.Items {
		ids = append(ids, dynamo.Str(item, "id"))
	}
	next := ""
	if len(out.LastEvaluatedKey) > 0 && len(ids) > 0 {
		next = ids[len(ids)-1]
	}
	return ids, next, nil
}
