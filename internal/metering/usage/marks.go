package usage

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Report marks: how the reporter learns which (account, feature, cycle) changed.
//
// Every counter row (the budget row, each counter shard) has a mark item beside it in its
// partition ("mark#<row>"). A marked mark item carries AttrReportBucket and AttrReportDueAt,
// the keys of the usage table's sparse report index, so the reporter finds it there without a
// scan. The write that changes a counter row (a consumption, a counted event, a settlement) takes
// part in one transaction with a check of the row's mark:
//
//   - marked (the steady state): the transaction only checks the mark (MarkCheck). The mark is
//     not written, so a mark already present costs no write: a cycle is marked once, however
//     many writes follow;
//   - not marked (the first write after a report): the check fails, the transaction is
//     cancelled, and the writer, having read the mark from durable state (Marked), writes the
//     same transaction again with the mark put (MarkPut).
//
// A mark item enters the report index only by being put whole: the local emulator loses index
// entries that an UpdateItem adds (it files them over another entry), while items that enter an
// index by PutItem and change or leave it later stay right.
//
// Every write to a counter row adds one to the row's rev. The reporter reads the partition —
// each row's values with its rev, and its marks — reports the total, and only then takes a mark
// off, in one transaction with a check that its row's rev is still what it read (ClearMark). A
// write after the read changed rev, so its row keeps its mark; a write after the mark came off
// finds no mark and puts it back: no write is ever covered by neither a reported total nor a
// mark. A correction row is put whole, marked, and its mark comes off by rewriting it without.

// Attribute names of the marks and the revision.
const (
	AttrReportBucket = resources.IndexUsageReportBucket
	AttrReportDueAt  = resources.IndexUsageReportDueAt
	AttrRev          = "rev"
	// AttrUnits is a correction row's signed number of units.
	AttrUnits = "units"
	// attrMarkedRow names, on a mark item, the counter row it marks.
	attrMarkedRow = "row"
)

// Expressions of the marks.
const (
	// markPresent is the hot path's check: the row's mark is there, so nothing needs writing.
	markPresent = "attribute_exists(#reportBucket)"
	// rowUnchanged guards a mark's removal: the row is still at the rev the reporter read.
	rowUnchanged = "#rev = :rev"
	// rowStillNew guards the removal of a mark whose row had no rev when read.
	rowStillNew = "attribute_not_exists(#rev)"
)

// ReportBucket is the report index partition of a usage partition: every mark of one cycle goes
// into the same bucket, and buckets spread the index's writes.
func ReportBucket(partitionKey string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(partitionKey))
	return fmt.Sprintf("%02d", h.Sum32()%resources.UsageReportBuckets)
}

// markKey is the key of the mark item of a counter row.
func markKey(accountID, feature, cycleLabel, rowSK string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": dynamo.S(PartitionKey(accountID, feature, cycleLabel)), "sk": dynamo.S(MarkPrefix + rowSK),
	}
}

// MarkKey is the key of the mark item of a counter row.
func MarkKey(accountID, feature, cycleLabel, rowSK string) map[string]types.AttributeValue {
	return markKey(accountID, feature, cycleLabel, rowSK)
}

// MarkCheck is the transaction item that checks a counter row's mark is present.
func (t Table) MarkCheck(accountID, feature, cycleLabel, rowSK string) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                aws.String(t.Name),
		Key:                      markKey(accountID, feature, cycleLabel, rowSK),
		ConditionExpression:      aws.String(markPresent),
		ExpressionAttributeNames: dynamo.Names(markPresent),
	}}
}

// MarkPut is the transaction item that marks a counter row (the first write after a report).
func (t Table) MarkPut(accountID, feature, cycleLabel, rowSK string, nowMs int64) types.TransactWriteItem {
	pk := PartitionKey(accountID, feature, cycleLabel)
	item := markKey(accountID, feature, cycleLabel, rowSK)
	item[attrMarkedRow] = dynamo.S(rowSK)
	item[AttrReportBucket] = dynamo.S(ReportBucket(pk))
	item[AttrReportDueAt] = dynamo.N(nowMs)
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(t.Name), Item: item}}
}

