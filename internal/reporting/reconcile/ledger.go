package reconcile

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/meter"
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
//
// A feature another meter moves (not the built-in events count) is summed from the units'
// records (usage.Record): every unit's claim puts one per feature it moves, in the transaction
// that claims its entries, saying what it added (SUM, COUNT, new distinct values), its largest
// value (MAX) or its latest (LATEST). Entries keep their own values too; the records are the
// same facts, one item per unit instead of one per event, which is what a nightly sum of a
// million-event cycle can afford.
type LedgerReader struct {
	DB          *dynamodb.Client
	LedgerTable string
	HoldsTable  string
	// Usage is the usage table, where the units' records are; Catalog says which meter moves
	// a feature, and so how its records combine.
	Usage   usage.Table
	Catalog plans.Catalog
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
	// Events counts the billed events; Holds sums what settled holds charged; Metered is the
	// figure the units' records make, for a feature a meter other than events moves.
	Events  int64
	Holds   int64
	Metered int64
	// Pages counts the index pages read.
	Pages int
}

// Total is the counters' part of the ledger's total (corrections apart).
func (s Sum) Total() int64 { return s.Events + s.Holds + s.Metered }

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
	if m, ok := l.Catalog.MeterFor(k.Feature); ok && meter.KeepsRecords(m.Name, m.Feature) {
		recs, pages, err := l.Usage.Records(ctx, k.Account, k.Feature, k.Cycle)
		s.Pages += pages
		if err != nil {
			return Sum{}, err
		}
		rows, figure := Combine(m.Aggregation, recs)
		for sk, n := range rows {
			s.Rows[sk] += n
		}
		s.Metered = figure
		if !m.Aggregation.Additive() {
			return s, nil // no hold is ever taken on a MAX or LATEST feature
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

// Combine is what units' records make of a feature's counters, by the aggregation of its meter:
// per counter row, and the figure. Additive records add up on the row each moved; a MAX is the
// largest record, a LATEST the record of the latest event (by its order key), both on the
// budget row.
func Combine(a meter.Aggregation, recs []usage.Record) (map[string]int64, int64) {
	rows := map[string]int64{}
	var figure int64
	switch a {
	case meter.Max:
		found := false
		for _, r := range recs {
			if !found || r.Amount > figure {
				figure, found = r.Amount, true
			}
		}
		if found {
			rows[usage.BudgetSK] = figure
		}
	case meter.Latest:
		order := ""
		for _, r := range recs {
			if r.Order > order {
				order, figure = r.Order, r.Amount
			}
		}
		if order != "" {
			rows[usage.BudgetSK] = figure
		}
	default:
		for _, r := range recs {
			rows[r.Row] += r.Amount
			figure += r.Amount
		}
	}
	return rows, figure
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
