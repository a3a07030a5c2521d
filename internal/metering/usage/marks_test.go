package usage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	acct    = "acct_u"
	feature = "events"
	cycle   = "2026-11"
)

func table(t *testing.T) usage.Table {
	t.Helper()
	env := testenv.New(t)
	return usage.Table{DB: env.Clients.DynamoDB, Name: env.Names.Table(resources.TableUsage)}
}

// count writes n units onto shard s with its mark, as a counted event does.
func count(t *testing.T, tb usage.Table, shard int, n int64, marked bool) {
	t.Helper()
	_, err := tb.DB.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		tb.AddToShard(acct, feature, cycle, shard, n, 1),
		tb.MarkedItems(acct, feature, cycle, usage.ShardSK(shard), marked, 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func rows(t *testing.T, tb usage.Table) (usage.Totals, []map[string]types.AttributeValue) {
	t.Helper()
	tot, rows, err := tb.ReadRows(context.Background(), acct, feature, cycle)
	if err != nil {
		t.Fatal(err)
	}
	return tot, rows
}

func row(rows []map[string]types.AttributeValue, sk string) map[string]types.AttributeValue {
	for _, r := range rows {
		if usage.RowSK(r) == sk {
			return r
		}
	}
	return map[string]types.AttributeValue{"pk": dynamo.S(usage.PartitionKey(acct, feature, cycle)), "sk": dynamo.S(sk)}
}

// A rebuild is refused when the row was written after it was read: the write is never lost.
func TestRebuildRow_RowWrittenSinceItWasRead_Refused(t *testing.T) {
	tb := table(t)
	count(t, tb, 3, 5, false)
	_, read := rows(t, tb)
	count(t, tb, 3, 1, true)
	if err := tb.RebuildRow(context.Background(), row(read, usage.ShardSK(3)), 4, 2); !errors.Is(err, usage.ErrRowChanged) {
		t.Fatalf("rebuild over a newer write: %v", err)
	}
	if tot, _ := rows(t, tb); tot.Used != 6 {
		t.Errorf("used %d; want 6", tot.Used)
	}
}

// A rebuild of a row that did not exist when read is refused once a write has created it.
func TestRebuildRow_MissingRowCreatedSince_Refused(t *testing.T) {
	tb := table(t)
	_, read := rows(t, tb)
	count(t, tb, 7, 2, false)
	if err := tb.RebuildRow(context.Background(), row(read, usage.ShardSK(7)), 9, 2); !errors.Is(err, usage.ErrRowChanged) {
		t.Fatalf("rebuild over a newly created row: %v", err)
	}
	if tot, _ := rows(t, tb); tot.Used != 2 {
		t.Errorf("used %d; want 2", tot.Used)
	}
	// Unchallenged, the rebuild sets the row and marks it.
	_, read = rows(t, tb)
	if err := tb.RebuildRow(context.Background(), row(read, usage.ShardSK(7)), 9, 3); err != nil {
		t.Fatal(err)
	}
	if tot, all := rows(t, tb); tot.Used != 9 || !usage.AnyMarked(all) {
		t.Errorf("used %d, marked %v", tot.Used, usage.AnyMarked(all))
	}
}

// A row from before revisions (no rev) keeps its mark when a write gives it one after the read.
func TestClearMarks_RowWithoutRevWrittenSince_KeepsItsMark(t *testing.T) {
	tb := table(t)
	ctx := context.Background()
	pk := usage.PartitionKey(acct, feature, cycle)
	_, err := tb.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(tb.Name), Item: map[string]types.AttributeValue{
		"pk": dynamo.S(pk), "sk": dynamo.S(usage.ShardSK(1)), "used": dynamo.N(4),
	}})
	if err != nil {
		t.Fatal(err)
	}
	mark := tb.MarkPut(acct, feature, cycle, usage.ShardSK(1), 1)
	if _, err := tb.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: mark.Put.TableName, Item: mark.Put.Item}); err != nil {
		t.Fatal(err)
	}
	_, read := rows(t, tb)
	count(t, tb, 1, 1, true)
	kept, err := tb.ClearMarks(ctx, read)
	if err != nil || kept != 1 {
		t.Fatalf("kept %d, %v", kept, err)
	}
	if _, now := rows(t, tb); !usage.AnyMarked(now) {
		t.Error("the written row lost its mark")
	}
}

// Corrections are rows of the partition: they add to what is billed, not to what was used.
func TestReadRows_CorrectionsApartAndMarksSkipped(t *testing.T) {
	tb := table(t)
	count(t, tb, 2, 10, false)
	ctx := context.Background()
	basis, err := tb.ReadCorrectionBasis(ctx, acct, feature, cycle)
	if err != nil || basis.HeadRev != 0 || basis.Totals.Billed() != 10 {
		t.Fatalf("basis %+v, %v", basis, err)
	}
	if err := tb.PutCorrection(ctx, usage.Correction{AccountID: acct, Feature: feature, Cycle: cycle, ID: "c1", Units: -3, Reason: "x", CreatedAtMs: 1}, basis); err != nil {
		t.Fatal(err)
	}
	if basis, err = tb.ReadCorrectionBasis(ctx, acct, feature, cycle); err != nil || basis.HeadRev != 1 {
		t.Fatalf("basis after one correction %+v, %v", basis, err)
	}
	if err := tb.PutCorrection(ctx, usage.Correction{AccountID: acct, Feature: feature, Cycle: cycle, ID: "c1", Units: 5, Reason: "y", CreatedAtMs: 2}, basis); !errors.Is(err, usage.ErrCorrectionExists) {
		t.Fatalf("a second correction under one id: %v", err)
	}
	// The corrections head is neither usage nor a counter shard.
	tot, _ := rows(t, tb)
	if tot.Used != 10 || tot.Corrections != -3 || tot.Billed() != 7 || tot.Shards != 1 {
		t.Errorf("totals %+v", tot)
	}
}