// Marked reads whether a counter row's mark is present (strongly consistent): what a writer whose
// transaction was cancelled reads to learn whether the mark was the cause.
func (t Table) Marked(ctx context.Context, accountID, feature, cycleLabel, rowSK string) (bool, error) {
	out, err := t.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(t.Name), Key: markKey(accountID, feature, cycleLabel, rowSK), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("#reportBucket"), ExpressionAttributeNames: dynamo.Names("#reportBucket"),
	})
	if err != nil {
		return false, fmt.Errorf("read the report mark of %s %s %s %s: %w", accountID, feature, cycleLabel, rowSK, err)
	}
	return dynamo.Has(out.Item, AttrReportBucket), nil
}

// MarkedItems is the mark (check or put) of a write, decided by whether the row was found marked.
func (t Table) MarkedItems(accountID, feature, cycleLabel, rowSK string, marked bool, nowMs int64) types.TransactWriteItem {
	if marked {
		return t.MarkCheck(accountID, feature, cycleLabel, rowSK)
	}
	return t.MarkPut(accountID, feature, cycleLabel, rowSK, nowMs)
}

// IsMark reports whether a usage row, as read, is a mark item; Marks whether any item read
// carries a mark (a marked mark item or a marked correction row).
func IsMark(row map[string]types.AttributeValue) bool {
	return strings.HasPrefix(dynamo.Str(row, "sk"), MarkPrefix)
}

// Marks reports whether a row, as read, carries the reporter's mark.
func Marks(row map[string]types.AttributeValue) bool { return dynamo.Has(row, AttrReportBucket) }

// AnyMarked reports whether any row of a partition, as read, carries a mark.
func AnyMarked(rows []map[string]types.AttributeValue) bool {
	for _, row := range rows {
		if Marks(row) {
			return true
		}
	}
	return false
}

// Rev is a row's revision as read (0 for a row written before revisions, or not found).
func Rev(row map[string]types.AttributeValue) int64 { return dynamo.Int(row, AttrRev) }

// ErrRowChanged is what ClearMark returns when the row was written after it was read: the mark
// stays, and the next report carries the write.
var ErrRowChanged = errors.New("the usage row changed after it was read")

// ClearMarks takes the reporter's marks off a partition read by ReadRows, each only if the row
// it marks has not been written since. It returns how many stayed because their row changed.
func (t Table) ClearMarks(ctx context.Context, rows []map[string]types.AttributeValue) (kept int, err error) {
	bySK := map[string]map[string]types.AttributeValue{}
	for _, row := range rows {
		bySK[dynamo.Str(row, "sk")] = row
	}
	for _, row := range rows {
		if !Marks(row) {
			continue
		}
		var cerr error
		if IsMark(row) {
			cerr = t.clearMark(ctx, row, bySK[strings.TrimPrefix(dynamo.Str(row, "sk"), MarkPrefix)])
		} else {
			cerr = t.clearOwnMark(ctx, row)
		}
		switch {
		case errors.Is(cerr, ErrRowChanged):
			kept++
		case cerr != nil:
			return kept, cerr
		}
	}
	return kept, nil
}

