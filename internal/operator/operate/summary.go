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

	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
)

// maxListed bounds the event ids a summary lists for each inconsistency.
const maxListed = 20

// Summary is what Ferry holds for one account's events, counted: the ledger by status and the
// archive, with the events where the two disagree (an accepted event must be archived, and only
// an accepted one is).
type Summary struct {
	Account string         `json:"account"`
	Ledger  map[string]int `json:"ledger"`
	// Archived counts the account's archived payloads.
	Archived int `json:"archived"`
	// InsertedNotArchived and ArchivedNotInserted list (at most maxListed) event ids.
	InsertedNotArchived []string `json:"insertedNotArchived"`
	ArchivedNotInserted []string `json:"archivedNotInserted"`
}

// Summarize reads every ledger entry of the account (a strongly consistent scan: an operator's
// read, never a function's) and every archived payload of it.
func (s *Stack) Summarize(ctx context.Context, accountID string) (Summary, error) {
	out := Summary{Account: accountID, Ledger: map[string]int{}, InsertedNotArchived: []string{}, ArchivedNotInserted: []string{}}
	type entry struct {
		EventID         string `dynamodbav:"eventId"`
		Status          string `dynamodbav:"status"`
		RowInsertedAtMs int64  `dynamodbav:"rowInsertedAtMs"`
	}
	keys := map[string]string{} // archive key → status
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
		var entries []entry
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &entries); err != nil {
			return out, err
		}
		for _, e := range entries {
			out.Ledger[e.Status]++
			keys[archive.Key(accountID, e.EventID, e.RowInsertedAtMs)] = e.Status
		}
	}
	archived := map[string]bool{}
	marker := "/account=" + accountID + "/"
	lp := s3.NewListObjectsV2Paginator(s.Archive.Client, &s3.ListObjectsV2Input{Bucket: aws.String(s.Archive.Bucket), Prefix: aws.String("events/")})
	for lp.HasMorePages() {
		page, err := lp.NextPage(ctx)
		if err != nil {
			return out, fmt.Errorf("list the archive: %w", err)
		}
		for _, o := range page.Contents {
			if k := aws.ToString(o.Key); strings.Contains(k, marker) {
				archived[k] = true
			}
		}
	}
	out.Archived = len(archived)
	for k, status := range keys {
		if status == string(ledger.Inserted) && !archived[k] {
			out.InsertedNotArchived = append(out.InsertedNotArchived, eventOf(k))
		}
	}
	for k := range archived {
		if keys[k] != string(ledger.Inserted) {
			out.ArchivedNotInserted = append(out.ArchivedNotInserted, eventOf(k))
		}
	}
	for _, list := range []*[]string{&out.InsertedNotArchived, &out.ArchivedNotInserted} {
		sort.Strings(*list)
		if len(*list) > maxListed {
			*list = (*list)[:maxListed]
		}
	}
	return out, nil
}

// eventOf is the (escaped) event id an archive key names.
func eventOf(key string) string {
	return strings.TrimSuffix(key[strings.LastIndex(key, "/")+1:], ".json")
}
