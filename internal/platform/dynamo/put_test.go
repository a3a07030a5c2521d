package dynamo_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// The first put of a key writes its item; a second put of the same key adds nothing and leaves
// the first item as it was; a failure that is not the condition is returned.
func TestPutNew_SecondPutOfAKeyAddsNothing(t *testing.T) {
	ctx := context.Background()
	env := testenv.New(t)
	db, table := env.Clients.DynamoDB, env.Names.Table(resources.TableReview)
	item := func(detail string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": dynamo.S("review"), "sk": dynamo.S("entry_1"), "detail": dynamo.S(detail)}
	}
	for i, want := range []bool{true, false} {
		added, err := dynamo.PutNew(ctx, db, table, item([]string{"first", "second"}[i]))
		if err != nil || added != want {
			t.Fatalf("put %d: added %v, %v; want added %v", i+1, added, err, want)
		}
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": dynamo.S("review"), "sk": dynamo.S("entry_1")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := dynamo.Str(out.Item, "detail"); got != "first" {
		t.Errorf("detail = %q after the second put; want the first put's", got)
	}
	if added, err := dynamo.PutNew(ctx, db, table+"-missing", item("x")); err == nil || added {
		t.Errorf("put to a missing table: added %v, %v; want an error", added, err)
	}
}