// clearMark unmarks a counter row's mark item in one transaction with a check that the row is
// still at the rev it was read at (absent: still without one).
func (t Table) clearMark(ctx context.Context, mark, row map[string]types.AttributeValue) error {
	pk := mark["pk"]
	rowSK := strings.TrimPrefix(dynamo.Str(mark, "sk"), MarkPrefix)
	check := &types.ConditionCheck{
		TableName: aws.String(t.Name),
		Key:       map[string]types.AttributeValue{"pk": pk, "sk": dynamo.S(rowSK)},
	}
	if rev := Rev(row); rev == 0 {
		check.ConditionExpression = aws.String(rowStillNew)
		check.ExpressionAttributeNames = dynamo.Names(rowStillNew)
	} else {
		check.ConditionExpression = aws.String(rowUnchanged)
		check.ExpressionAttributeNames = dynamo.Names(rowUnchanged)
		check.ExpressionAttributeValues = map[string]types.AttributeValue{":rev": dynamo.N(rev)}
	}
	// The unmarked item is put whole, without the index keys (the local emulator ignores REMOVE).
	unmarked := map[string]types.AttributeValue{"pk": pk, "sk": mark["sk"], attrMarkedRow: dynamo.S(rowSK)}
	_, err := t.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{ConditionCheck: check},
		{Put: &types.Put{TableName: aws.String(t.Name), Item: unmarked}},
	}})
	if dynamo.IsTransactionCanceled(err) {
		return ErrRowChanged
	}
	if err != nil {
		return fmt.Errorf("clear the report mark of %s %s: %w", dynamo.Str(mark, "pk"), rowSK, err)
	}
	return nil
}

// clearOwnMark rewrites a row that carries its own mark (a correction) without it. A correction
// row is written once and never changed (a repeat of it is refused by its own condition), so the
// row as read is the row as it is: the rewrite needs no guard.
func (t Table) clearOwnMark(ctx context.Context, row map[string]types.AttributeValue) error {
	item := maps.Clone(row)
	delete(item, AttrReportBucket)
	delete(item, AttrReportDueAt)
	_, err := t.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(t.Name), Item: item})
	if err != nil {
		return fmt.Errorf("clear the report mark of %s %s: %w", dynamo.Str(row, "pk"), dynamo.Str(row, "sk"), err)
	}
	return nil
}

// Correction is one append-only correction row of a usage partition.
type Correction struct {
	AccountID string
	Feature   string
	Cycle     string
	// ID names the row within the partition; the same ID is the same correction.
	ID     string
	Units  int64
	Reason string
	// KeyHash is a hash of the caller's Idempotency-Key the ID was derived from, for the record.
	KeyHash     string
	CreatedAtMs int64
}

// correctionCondition makes a correction row append-only: it is written once, never replaced.
const correctionCondition = "attribute_not_exists(#pk)"

// The corrections head: one item per usage partition whose rev counts the corrections written
// through it. A correction is decided on the partition's totals (a negative one may take back no
// more than the cycle holds), and those totals are read after the head's rev; the correction
// commits in one transaction with the head, only while the rev is still the one read. Two
// corrections decided on the same totals cannot both commit: the second is cancelled and decided
// again from a fresh read, so no pair of negative corrections, each within the usage alone, takes
// it below zero together. Usage itself only grows between the read and the write (a consumption,
// a settlement), which can only make the decision safer, so it needs no guard.
const (
	correctionHeadSK     = "correction-head"
	correctionHeadUpdate = "ADD #rev :one " + setLabels
	// correctionHeadUnchanged: no correction was written since the totals were read.
	correctionHeadUnchanged = "#rev = :rev"
	// correctionHeadFresh: the first correction through the head, read when there was none.
	correctionHeadFresh = "attribute_not_exists(#rev)"
)

// Errors of PutCorrection, each resolved from durable state after a cancelled transaction.
var (
	// ErrCorrectionExists: a row with the correction's ID exists.
	ErrCorrectionExists = errors.New("a correction with this id exists")
	// ErrCorrectionsChanged: another correction of the partition committed since the basis was
	// read (or the transaction met a conflicting one); decide again from a fresh read.
	ErrCorrectionsChanged = errors.New("the cycle's corrections changed since they were read")
)

// CorrectionBasis is what a correction is decided on: the partition's totals, read after the rev
// of its corrections head.
type CorrectionBasis struct {
	Totals Totals
	// HeadRev is the corrections head's rev, read before the totals (0: no head yet).
	HeadRev int64
}

