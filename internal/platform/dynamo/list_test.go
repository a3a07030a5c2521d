package dynamo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A time list pages one partition of the index newest first: each page starts where the cursor
// of the one before ended, the last page hands out no cursor, another partition never shows, and
// a cursor the list did not hand out is refused as input.
func TestTimeIndex_PagesOnePartitionNewestFirst(t *testing.T) {
	ctx := context.Background()
	env := testenv.New(t)
	db, table := env.Clients.DynamoDB, env.Names.Table(resources.TableHolds)
	put := func(partition, id string, atMs int64) {
		t.Helper()
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk": dynamo.S(strings.Split(partition, "#")[0] + "#" + id), "sk": dynamo.S("hold"),
			resources.IndexHoldsAccountStatus: dynamo.S(partition), resources.IndexHoldsCreatedAt: dynamo.N(atMs),
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		put("acct_l#RUNNING", fmt.Sprintf("item_%d", i), int64(1_000+i))
	}
	put("acct_other#RUNNING", "item_9", 5_000)
	index := dynamo.TimeIndex{
		Table: table, Index: resources.IndexHoldsByAccount, PartitionAttr: resources.IndexHoldsAccountStatus,
		TimeAttr: resources.IndexHoldsCreatedAt, KeyAttrs: []string{"pk", "sk"}, Cursor: dynamo.NewTimeCursor(`item_[0-9]`),
		Key: func(id string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"pk": dynamo.S("acct_l#" + id), "sk": dynamo.S("hold")}
		},
		ID: func(key map[string]types.AttributeValue) string {
			_, id, _ := strings.Cut(dynamo.Str(key, "pk"), "#")
			return id
		},
	}
	var got []string
	pages, cursor := 0, ""
	for pages < 5 {
		items, next, err := index.Page(ctx, db, "acct_l#RUNNING", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, item := range items {
			got = append(got, index.ID(item))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if want := "item_4 item_3 item_2 item_1 item_0"; strings.Join(got, " ") != want || pages != 3 {
		t.Errorf("%d pages listed %v; want 3 pages listing %s", pages, got, want)
	}
	if _, _, err := index.Page(ctx, db, "acct_l#RUNNING", "bm9wZQ", 2); !problem.IsInvalid(err) {
		t.Errorf("a cursor the list never handed out: %v; want an input error", err)
	}
}

// A key-ordered list pages the index from the smallest key up, within the condition it is given
// (here an id prefix): each page starts after the key its cursor names, and the last page hands
// out no cursor.
func TestIndexList_PagesInKeyOrderAfterTheCursor(t *testing.T) {
	ctx := context.Background()
	env := testenv.New(t)
	db, table := env.Clients.DynamoDB, env.Names.Table(resources.TableAccounts)
	for _, id := range []string{"acct_c", "acct_a", "other_b", "acct_b"} {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"id": dynamo.S(id), resources.IndexAccountsListKey: dynamo.S(resources.AccountsListValue),
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	list := dynamo.IndexList{
		Table: table, Index: resources.IndexAccountsList, KeyAttrs: []string{"id"},
		Start: func(cursor string) (map[string]types.AttributeValue, error) {
			return map[string]types.AttributeValue{
				resources.IndexAccountsListKey: dynamo.S(resources.AccountsListValue), "id": dynamo.S(cursor),
			}, nil
		},
		Cursor: func(last map[string]types.AttributeValue) string { return dynamo.Str(last, "id") },
	}
	const cond = "#listKey = :list AND begins_with(#id, :prefix)"
	values := map[string]types.AttributeValue{":list": dynamo.S(resources.AccountsListValue), ":prefix": dynamo.S("acct_")}
	var got []string
	pages, cursor := 0, ""
	for pages < 5 {
		items, next, err := list.Page(ctx, db, cond, values, cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, item := range items {
			got = append(got, dynamo.Str(item, "id"))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if want := "acct_a acct_b acct_c"; strings.Join(got, " ") != want || pages != 2 {
		t.Errorf("%d pages listed %v; want 2 pages listing %s", pages, got, want)
	}
}
