package reconcile

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/report"
)

// LedgerReader sums the durable rows a cycle's total is made of, paged, from the ledger's meter
// index (every billed event, by the counter row it moved) and the holds' settled index (what
// every settled hold charged). Corrections are rows of the usage partition itself. The indexes
// are eventually consistent: a row written a moment ago may be missing, never one that does not
// exist, so a sum can lag the counters and never lead them.
type LedgerReader struct {
	DB          *dynamodb.Client
	LedgerTable string
	HoldsTable  string
}

// Bounds of one sum.
const (
	// maxIndexPages bounds the pages of one counter row's events (a COUNT page covers up to
	// 1 MB of index entries, about ten thousand events).
	maxIndexPages = 2_000
	// maxHoldPages bounds the pages of one cycle's settled holds (holds open at most 120 a
	// minute per account).
	maxHoldPages = 500
)

// Sum is the ledger's account of one cycle, by counter row.
type Sum struct {
	// Rows is, per counter row's sort key, the usage the ledger says the row holds.
	Rows map[string]int64
	// Events counts the billed events; Holds sums what settled holds charged.
	Events int64
	Holds  int64
	// Pages counts the index pages read.
	Pages int
}

// Total is the counters' part of the ledger's total (corrections apart).
func (s Sum) Total() int64 { return s.Events + s.Holds }

// Sum reads the ledger rows behind every counter row of a cycle. Events can sit on the budget
// row (a capped plan) or any counter shard (a counted plan); the plan may have changed within
// the cycle, so every row is counted.
func (l *LedgerReader) Sum(ctx context.Context, k report.Key) (Sum, error) {
	s := Sum{Rows: map[string]int64{}}
	var sks []string
	if k.Feature == plans.FeatureEvents {
		// Only events are billed by the ledger's event entries (one unit each).
		sks = append(sks, usage.BudgetSK)
		for n := range usage.NumShards {
			sks = append(sks, usage.ShardSK(n))
		}
	}
	for _, sk := range sks {
		n, pages, err := l.countEvents(ctx, usage.MeterRow(k.Account, k.Feature, k.Cycle, sk))
		s.Pages += pages
		if err != nil {
			return Sum{}, err
		}
		if n > 0 {
			s.Rows[sk] += n
			s.Events += n
		}
	}
	charged, pages, err := l.sumHolds(ctx, k.PK())
	s.Pages += pages
	if err != nil {
		return Sum{}, err
	}
	if charged != 0 {
		s.Rows[usage.BudgetSK] += charged
		s.Holds = charged
	}
	return s, nil
}

const meterRowCondition = "#meterRow = :row"

func (l *LedgerReader) countEvents(ctx context.Context, row string) (int64, int, error) {
	var n int64
	var start map[string]types.AttributeValue
	for page := 1; page <= maxIndexPages; page++ {
		out, err := l.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(l.LedgerTable),
			IndexName:                 aws.String(resources.IndexLedgerByMeterRow),
			KeyConditionExpression:    aws.String(meterRowCondition),
			ExpressionAttributeNames:  dynamo.Names(meterRowCondition),
			ExpressionAttributeValues: map[string]types.AttributeValue{":row": dynamo.S(row)},
			Select:                    types.SelectCount,
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return 0, page, fmt.Errorf("count the ledger's events of %s: %w", row, err)
		}
		n += int64(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			return n, page, nil
		}
		start = out.LastEvaluatedKey
	}
	return 0, maxIndexPages, fmt.Errorf("count the ledger's events of %s: more than %d pages", row, maxIndexPages)
}

const settledCondition = "#settledPartition = :pk"

func (l *LedgerReader) sumHolds(ctx context.Context, pk string) (int64, int, error) {
	var sum int64
	var start map[string]types.AttributeValue
	for page := 1; page <= maxHoldPages; page++ {
		out, err := l.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(l.HoldsTable),
			IndexName:                 aws.String(resources.IndexHoldsBySettled),
			KeyConditionExpression:    aws.String(settledCondition),
			ExpressionAttributeNames:  dynamo.Names(settledCondition, "#charged"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(pk)},
			ProjectionExpression:      aws.String("#charged"),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return 0, page, fmt.Errorf("sum the settled holds of %s: %w", pk, err)
		}
		for _, item := range out.Items {
			sum += dynamo.Int(item, "charged")
		}
		if len(out.LastEvaluatedKey) == 0 {
			return sum, page, nil
		}
		start = out.LastEvaluatedKey
	}
	return 0, maxHoldPages, fmt.Errorf("sum the settled holds of %s: more than %d pages", pk, maxHoldPages)
}