// ReadCorrectionBasis reads the corrections head's rev, then the partition's totals, both
// strongly consistent. The order matters: a correction committed after the head was read shows
// in the totals or not, and either way moved the rev, so a correction decided on this basis
// cannot commit over it.
func (t Table) ReadCorrectionBasis(ctx context.Context, accountID, feature, cycleLabel string) (CorrectionBasis, error) {
	out, err := t.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(t.Name), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			"pk": dynamo.S(PartitionKey(accountID, feature, cycleLabel)), "sk": dynamo.S(correctionHeadSK),
		},
		ProjectionExpression: aws.String("#rev"), ExpressionAttributeNames: dynamo.Names("#rev"),
	})
	if err != nil {
		return CorrectionBasis{}, fmt.Errorf("read the corrections head of %s %s %s: %w", accountID, feature, cycleLabel, err)
	}
	tot, err := t.Read(ctx, accountID, feature, cycleLabel)
	if err != nil {
		return CorrectionBasis{}, err
	}
	return CorrectionBasis{Totals: tot, HeadRev: Rev(out.Item)}, nil
}

// PutCorrection appends a correction row, marked for the reporter (the row carries its own mark),
// in one transaction with the partition's corrections head, conditioned on the head's rev as the
// basis read it. It never replaces a row: a second correction with the same ID is
// ErrCorrectionExists. A correction whose basis is stale is ErrCorrectionsChanged. A cancelled
// transaction is resolved by reading the row back, never from the cancellation's reasons.
func (t Table) PutCorrection(ctx context.Context, c Correction, basis CorrectionBasis) error {
	pk := PartitionKey(c.AccountID, c.Feature, c.Cycle)
	item := map[string]types.AttributeValue{
		"pk": dynamo.S(pk), "sk": dynamo.S(CorrectionPrefix + c.ID),
		"accountId": dynamo.S(c.AccountID), "feature": dynamo.S(c.Feature), "cycle": dynamo.S(c.Cycle),
		AttrUnits: dynamo.N(c.Units), "reason": dynamo.S(c.Reason), "keyHash": dynamo.S(c.KeyHash),
		"createdAtMs": dynamo.N(c.CreatedAtMs), "updatedAtMs": dynamo.N(c.CreatedAtMs),
		AttrRev: dynamo.N(1), AttrReportBucket: dynamo.S(ReportBucket(pk)), AttrReportDueAt: dynamo.N(c.CreatedAtMs),
	}
	head := &types.Update{
		TableName:        aws.String(t.Name),
		Key:              map[string]types.AttributeValue{"pk": dynamo.S(pk), "sk": dynamo.S(correctionHeadSK)},
		UpdateExpression: aws.String(correctionHeadUpdate),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":one": dynamo.N(1), ":now": dynamo.N(c.CreatedAtMs),
			":account": dynamo.S(c.AccountID), ":feature": dynamo.S(c.Feature), ":cycle": dynamo.S(c.Cycle),
		},
	}
	if basis.HeadRev == 0 {
		head.ConditionExpression = aws.String(correctionHeadFresh)
	} else {
		head.ConditionExpression = aws.String(correctionHeadUnchanged)
		head.ExpressionAttributeValues[":rev"] = dynamo.N(basis.HeadRev)
	}
	head.ExpressionAttributeNames = dynamo.Names(correctionHeadUpdate, aws.ToString(head.ConditionExpression))
	_, err := t.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{
			TableName: aws.String(t.Name), Item: item,
			ConditionExpression: aws.String(correctionCondition), ExpressionAttributeNames: dynamo.Names(correctionCondition),
		}},
		{Update: head},
	}})
	if dynamo.IsTransactionCanceled(err) {
		_, exists, gerr := t.GetCorrection(ctx, c.AccountID, c.Feature, c.Cycle, c.ID)
		switch {
		case gerr != nil:
			return fmt.Errorf("append correction %s to %s: cancelled, and the row could not be read back: %w", c.ID, pk, gerr)
		case exists:
			return ErrCorrectionExists
		}
		return ErrCorrectionsChanged
	}
	if err != nil {
		return fmt.Errorf("append correction %s to %s: %w", c.ID, pk, err)
	}
	return nil
}

