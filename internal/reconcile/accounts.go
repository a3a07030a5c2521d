package reconcile

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/dynamo"
)

// AccountPager lists account ids from the accounts table, a page at a time (a paged Scan of the
// ids alone: the nightly run visits every account once).
type AccountPager struct {
	DB    *dynamodb.Client
	Table string
}

// Page returns up to size account ids after the id after ("" for the first page), and the id to
// continue after ("" when there are no more).
func (p *AccountPager) Page(ctx context.Context, after string, size int) ([]string, string, error) {
	in := &dynamodb.ScanInput{
		TableName:                aws.String(p.Table),
		ProjectionExpression:     aws.String("#id"),
		ExpressionAttributeNames: dynamo.Names("#id"),
		Limit:                    aws.Int32(int32(size)),
	}
	if after != "" {
		in.ExclusiveStartKey = map[string]types.AttributeValue{"id": dynamo.S(after)}
	}
	out, err := p.DB.Scan(ctx, in)
	if err != nil {
		return nil, "", fmt.Errorf("list accounts: %w", err)
	}
	ids := make([]string, 0, len(out.Items))
	for _, item := range out.Items {
		ids = append(ids, dynamo.Str(item, "id"))
	}
	next := ""
	if len(out.LastEvaluatedKey) > 0 {
		next = dynamo.Str(out.LastEvaluatedKey, "id")
	}
	return ids, next, nil
}
