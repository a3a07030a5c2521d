// Package review is the review list: what Ferry will not change on its own and a person must
// settle. A closed billing cycle is never written to a provider (a write after the cycle ends
// lands in the next one, or changes an invoice that is already final), so a closed cycle whose
// ledger moved after its last report, or whose meter drifted, is listed here with the numbers;
// so is over-billing that Stripe no longer lets Ferry cancel. Each entry is keyed by what it is
// about and its numbers, so listing the same thing twice adds nothing.
package review

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
)

// Reason says why an entry is on the list.
type Reason string

// Reasons.
const (
	// ClosedCycleChanged: the ledger moved after the cycle closed (a late event, a correction)
	// and the provider was last sent a different total.
	ClosedCycleChanged Reason = "closed_cycle_changed"
	// ClosedCycleDrift: the reconciler found a closed cycle's meter differing from the ledger.
	ClosedCycleDrift Reason = "closed_cycle_drift"
	// OverBilledUncancellable: the meter is above the ledger and the events that would bring it
	// down are past Stripe's 24-hour cancellation window.
	OverBilledUncancellable Reason = "over_billed_uncancellable"
	// OutboxClosed: a Stripe outbox row was still unsent when its cycle closed.
	OutboxClosed Reason = "outbox_row_after_close"
	// NegativeLedger: the ledger's total is below zero (rows written before corrections were
	// bounded by the usage). No provider takes a negative total, so nothing is sent.
	NegativeLedger Reason = "negative_ledger"
)

// Entry is one item of the review list.
type Entry struct {
	Account  string
	Feature  string
	Cycle    string
	Provider string
	Reason   Reason
	// Ledger is the ledger's total; Sent what Ferry last sent; Meter what the provider holds
	// (nil when it was not read).
	Ledger int64
	Sent   int64
	Meter  *int64
	Detail string
	// At is when the entry was listed.
	AtMs int64
}

// key names the entry: what it is about and its numbers.
func (e Entry) key() string {
	meter := "-"
	if e.Meter != nil {
		meter = strconv.FormatInt(*e.Meter, 10)
	}
	return fmt.Sprintf("%s#%s#%s#%s#%s#%d#%d#%s", e.Account, e.Cycle, e.Feature, e.Provider, e.Reason, e.Ledger, e.Sent, meter)
}

// listPartition is the one partition the list lives in: entries are rare (cycle ends, incidents)
// and an operator reads them all at once.
const listPartition = "review"

// maxListPages bounds one read of the list.
const maxListPages = 20

// Table keeps the list in the review table.
type Table struct {
	DB      *dynamodb.Client
	Table   string
	Metrics metrics.Recorder
}

type entryItem struct {
	PK       string `dynamodbav:"pk"`
	SK       string `dynamodbav:"sk"`
	Account  string `dynamodbav:"accountId"`
	Feature  string `dynamodbav:"feature"`
	Cycle    string `dynamodbav:"cycle"`
	Provider string `dynamodbav:"provider"`
	Reason   string `dynamodbav:"reason"`
	Ledger   int64  `dynamodbav:"ledger"`
	Sent     int64  `dynamodbav:"sent"`
	Meter    *int64 `dynamodbav:"meter,omitempty"`
	Detail   string `dynamodbav:"detail"`
	AtMs     int64  `dynamodbav:"atMs"`
}

// Add lists an entry; added is false when the same entry was already listed. A new entry counts
// ReviewListed, whose alarm calls a person.
func (s *Table) Add(ctx context.Context, e Entry) (added bool, err error) {
	item, err := attributevalue.MarshalMap(entryItem{
		PK: listPartition, SK: e.key(), Account: e.Account, Feature: e.Feature, Cycle: e.Cycle, Provider: e.Provider,
		Reason: string(e.Reason), Ledger: e.Ledger, Sent: e.Sent, Meter: e.Meter, Detail: e.Detail, AtMs: e.AtMs,
	})
	if err != nil {
		return false, err
	}
	// The put is conditional on the entry's absence, so an entry is listed once.
	added, err = dynamo.PutNew(ctx, s.DB, s.Table, item)
	if err != nil {
		return false, fmt.Errorf("list %s %s %s for review: %w", e.Account, e.Feature, e.Cycle, err)
	}
	if !added {
		return false, nil
	}
	if s.Metrics != nil {
		s.Metrics.Count(metrics.ReviewListed, 1, metrics.Dimension{Name: "Reason", Value: string(e.Reason)})
	}
	return true, nil
}

// List returns every entry, newest first.
func (s *Table) List(ctx context.Context) ([]Entry, error) {
	var out []Entry
	var start map[string]types.AttributeValue
	for range maxListPages {
		page, err := s.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.Table),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  dynamo.Names("#pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(listPartition)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("read the review list: %w", err)
		}
		for _, raw := range page.Items {
			var it entryItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return nil, fmt.Errorf("decode a review entry: %w", err)
			}
			out = append(out, Entry{
				Account: it.Account, Feature: it.Feature, Cycle: it.Cycle, Provider: it.Provider, Reason: Reason(it.Reason),
				Ledger: it.Ledger, Sent: it.Sent, Meter: it.Meter, Detail: it.Detail, AtMs: it.AtMs,
			})
		}
		if len(page.LastEvaluatedKey) == 0 {
			sort.SliceStable(out, func(i, j int) bool { return out[i].AtMs > out[j].AtMs })
			return out, nil
		}
		start = page.LastEvaluatedKey
	}
	return nil, fmt.Errorf("the review list is longer than one read returns (%d pages)", maxListPages)
}

// At formats an entry's time.
func (e Entry) At() time.Time { return time.UnixMilli(e.AtMs).UTC() }