// GetCorrection reads a correction row (strongly consistent).
func (t Table) GetCorrection(ctx context.Context, accountID, feature, cycleLabel, id string) (Correction, bool, error) {
	out, err := t.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(t.Name), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			"pk": dynamo.S(PartitionKey(accountID, feature, cycleLabel)), "sk": dynamo.S(CorrectionPrefix + id),
		},
	})
	if err != nil {
		return Correction{}, false, fmt.Errorf("read correction %s: %w", id, err)
	}
	if out.Item == nil {
		return Correction{}, false, nil
	}
	return Correction{
		AccountID: accountID, Feature: feature, Cycle: cycleLabel, ID: id,
		Units: dynamo.Int(out.Item, AttrUnits), Reason: dynamo.Str(out.Item, "reason"),
		KeyHash: dynamo.Str(out.Item, "keyHash"), CreatedAtMs: dynamo.Int(out.Item, "createdAtMs"),
	}, true, nil
}

// RowSK is a usage row's sort key as read.
func RowSK(row map[string]types.AttributeValue) string { return dynamo.Str(row, "sk") }

// BudgetSK is the sort key of the budget row.
const BudgetSK = budgetSK

// ShardSK is the sort key of counter shard n.
func ShardSK(n int) string { return fmt.Sprintf("%s%02d", shardPrefix, n) }

// IsCounter reports whether a sort key names a counter row (the budget row or a shard).
func IsCounter(sk string) bool { return sk == budgetSK || strings.HasPrefix(sk, shardPrefix) }

// MeterRow is the identity of a counter row as the ledger's meter index records it: the usage
// partition and the row's sort key.
func MeterRow(accountID, feature, cycleLabel, sk string) string {
	return PartitionKey(accountID, feature, cycleLabel) + "#" + sk
}

// rebuildUpdate moves a counter row's used (and committed, which includes it on the budget row)
// by the difference the reconciler found between the row and the ledger rows behind it.
const (
	rebuildUpdate = "ADD #used :diff, #committed :committedDiff, #rev :one SET #updatedAtMs = :now"
)

// RebuildRow sets a counter row's used to want, given the row as read: only if the row has not
// been written since (its rev), so a concurrent write is never lost. The row is marked in the
// same transaction, so the reporter sends the rebuilt total.
func (t Table) RebuildRow(ctx context.Context, row map[string]types.AttributeValue, want, nowMs int64) error {
	diff := want - dynamo.Int(row, AttrUsed)
	committedDiff := int64(0)
	sk := dynamo.Str(row, "sk")
	if sk == budgetSK {
		committedDiff = diff
	}
	pk := dynamo.Str(row, "pk")
	cond := rowUnchanged
	values := map[string]types.AttributeValue{
		":diff": dynamo.N(diff), ":committedDiff": dynamo.N(committedDiff), ":one": dynamo.N(1), ":now": dynamo.N(nowMs),
	}
	if Rev(row) == 0 {
		cond = rowStillNew
	} else {
		values[":rev"] = dynamo.N(Rev(row))
	}
	parts := strings.SplitN(pk, "#", 3)
	if len(parts) != 3 {
		return fmt.Errorf("rebuild usage row %s %s: not a usage partition", pk, sk)
	}
	account, feature, cycleLabel := parts[0], parts[1], parts[2]
	_, err := t.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:                 aws.String(t.Name),
			Key:                       map[string]types.AttributeValue{"pk": dynamo.S(pk), "sk": dynamo.S(sk)},
			UpdateExpression:          aws.String(rebuildUpdate),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  dynamo.Names(rebuildUpdate, cond),
			ExpressionAttributeValues: values,
		}},
		t.MarkPut(account, feature, cycleLabel, sk, nowMs),
	}})
	if dynamo.IsTransactionCanceled(err) {
		return ErrRowChanged
	}
	if err != nil {
		return fmt.Errorf("rebuild usage row %s %s: %w", pk, sk, err)
	}
	return nil
}
