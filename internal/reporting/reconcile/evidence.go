package reconcile

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// Record is one evidence row: the numbers one comparison found, its verdict and cause, and what
// the repair did. It is the answer to "was this customer billed correctly in October".
type Record struct {
	Account  string
	Cycle    string
	Feature  string
	Provider string
	Ledger   int64
	Sent     int64
	// Meter is what the provider held (nil: unreadable).
	Meter   *int64
	Verdict Verdict
	Cause   string
	// Repair is the total the meter was brought to; ReadBack what it read afterwards; Confirmed
	// when ReadBack equals Ledger.
	Repair    *int64
	ReadBack  *int64
	Confirmed bool
	// Rebuilt counts counter rows the run rebuilt from the ledger before comparing.
	Rebuilt int
	// Corrections is the part of Ledger that correction rows make up.
	Corrections int64
	AtMs        int64
}

// Key names the record by its numbers: one row per distinct (ledger, sent, meter, verdict) for
// each (account, cycle, feature, provider). A run that finds the same numbers writes nothing.
func (r Record) Key() string {
	meter := "unread"
	if r.Meter != nil {
		meter = strconv.FormatInt(*r.Meter, 10)
	}
	return fmt.Sprintf("%s#%s#%d#%d#%s#%s", r.Feature, r.Provider, r.Ledger, r.Sent, meter, r.Verdict)
}

// Subject names the record whole, as its notification's subject: the account and the cycle
// (its partition) and its key within them.
func (r Record) Subject() string { return r.Account + "#" + r.Cycle + "#" + r.Key() }

// mismatchNotes are the notifications a record calls for: reconcile.mismatch for every verdict
// but match, keyed by the record (Subject), so the same numbers found again tell nothing more.
func mismatchNotes(r Record) []notify.Notification {
	if r.Verdict == Match {
		return nil
	}
	ledger := r.Ledger
	return []notify.Notification{{
		Kind: notify.ReconcileMismatch, Account: r.Account, Feature: r.Feature, Cycle: r.Cycle,
		Subject: r.Subject(), AtMs: r.AtMs,
		Detail: notify.Detail{Provider: r.Provider, Verdict: string(r.Verdict), Ledger: &ledger, Meter: r.Meter},
	}}
}

// EvidenceStore keeps records in the evidence table: one partition per (account, cycle).
type EvidenceStore struct {
	DB    *dynamodb.Client
	Table string
	// Notifications is the notifications table, where a record's notifications are put with it.
	Notifications string
}

type recordItem struct {
	PK          string `dynamodbav:"pk"`
	SK          string `dynamodbav:"sk"`
	Account     string `dynamodbav:"accountId"`
	Cycle       string `dynamodbav:"cycle"`
	Feature     string `dynamodbav:"feature"`
	Provider    string `dynamodbav:"provider"`
	Ledger      int64  `dynamodbav:"ledger"`
	Sent        int64  `dynamodbav:"sent"`
	Meter       *int64 `dynamodbav:"meter,omitempty"`
	Verdict     string `dynamodbav:"verdict"`
	Cause       string `dynamodbav:"cause"`
	Repair      *int64 `dynamodbav:"repair,omitempty"`
	ReadBack    *int64 `dynamodbav:"readBack,omitempty"`
	Confirmed   bool   `dynamodbav:"confirmed"`
	Rebuilt     int    `dynamodbav:"rebuilt"`
	Corrections int64  `dynamodbav:"corrections"`
	AtMs        int64  `dynamodbav:"atMs"`
}

func evidencePartition(account, cycle string) string { return "evidence#" + account + "#" + cycle }

