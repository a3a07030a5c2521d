package dynamo

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// AbsentCondition holds a put to an item whose key no item has yet: every Ferry table's
// partition key is "pk", and an item that exists has one.
const AbsentCondition = "attribute_not_exists(#pk)"

// PutNew writes item unless an item with its key exists, in one conditional PutItem; added is
// false, and nothing is written, when one does. Any other failure is returned as the SDK gave it,
// for the caller to name what it was writing.
func PutNew(ctx context.Context, db *dynamodb.Client, table string, item map[string]types.AttributeValue) (added bool, err error) {
	_, err = db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(table), Item: item,
		ConditionExpression: aws.String(AbsentCondition), ExpressionAttributeNames: Names(AbsentCondition),
	})
	if IsConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}
