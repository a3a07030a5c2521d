// Package ratelimit keeps fixed-window counters in DynamoDB: one small item per (subject,
// window) that a conditional ADD moves. Counting is a single-item write, never a scan of the work
// being limited, so the counter never conflicts with that work's own rows. The counter's write is
// a transaction item: the caller puts it in the same transaction as the thing it counts, so only
// work that commits is counted, and a retried request that finds its work already done is not.
package ratelimit

import (
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// counterRetention is how long a window's item outlives the window before DynamoDB's TTL may
// delete it: long enough to read it back when resolving a cancelled transaction.
const counterRetention = time.Hour

// Expressions. Every attribute name is an alias (see dynamo.Names).
const (
	takeUpdate    = "ADD #count :one SET #expiresAt = if_not_exists(#expiresAt, :ttl)"
	takeCondition = "attribute_not_exists(#count) OR #count < :max"
)

// Window is one fixed window of a limit.
type Window struct {
	Start time.Time
	End   time.Time
}

// WindowAt is the window of length size that contains t. Windows are aligned to the Unix epoch,
// so every process agrees on them without coordination.
func WindowAt(t time.Time, size time.Duration) Window {
	start := t.UTC().Truncate(size)
	return Window{Start: start, End: start.Add(size)}
}

// RetryAfter is how long a caller refused in this window waits for the next one, rounded up
// to whole seconds (the unit of the Retry-After header), and at least one second.
func (w Window) RetryAfter(now time.Time) time.Duration {
	d := w.End.Sub(now)
	secs := (d + time.Second - 1) / time.Second
	return max(time.Second, secs*time.Second)
}

// Limit is a number of takes per window.
type Limit struct {
	// Name scopes the counters ("holds"), so several limits can share one table.
	Name   string
	Max    int64
	Window time.Duration
}

// Table is the rate-limit table.
type Table struct {
	DB   *dynamodb.Client
	Name string
}

func (t Table) key(l Limit, subject string, w Window) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": dynamo.S(l.Name + "#" + subject + "#" + strconv.FormatInt(w.Start.Unix(), 10)),
	}
}

// Take is the transaction item that counts one take for subject in the window containing now,
// only if the window has room. A full window cancels the transaction it is part of.
func (t Table) Take(l Limit, subject string, now time.Time) types.TransactWriteItem {
	w := WindowAt(now, l.Window)
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(t.Name),
		Key:                      t.key(l, subject, w),
		UpdateExpression:         aws.String(takeUpdate),
		ConditionExpression:      aws.String(takeCondition),
		ExpressionAttributeNames: dynamo.Names(takeUpdate, takeCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":one": dynamo.N(1),
			":max": dynamo.N(l.Max),
			":ttl": dynamo.N(w.End.Add(counterRetention).Unix()),
		},
	}}
}

// Get is the transactional read of subject's counter in the window containing now, for
// resolving a cancelled transaction together with the other items it touched.
func (t Table) Get(l Limit, subject string, now time.Time) types.TransactGetItem {
	return types.TransactGetItem{Get: &types.Get{
		TableName:                aws.String(t.Name),
		Key:                      t.key(l, subject, WindowAt(now, l.Window)),
		ProjectionExpression:     aws.String("#count"),
		ExpressionAttributeNames: dynamo.Names("#count"),
	}}
}

// CountOf reads the count from an item returned for Get; a missing item counts zero.
func CountOf(item map[string]types.AttributeValue) int64 { return dynamo.Int(item, "count") }
