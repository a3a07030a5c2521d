package accounts

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Bounds of a page of accounts.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
)

// Page is one page of accounts in id order, and the cursor of the next ("" at the end).
type Page struct {
	Accounts []Account
	Next     string
}

// ListInput asks for a page of accounts: every account, or those whose id starts with Prefix.
type ListInput struct {
	Prefix string
	Cursor string
	Limit  int
}

// Validate joins every problem with the input.
func (in ListInput) Validate() error {
	var problems []string
	if in.Prefix != "" && !prefixPattern.MatchString(in.Prefix) {
		problems = append(problems, "prefix must be the start of an account id (letters, digits, _ and -, at most 64)")
	}
	if in.Limit < 1 || in.Limit > MaxPageSize {
		problems = append(problems, fmt.Sprintf("limit must be 1–%d", MaxPageSize))
	}
	if in.Cursor != "" {
		if _, err := decodeCursor(in.Cursor); err != nil {
			problems = append(problems, "cursor is not one this API returned")
		}
	}
	return problem.Fields(problems)
}

// Admits reports whether the account id is on the list in asks for: it starts with the prefix
// and comes after the cursor, in id order. in must be valid.
func (in ListInput) Admits(id string) bool {
	if !strings.HasPrefix(id, in.Prefix) {
		return false
	}
	if in.Cursor == "" {
		return true
	}
	after, err := decodeCursor(in.Cursor)
	return err == nil && id > after
}

// List returns a page of accounts (the operator's search: an id prefix).
func (s *Service) List(ctx context.Context, in ListInput) (Page, error) {
	if in.Limit == 0 {
		in.Limit = DefaultPageSize
	}
	if err := in.Validate(); err != nil {
		return Page{}, err
	}
	return s.Store.List(ctx, in.Prefix, in.Cursor, in.Limit)
}

// List implements Store: one page of the accounts table's list index (keys only, in id order,
// begins_with the prefix), then the accounts themselves in one strongly consistent BatchGetItem.
func (s *Table) List(ctx context.Context, prefix, cursor string, limit int) (Page, error) {
	cond := "#listKey = :list"
	values := map[string]types.AttributeValue{":list": dynamo.S(resources.AccountsListValue)}
	if prefix != "" {
		cond += " AND begins_with(#id, :prefix)"
		values[":prefix"] = dynamo.S(prefix)
	}
	items, next, err := listIndex(s.AccountsTable).Page(ctx, s.DB, cond, values, cursor, limit)
	if err != nil {
		return Page{}, fmt.Errorf("list accounts: %w", err)
	}
	page := Page{Next: next}
	for _, item := range items {
		var it accountItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return Page{}, fmt.Errorf("decode account %s: %w", dynamo.Str(item, "id"), err)
		}
		page.Accounts = append(page.Accounts, it.account())
	}
	return page, nil
}

// listIndex is the list index of the accounts table: keys only, every account in id order.
func listIndex(table string) dynamo.IndexList {
	return dynamo.IndexList{
		Table: table, Index: resources.IndexAccountsList, KeyAttrs: []string{"id"},
		Start: func(cursor string) (map[string]types.AttributeValue, error) {
			after, err := decodeCursor(cursor)
			if err != nil {
				return nil, problem.Input("cursor is not one this API returned")
			}
			return map[string]types.AttributeValue{
				resources.IndexAccountsListKey: dynamo.S(resources.AccountsListValue), "id": dynamo.S(after),
			}, nil
		},
		Cursor: func(last map[string]types.AttributeValue) string {
			return base64.RawURLEncoding.EncodeToString([]byte(dynamo.Str(last, "id")))
		},
	}
}

// A cursor is the id of a page's last account, base64url-encoded; it always continues the list
// of the query it came with.
func decodeCursor(cursor string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || !ValidID(string(raw)) {
		return "", fmt.Errorf("not a cursor")
	}
	return string(raw), nil
}
