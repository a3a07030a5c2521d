package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// Mark says "the provider's meter (or Ferry's view of it) changed for (account, cycle): reconcile
// it soon". The reporter leaves one when the ledger drops below what Stripe was sent; the webhook
// inbox leaves one for each Kinde customer.meter_usage_updated event (InboxMarks reads those).
type Mark struct {
	Account string
	Cycle   string
	Reason  string
	// Source and ID name the mark in the source that gave it, for Done; AtMs is when it was
	// made.
	Source string
	ID     string
	AtMs   int64
	// ref is the source's own handle of the mark, for its Done.
	ref any
}

// MarkSource is where the reconciler reads marks from. It is the seam between the reconciler
// and whatever notices that a meter changed: Ferry's own requests (Requests) and the webhook
// inbox's "provider meter changed" marks (InboxMarks), combined with Sources.
type MarkSource interface {
	// Pending returns up to limit marks, oldest first where the source knows the order.
	Pending(ctx context.Context, limit int) ([]Mark, error)
	// Done removes a mark once its cycle was reconciled.
	Done(ctx context.Context, m Mark) error
}

// Sources reads several mark sources as one, each in turn.
type Sources []MarkSource

// Pending implements MarkSource.
func (s Sources) Pending(ctx context.Context, limit int) ([]Mark, error) {
	var out []Mark
	var errs []error
	for i, src := range s {
		if len(out) >= limit {
			break
		}
		marks, err := src.Pending(ctx, limit-len(out))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, m := range marks {
			m.Source = fmt.Sprintf("%d/%s", i, m.Source)
			out = append(out, m)
		}
	}
	return out, errors.Join(errs...)
}

// Done implements MarkSource.
func (s Sources) Done(ctx context.Context, m Mark) error {
	i, rest, ok := strings.Cut(m.Source, "/")
	var n int
	if _, err := fmt.Sscan(i, &n); !ok || err != nil || n < 0 || n >= len(s) {
		return fmt.Errorf("mark %s: unknown source %q", m.ID, m.Source)
	}
	m.Source = rest
	return s[n].Done(ctx, m)
}

// Requests are Ferry's own reconciliation requests, kept in the evidence table under one
// partition (they are few: a cycle whose ledger fell below what Stripe was sent). It is a
// MarkSource and the reporter's report.Requester.
type Requests struct {
	DB    *dynamodb.Client
	Table string
	Now   func() time.Time
}

const requestsPartition = "requests"

// maxRequestPages bounds one read of the requests.
const maxRequestPages = 5

// Request asks for (account, cycle) to be reconciled soon. Asking again changes nothing but the
// reason.
func (q *Requests) Request(ctx context.Context, account, cycle, reason string) error {
	_, err := q.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(q.Table),
		Item: map[string]types.AttributeValue{
			"pk": dynamo.S(requestsPartition), "sk": dynamo.S(account + "#" + cycle),
			"accountId": dynamo.S(account), "cycle": dynamo.S(cycle), "reason": dynamo.S(reason),
			"atMs": dynamo.N(q.Now().UnixMilli()),
		},
	})
	if err != nil {
		return fmt.Errorf("request reconciliation of %s %s: %w", account, cycle, err)
	}
	return nil
}

// Pending implements MarkSource.
func (q *Requests) Pending(ctx context.Context, limit int) ([]Mark, error) {
	var out []Mark
	var start map[string]types.AttributeValue
	for range maxRequestPages {
		page, err := q.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(q.Table),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  dynamo.Names("#pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(requestsPartition)},
			ConsistentRead:            aws.Bool(true),
			Limit:                     aws.Int32(int32(limit - len(out))),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return out, fmt.Errorf("read the reconciliation requests: %w", err)
		}
		for _, item := range page.Items {
			out = append(out, Mark{
				Account: dynamo.Str(item, "accountId"), Cycle: dynamo.Str(item, "cycle"), Reason: dynamo.Str(item, "reason"),
				Source: "requests", ID: dynamo.Str(item, "sk"), AtMs: dynamo.Int(item, "atMs"),
			})
		}
		if len(page.LastEvaluatedKey) == 0 || len(out) >= limit {
			return out, nil
		}
		start = page.LastEvaluatedKey
	}
	return out, nil
}

// doneCondition: a request made again after this one was read is a new request and stays.
const doneCondition = "#atMs = :at"

// Done implements MarkSource.
func (q *Requests) Done(ctx context.Context, m Mark) error {
	_, err := q.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(q.Table),
		Key:                       map[string]types.AttributeValue{"pk": dynamo.S(requestsPartition), "sk": dynamo.S(m.ID)},
		ConditionExpression:       aws.String(doneCondition),
		ExpressionAttributeNames:  dynamo.Names(doneCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{":at": dynamo.N(m.AtMs)},
	})
	if dynamo.IsConditionFailed(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mark the reconciliation of %s %s done: %w", m.Account, m.Cycle, err)
	}
	return nil
}
