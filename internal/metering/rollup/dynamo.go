package rollup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// Bounds of the store's reads.
const (
	// maxQueryPages bounds the pages one range read takes. The widest query (12 cycles of hour
	// items at MaxItemGroupBytes each) is under 80 pages of DynamoDB's 1 MB.
	maxQueryPages = 128
	// splitReads is how many hours of minute items a query reads at once.
	splitReads = 8
)

// ErrCancelled is a transaction Apply sent that DynamoDB cancelled: a condition failed (an item
// moved since it was read, or a write the caller added refused), or it met another transaction.
// Only a new read says which.
var ErrCancelled = errors.New("rollup transaction cancelled")

// Store reads and writes the rollups table.
type Store struct {
	DB    *dynamodb.Client
	Table string
	Now   func() time.Time
	// ConsistentRead makes the query's reads strongly consistent, at twice the read units. Off,
	// a query may miss what was committed within about the last second.
	ConsistentRead bool
}

// Read reads what PlanWrites needs before planning cs's writes: the items Keys lists, strongly
// consistent.
func (s *Store) Read(ctx context.Context, account string, cs []meter.Contribution) (map[string]Item, error) {
	keys := Keys(account, cs)
	var got []map[string]types.AttributeValue
	for start := 0; start < len(keys); start += dynamo.MaxBatchGetKeys {
		items, err := dynamo.BatchGet(ctx, s.DB, s.Table, keys[start:min(start+dynamo.MaxBatchGetKeys, len(keys))])
		if err != nil {
			return nil, fmt.Errorf("read the rollups of %s: %w", account, err)
		}
		got = append(got, items...)
	}
	return ReadItems(keys, got)
}

// Apply commits cs's rollup writes in one TransactWriteItems, planned from a read of the items
// they need, with the writes of claim (the caller's own items: a claim's entries). It is the
// package's own write path, the one the worker's claim transaction carries too; a cancelled
// transaction is ErrCancelled, and the caller reads its own state again before another try.
func (s *Store) Apply(ctx context.Context, account string, cs []meter.Contribution, claim ...types.TransactWriteItem) error {
	read, err := s.Read(ctx, account, cs)
	if err != nil {
		return err
	}
	plan, err := PlanWrites(s.Table, account, cs, read)
	if err != nil {
		return err
	}
	items := append(append([]types.TransactWriteItem(nil), claim...), plan.Writes...)
	if len(items) == 0 {
		return nil
	}
	_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if dynamo.IsTransactionCanceled(err) {
		return fmt.Errorf("apply the rollups of %s: %w", account, ErrCancelled)
	}
	if err != nil {
		return fmt.Errorf("apply the rollups of %s: %w", account, err)
	}
	return nil
}

// Query answers a usage query: it validates and plans it (every refusal is a problem naming the
// parameter), reads the hour and minute items its windows need, and folds them.
func (s *Store) Query(ctx context.Context, in QueryInput) (QueryResult, error) {
	p, err := in.plan(s.Now())
	if err != nil {
		return QueryResult{}, err
	}
	pk := PartitionKey(in.Account, in.Meter.Name)
	var (
		mu    sync.Mutex
		items []Item
	)
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(splitReads)
	read := func(lo, hi string) {
		g.Go(func() error {
			got, err := s.rangeRead(ctx, pk, lo, hi)
			mu.Lock()
			items = append(items, got...)
			mu.Unlock()
			return err
		})
	}
	if !p.hourFrom.IsZero() {
		read(HourKey(p.hourFrom), HourKey(p.hourTo.Add(-time.Hour)))
	}
	if !p.minuteFrom.IsZero() {
		read(MinuteKey(p.minuteFrom), MinuteKey(p.minuteTo.Add(-time.Minute)))
	}
	for _, h := range p.split {
		read(MinuteKey(h), MinuteKey(h.Add(time.Hour-time.Minute)))
	}
	if err := g.Wait(); err != nil {
		return QueryResult{}, err
	}
	return in.answer(p, items)
}

// rangeRead reads one partition's items with sort keys from lo to hi, both included, page by
// page.
func (s *Store) rangeRead(ctx context.Context, pk, lo, hi string) ([]Item, error) {
	pages := dynamodb.NewQueryPaginator(s.DB, &dynamodb.QueryInput{
		TableName:              aws.String(s.Table),
		KeyConditionExpression: aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
		ExpressionAttributeNames: map[string]string{
			"#pk": attrPK, "#sk": attrSK,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(pk), ":lo": dynamo.S(lo), ":hi": dynamo.S(hi)},
		ConsistentRead:            aws.Bool(s.ConsistentRead),
	})
	var items []Item
	for page := 0; pages.HasMorePages(); page++ {
		if page == maxQueryPages {
			return nil, fmt.Errorf("read the rollups of %s from %s to %s: more than %d pages", pk, lo, hi, maxQueryPages)
		}
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the rollups of %s from %s to %s: %w", pk, lo, hi, err)
		}
		for _, raw := range out.Items {
			it, err := decodeItem(raw)
			if err != nil {
				return nil, err
			}
			items = append(items, it)
		}
	}
	return items, nil
}
