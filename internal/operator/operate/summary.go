package operate

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferrymeter/ferry/internal/metering/ledger"
)

// maxListed bounds the event ids (and object keys) a summary lists for each inconsistency.
const maxListed = 20

// Summary is what Ferry holds for one account's events, counted: the ledger by status (each
// entry as its readers see it: a unit's INSERTING entry is INSERTED once its unit is recorded
// done) and the archive, with the events where the two disagree: an accepted event must be
// archived where its entry says.
type Summary struct {
	Account string         `json:"account"`
	Ledger  map[string]int `json:"ledger"`
	// Archived counts the INSERTED events whose payload's archive object is stored.
	Archived int `json:"archived"`
	// Objects counts the account's archive objects. A unit's object holds every member's
	// payload; one whose members were all claimed by other units first is pointed to by none
	// (Unreferenced), which is waste, not loss.
	Objects int `json:"objects"`
	// InsertedNotArchived lists (at most maxListed) INSERTED events whose object is missing;
	// Unreferenced (at most maxListed) objects no INSERTED event's entry points into.
	InsertedNotArchived []string `json:"insertedNotArchived"`
	Unreferenced        []string `json:"unreferenced"`
}

// summaryEntry is the part of a ledger item a summary reads: an event's entry, or (pk starting
// "#batch#") a unit's record of being done.
type summaryEntry struct {
	PK                  string `dynamodbav:"pk"`
	EventID             string `dynamodbav:"eventId"`
	Status              string `dynamodbav:"status"`
	RowInsertedAtMs     int64  `dynamodbav:"rowInsertedAtMs"`
	BillingAcceptedAtMs int64  `dynamodbav:"billingAcceptedAtMs"`
	ArchiveKey          string `dynamodbav:"archiveKey"`
	Batch               string `dynamodbav:"batch"`
	DoneAtMs            int64  `dynamodbav:"doneAtMs"`
}

// Summarize reads every ledger item of the account (a strongly consistent scan: an operator's
// read, never a function's) and lists every archive object of it.
func (s *Stack) Summarize(ctx context.Context, accountID string) (Summary, error) {
	out := Summary{Account: accountID, Ledger: map[string]int{}, InsertedNotArchived: []string{}, Unreferenced: []string{}}
	var entries []ledger.Entry
	done := map[string]int64{}
	p := dynamodb.NewScanPaginator(s.Ledger.DB, &dynamodb.ScanInput{
		TableName: aws.String(s.Ledger.Table), ConsistentRead: aws.Bool(true),
		FilterExpression:          aws.String("accountId = :a"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":a": &ddbtypes.AttributeValueMemberS{Value: accountID}},
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return out, fmt.Errorf("scan the ledger: %w", err)
		}
		var items []summaryEntry
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &items); err != nil {
			return out, err
		}
		for _, it := range items {
			if strings.HasPrefix(it.PK, "#batch#") {
				done[it.Batch] = it.DoneAtMs
				continue
			}
			entries = append(entries, ledger.Entry{
				AccountID: accountID, EventID: it.EventID, Status: ledger.Status(it.Status), RowInsertedAtMs: it.RowInsertedAtMs,
				BillingAcceptedAtMs: it.BillingAcceptedAtMs, ArchiveKey: it.ArchiveKey, Batch: it.Batch,
			})
		}
	}
	objects := map[string]bool{}
	marker := "/account=" + accountID + "/"
	lp := s3.NewListObjectsV2Paginator(s.Archive.Client, &s3.ListObjectsV2Input{Bucket: aws.String(s.Archive.Bucket), Prefix: aws.String("events/")})
	for lp.HasMorePages() {
		page, err := lp.NextPage(ctx)
		if err != nil {
			return out, fmt.Errorf("list the archive: %w", err)
		}
		for _, o := range page.Contents {
			if k := aws.ToString(o.Key); strings.Contains(k, marker) {
				objects[k] = true
			}
		}
	}
	out.Objects = len(objects)
	referenced := map[string]bool{}
	for _, e := range entries {
		at, recorded := done[e.Batch]
		e = ledger.Resolve(e, recorded, at)
		out.Ledger[string(e.Status)]++
		if e.Status != ledger.Inserted {
			continue
		}
		key := e.ArchiveLocation().Key
		referenced[key] = true
		if objects[key] {
			out.Archived++
		} else {
			out.InsertedNotArchived = append(out.InsertedNotArchived, e.EventID)
		}
	}
	for k := range objects {
		if !referenced[k] {
			out.Unreferenced = append(out.Unreferenced, k)
		}
	}
	for _, list := range []*[]string{&out.InsertedNotArchived, &out.Unreferenced} {
		sort.Strings(*list)
		if len(*list) > maxListed {
			*list = (*list)[:maxListed]
		}
	}
	return out, nil
}
