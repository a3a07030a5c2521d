package holds

import (
	"context"
	"fmt"
	"strings"

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
func (s *Table) List(ctx context.Context, accountID string, status Status, cursor string, limit int) (Page, error) {
	if !status.Valid() {
		return Page{}, problem.Input(fmt.Sprintf("status must be %s, %s or %s", Running, Expired, Settled))
	}
	if limit < 1 || limit > MaxPageSize {
		return Page{}, problem.Input(fmt.Sprintf("limit must be 1–%d", MaxPageSize))
	}
	byAccount := dynamo.TimeIndex{
		Table: s.Table, Index: resources.IndexHoldsByAccount, PartitionAttr: resources.IndexHoldsAccountStatus,
		TimeAttr: resources.IndexHoldsCreatedAt, KeyAttrs: []string{"pk", "sk"}, Cursor: pageCursor, ID: holdIDOf,
		Key: func(holdID string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"pk": dynamo.S(partition(accountID, holdID)), "sk": dynamo.S(holdSK)}
		},
	}
	items, next, err := byAccount.Page(ctx, s.DB, AccountStatusKey(accountID, status), cursor, limit)
	if err != nil {
		return Page{}, fmt.Errorf("list %s holds of %s: %w", status, accountID, err)
	}
	page := Page{Next: next}
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

// holdIDOf reads a hold's id from its key ("<account>#<hold>").
func holdIDOf(key map[string]types.AttributeValue) string {
	_, holdID, _ := strings.Cut(dynamo.Str(key, "pk"), "#")
	return holdID
}
