package dynamo

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// IndexList is a list an API serves a page at a time from a keys-only index: each page is one
// Query of the index and then the items themselves, strongly consistent (IndexPage), so the list
// shows every item as it is now. A page's cursor names its last item; the list turns the cursor
// back into the index key the next page starts after.
type IndexList struct {
	Table string
	Index string
	// KeyAttrs are the table's key attributes (strings; every index projects them).
	KeyAttrs []string
	// NewestFirst reads the index's sort key from the largest down.
	NewestFirst bool
	// Start is the index key a page starts after, read from the cursor the page before handed
	// out; a cursor the list did not hand out is an input error.
	Start func(cursor string) (map[string]types.AttributeValue, error)
	// Cursor names a page's last item, from its index key (the Query's LastEvaluatedKey).
	Cursor func(last map[string]types.AttributeValue) string
}

// Page reads up to limit items whose index key meets cond (every attribute name a '#' alias,
// values its ':' values) after cursor ("" for the first page), and the cursor of the next page
// ("" at the end). A cursor Start refuses is refused before anything is read.
func (l IndexList) Page(ctx context.Context, db *dynamodb.Client, cond string, values map[string]types.AttributeValue, cursor string, limit int) (items []map[string]types.AttributeValue, next string, err error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(l.Table),
		IndexName:                 aws.String(l.Index),
		KeyConditionExpression:    aws.String(cond),
		ExpressionAttributeNames:  Names(cond),
		ExpressionAttributeValues: values,
		ScanIndexForward:          aws.Bool(!l.NewestFirst),
		Limit:                     aws.Int32(int32(limit)),
	}
	if cursor != "" {
		if in.ExclusiveStartKey, err = l.Start(cursor); err != nil {
			return nil, "", err
		}
	}
	items, last, err := IndexPage(ctx, db, in, l.KeyAttrs...)
	if err != nil {
		return nil, "", err
	}
	if last != nil {
		next = l.Cursor(last)
	}
	return items, next, nil
}

// TimeIndex is a list of one partition of a keys-only index whose sort key is a time in epoch
// milliseconds, newest first, paged with a TimeCursor: an account's holds in one status, or its
// events in one failure status. The partition is the caller's, so a cursor, which names no
// partition, cannot reach another's.
type TimeIndex struct {
	Table string
	Index string
	// PartitionAttr and TimeAttr are the index's partition and sort key attributes.
	PartitionAttr string
	TimeAttr      string
	// KeyAttrs are the table's key attributes (strings; every index projects them).
	KeyAttrs []string
	Cursor   TimeCursor
	// Key is the table key of the item a cursor names by its id; ID reads an item's id back
	// from its key.
	Key func(id string) map[string]types.AttributeValue
	ID  func(key map[string]types.AttributeValue) string
}

// Page reads up to limit items of the index partition after cursor ("" for the first page),
// newest first, and the cursor of the next page ("" at the end).
func (x TimeIndex) Page(ctx context.Context, db *dynamodb.Client, partition, cursor string, limit int) (items []map[string]types.AttributeValue, next string, err error) {
	list := IndexList{
		Table: x.Table, Index: x.Index, KeyAttrs: x.KeyAttrs, NewestFirst: true,
		Start: func(cursor string) (map[string]types.AttributeValue, error) {
			atMs, id, err := x.Cursor.Decode(cursor)
			if err != nil {
				return nil, err
			}
			start := x.Key(id)
			start[x.PartitionAttr], start[x.TimeAttr] = S(partition), N(atMs)
			return start, nil
		},
		Cursor: func(last map[string]types.AttributeValue) string {
			return x.Cursor.Encode(Int(last, x.TimeAttr), x.ID(last))
		},
	}
	cond := "#" + x.PartitionAttr + " = :partition"
	return list.Page(ctx, db, cond, map[string]types.AttributeValue{":partition": S(partition)}, cursor, limit)
}
