package holds

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Bounds of a page of holds.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
)

// Statuses lists every status, in the order a list shows them.
var Statuses = []Status{Running, Expired, Settled}

// Valid reports whether s is a hold status.
func (s Status) Valid() bool { return s == Running || s == Settled || s == Expired }

// AccountStatusKey is the account index's partition of an account's holds in one status.
// Account ids never contain '#'.
func AccountStatusKey(accountID string, status Status) string {
	return accountID + "#" + string(status)
}

// Page is one page of holds, newest first, and the cursor of the next ("" at the end).
type Page struct {
	Holds []Hold
	Next  string
}

// List reads one page of an account's holds in one status from the account index, then the holds
// themselves in one strongly consistent BatchGetItem. A hold that left the status since the index
// was read (a settlement; indexes are eventually consistent) is left out rather than shown as it
// was.
func (s *DynamoStore) List(ctx context.Context, accountID string, status Status, cursor string, limit int) (Page, error) {
	if !status.Valid() {
		return Page{}, problem.Input(fmt.Sprintf("status must be %s, %s or %s", Running, Expired, Settled))
	}
	if limit < 1 || limit > MaxPageSize {
		return Page{}, problem.Input(fmt.Sprintf("limit must be 1–%d", MaxPageSize))
	}
	part := AccountStatusKey(accountID, status)
	const cond = "#accountStatus = :k"
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.Table),
		IndexName:                 aws.String(resources.IndexHoldsByAccount),
		KeyConditionExpression:    aws.String(cond),
		ExpressionAttributeNames:  dynamo.Names(cond),
		ExpressionAttributeValues: map[string]types.AttributeValue{":k": dynamo.S(part)},
		ScanIndexForward:          aws.Bool(false),
		Limit:                     aws.Int32(int32(limit)),
	}
	if cursor != "" {
		atMs, holdID, err := pageCursor.Decode(cursor)
		if err != nil {
			return Page{}, err
		}
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			resources.IndexHoldsAccountStatus: dynamo.S(part), resources.IndexHoldsCreatedAt: dynamo.N(atMs),
			"pk": dynamo.S(partition(accountID, holdID)), "sk": dynamo.S(holdSK),
		}
	}
	items, last, err := dynamo.IndexPage(ctx, s.DB, in, "pk", "sk")
	if err != nil {
		return Page{}, fmt.Errorf("list %s holds of %s: %w", status, accountID, err)
	}
	var page Page
	if last != nil {
		_, holdID, _ := strings.Cut(dynamo.Str(last, "pk"), "#")
		page.Next = pageCursor.Encode(dynamo.Int(last, resources.IndexHoldsCreatedAt), holdID)
	}
	for _, item := range items {
		h, err := decodeHold(item)
		if err != nil {
			return Page{}, err
		}
		if h.Status == status && h.AccountID == accountID {
			page.Holds = append(page.Holds, h)
		}
	}
	return page, nil
}

// pageCursor is the cursor of a page of this list.
var pageCursor = dynamo.NewTimeCursor(`hold_[a-z2-7]{26}`)