// Add stores a record unless one with the same numbers exists; added says which. The record's
// notifications, if any, are put in the same transaction, each conditional on its absence
// (notify.Put): a record and what it tells exist together, so no crash between two writes can
// store the evidence and lose its notification (the next run might find other numbers, and
// never tell this record's).
//
// A cancelled transaction is resolved by the conditions themselves, not by the cancellation's
// reasons: the record or a notification exists already (a run on the same numbers, a record
// stored before its notification was), or the transaction met another. Each is then written
// again alone, conditional on its absence, the record first: whichever existed stays one, and
// whatever was missing is written.
func (s *EvidenceStore) Add(ctx context.Context, r Record, notes ...notify.Notification) (added bool, err error) {
	item, err := attributevalue.MarshalMap(recordItem{
		PK: evidencePartition(r.Account, r.Cycle), SK: r.Key(), Account: r.Account, Cycle: r.Cycle, Feature: r.Feature,
		Provider: r.Provider, Ledger: r.Ledger, Sent: r.Sent, Meter: r.Meter, Verdict: string(r.Verdict), Cause: r.Cause,
		Repair: r.Repair, ReadBack: r.ReadBack, Confirmed: r.Confirmed, Rebuilt: r.Rebuilt, Corrections: r.Corrections, AtMs: r.AtMs,
	})
	if err != nil {
		return false, err
	}
	if len(notes) > 0 {
		if s.Notifications == "" {
			return false, fmt.Errorf("store the evidence of %s %s: the evidence store was composed without the notifications table", r.Account, r.Cycle)
		}
		items := []types.TransactWriteItem{{Put: &types.Put{
			TableName: aws.String(s.Table), Item: item,
			ConditionExpression: aws.String(dynamo.AbsentCondition), ExpressionAttributeNames: dynamo.Names(dynamo.AbsentCondition),
		}}}
		for _, n := range notes {
			items = append(items, notify.Put(s.Notifications, n))
		}
		_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return true, nil
		}
		if !dynamo.IsTransactionCanceled(err) {
			return false, fmt.Errorf("store the evidence of %s %s: %w", r.Account, r.Cycle, err)
		}
	}
	// A record is written once; the same numbers again add nothing.
	added, err = dynamo.PutNew(ctx, s.DB, s.Table, item)
	if err != nil {
		return false, fmt.Errorf("store the evidence of %s %s: %w", r.Account, r.Cycle, err)
	}
	for _, n := range notes {
		if _, err := notify.Tell(ctx, s.DB, s.Notifications, n); err != nil {
			return added, fmt.Errorf("store the evidence of %s %s: %w", r.Account, r.Cycle, err)
		}
	}
	return added, nil
}

// maxEvidencePages bounds one read of a cycle's evidence.
const maxEvidencePages = 20

// List returns an account's evidence for a cycle, oldest first.
func (s *EvidenceStore) List(ctx context.Context, account, cycle string) ([]Record, error) {
	var out []Record
	var start map[string]types.AttributeValue
	for range maxEvidencePages {
		page, err := s.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.Table),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  dynamo.Names("#pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(evidencePartition(account, cycle))},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("read the evidence of %s %s: %w", account, cycle, err)
		}
		for _, raw := range page.Items {
			var it recordItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return nil, fmt.Errorf("decode an evidence row: %w", err)
			}
			out = append(out, Record{
				Account: it.Account, Cycle: it.Cycle, Feature: it.Feature, Provider: it.Provider, Ledger: it.Ledger,
				Sent: it.Sent, Meter: it.Meter, Verdict: Verdict(it.Verdict), Cause: it.Cause, Repair: it.Repair,
				ReadBack: it.ReadBack, Confirmed: it.Confirmed, Rebuilt: it.Rebuilt, Corrections: it.Corrections, AtMs: it.AtMs,
			})
		}
		if len(page.LastEvaluatedKey) == 0 {
			sort.SliceStable(out, func(i, j int) bool { return out[i].AtMs < out[j].AtMs })
			return out, nil
		}
		start = page.LastEvaluatedKey
	}
	return nil, fmt.Errorf("the evidence of %s %s has more than %d pages", account, cycle, maxEvidencePages)
}
