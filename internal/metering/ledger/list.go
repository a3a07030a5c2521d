package ledger

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Bounds of a page of failed events.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
)

// FailureKey is the failure index's partition of an account's events in one terminal failure
// status (REJECTED or UNINSERTABLE). Account ids never contain '#'.
func FailureKey(accountID string, status Status) string { return accountID + "#" + string(status) }

// Failed reports whether the status is one the failure index lists.
func (s Status) Failed() bool { return s == Rejected || s == Uninsertable }

// FailedPage is one page of an account's events in a failure status, newest failure first, and
// the cursor of the next page ("" at the end).
type FailedPage struct {
	Entries []Entry
	Next    string
}

// ListFailed reads one page of the account's events in status (REJECTED or UNINSERTABLE) from the
// sparse failure index, then the entries themselves in one strongly consistent BatchGetItem. An
// entry that left the status since the index was read (a redrive; indexes are eventually
// consistent) is left out rather than shown as it was.
func (s *Table) ListFailed(ctx context.Context, accountID string, status Status, cursor string, limit int) (FailedPage, error) {
	if !status.Failed() {
		return FailedPage{}, problem.Input(fmt.Sprintf("status must be %s or %s", Rejected, Uninsertable))
	}
	if limit < 1 || limit > MaxPageSize {
		return FailedPage{}, problem.Input(fmt.Sprintf("limit must be 1–%d", MaxPageSize))
	}
	byFailure := dynamo.TimeIndex{
		Table: s.Table, Index: resources.IndexLedgerByFailure, PartitionAttr: resources.IndexLedgerFailureKey,
		TimeAttr: resources.IndexLedgerFailedAt, KeyAttrs: []string{"pk"}, Cursor: failureCursor, ID: eventIDOf,
		Key: func(eventID string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"pk": dynamo.S(Key(accountID, eventID))}
		},
	}
	items, next, err := byFailure.Page(ctx, s.DB, FailureKey(accountID, status), cursor, limit)
	if err != nil {
		return FailedPage{}, fmt.Errorf("list %s events of %s: %w", status, accountID, err)
	}
	page := FailedPage{Next: next}
	for _, item := range items {
		var it entryItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return FailedPage{}, fmt.Errorf("decode ledger %s: %w", dynamo.Str(item, "pk"), err)
		}
		if e := it.entry(); e.Status == status && e.AccountID == accountID {
			page.Entries = append(page.Entries, e)
		}
	}
	return page, nil
}

// failureCursor is the cursor of a page of this list.
var failureCursor = dynamo.NewTimeCursor(`.{1,256}`)

// eventIDOf reads an event's id from its entry's key ("<account>#<event>").
func eventIDOf(key map[string]types.AttributeValue) string {
	_, eventID, _ := strings.Cut(dynamo.Str(key, "pk"), "#")
	return eventID
}
