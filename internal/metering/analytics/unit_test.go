package analytics_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// unitRows are n rows of one claim, each with its own fields, dimensions and cuts.
func unitRows(t *testing.T, n int, data func(i int) map[string]any) []analytics.Row {
	t.Helper()
	var rows []analytics.Row
	for i := range n {
		fields := map[string]any{"id": fmt.Sprintf("evt_%03d", i), "time": "2026-11-30T12:00:00Z"}
		if i%2 == 1 {
			fields["subject"] = strings.Repeat("s", 300) // cut, and marked
		}
		if d := data(i); d != nil {
			fields["data"] = d
		}
		ev := parse(t, fields)
		r, err := analytics.RowFor(analytics.DefaultSchema, ev, "acct_u", 1000+int64(i), 5000, "2026-11", "events/unit.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		r.ArchiveOffset, r.ArchiveLength = int64(100*i), 99
		rows = append(rows, r)
	}
	return rows
}

// A unit's rows item gives back every row exactly as RowFor built it: numbers as written,
// booleans, cut fields with their marks, omitted dimensions.
func TestUnitItem_RowsReadBackAsBuilt(t *testing.T) {
	rows := unitRows(t, 20, func(i int) map[string]any {
		return map[string]any{"n": i, "ratio": 0.25, "ok": i%3 == 0, "route": "/v1/x", "nested": map[string]any{"a": 1}, "bad-name": 1}
	})
	item, n, err := analytics.UnitItem("unit1", rows)
	if err != nil || n != len(rows) {
		t.Fatalf("held %d of %d: %v", n, len(rows), err)
	}
	if !analytics.IsUnitItem(item) {
		t.Fatal("not recognised as a unit's rows item")
	}
	got, err := analytics.RowsOf(item)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Errorf("rows read back differ:\n%+v\n%+v", got[1], rows[1])
	}
}

// Rows that do not compress past the item's bound: the item holds the longest prefix that fits,
// and the caller writes the rest as rows of their own.
func TestUnitItem_PastTheBound_HoldsAPrefix(t *testing.T) {
	noise := func(int) map[string]any {
		d := map[string]any{}
		for k := range 30 {
			b := make([]byte, 120)
			_, _ = rand.Read(b)
			d[fmt.Sprintf("f%02d", k)] = hex.EncodeToString(b) // 240 bytes, under the 256-byte cap
		}
		return d
	}
	rows := unitRows(t, 97, noise)
	item, n, err := analytics.UnitItem("unit2", rows)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || n >= len(rows) {
		t.Fatalf("held %d of %d rows of ~7 KB of noise each", n, len(rows))
	}
	got, err := analytics.RowsOf(item)
	if err != nil || !reflect.DeepEqual(got, rows[:n]) {
		t.Fatalf("the item holds other rows than the first %d: %v", n, err)
	}
	if size := len(item["rows"].(*types.AttributeValueMemberB).Value); size > analytics.MaxUnitRowsBytes {
		t.Errorf("the item's rows are %d bytes; the bound is %d", size, analytics.MaxUnitRowsBytes)
	}
}

// Rows of two claims never share an item.
func TestUnitItem_RowsOfDifferentClaims_Refused(t *testing.T) {
	rows := unitRows(t, 2, func(int) map[string]any { return nil })
	rows[1].RowInsertedAtMs++
	if _, _, err := analytics.UnitItem("unit3", rows); err == nil {
		t.Fatal("rows of two instants were put in one item")
	}
}

// A row of its own and a unit's rows item never share a key, whatever the event's id.
func TestUnitSortKey_NeverARowsKey(t *testing.T) {
	unit := strings.Repeat("ab", 16)
	rowsKey := analytics.UnitSortKey(unit, 5000)
	for _, id := range []string{"~" + unit, "#~" + unit, unit, ""} {
		if analytics.SortKey(id, 5000) == rowsKey {
			t.Fatalf("event %q has its unit's rows key %s", id, rowsKey)
		}
	}
}

// ExistsBatch reads each unit's item once and answers only for the events asked for in it: an
// event asked for as a row of its own is not found in a unit's item, nor one the item lacks.
func TestExistsBatch_UnitItemsAnswerOnlyForTheirEvents(t *testing.T) {
	env := testenv.New(t)
	w := &analytics.DynamoWriter{DB: env.Clients.DynamoDB, Table: env.Names.Table(resources.TableAnalytics)}
	ctx := context.Background()
	rows := unitRows(t, 4, func(int) map[string]any { return nil })
	item, _, err := analytics.UnitItem("unit4", rows[:2])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clients.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(w.Table), Item: item}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, rows[2]); err != nil {
		t.Fatal(err)
	}
	ref := func(i int, unit string) analytics.RowRef {
		return analytics.RowRef{AccountID: "acct_u", EventID: rows[i].EventID, RowInsertedAtMs: 5000, Unit: unit}
	}
	// Rows 0 and 1 are in unit4's item, row 2 is a row of its own, row 3 is nowhere.
	got, err := w.ExistsBatch(ctx, "acct_u", []analytics.RowRef{ref(0, "unit4"), ref(1, ""), ref(2, "unit4"), ref(3, "unit4")})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{rows[0].EventID: true}; !reflect.DeepEqual(got, want) {
		t.Errorf("present %v, want %v", got, want)
	}
	for _, c := range []struct {
		ref  analytics.RowRef
		want bool
	}{{ref(1, "unit4"), true}, {ref(1, ""), false}, {ref(2, ""), true}, {ref(2, "unit4"), false}, {ref(0, "other"), false}} {
		if ok, err := w.Exists(ctx, c.ref); err != nil || ok != c.want {
			t.Errorf("%+v: present %v (%v), want %v", c.ref, ok, err, c.want)
		}
	}
}

// Rows reads an account's rows over a time range, rows of their own and rows in units' items
// alike, each as RowFor built it.
func TestRows_BothKindsReadBackOverATimeRange(t *testing.T) {
	env := testenv.New(t)
	w := &analytics.DynamoWriter{DB: env.Clients.DynamoDB, Table: env.Names.Table(resources.TableAnalytics)}
	ctx := context.Background()
	rows := unitRows(t, 5, func(i int) map[string]any { return map[string]any{"n": i, "ok": true, "route": "/v1/x"} })
	item, _, err := analytics.UnitItem("unit5", rows[:3])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clients.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(w.Table), Item: item}); err != nil {
		t.Fatal(err)
	}
	rows[3].RowInsertedAtMs, rows[4].RowInsertedAtMs = 4000, 1_795_000_000_000
	for _, r := range rows[3:] {
		if err := w.Write(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w.Rows(ctx, "acct_u", 4000, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]analytics.Row{rows[3]}, rows[:3]...); !reflect.DeepEqual(got, want) {
		t.Errorf("rows over [4000, 5000]:\n%+v\nwant\n%+v", got, want)
	}
	if got, err := w.Rows(ctx, "acct_u", 5001, analytics.MaxInstantMs); err != nil || len(got) != 1 || got[0].EventID != rows[4].EventID {
		t.Errorf("rows from 5001 on: %+v %v", got, err)
	}
	if got, err := w.Rows(ctx, "acct_u", 0, analytics.MaxInstantMs); err != nil || len(got) != len(rows) {
		t.Errorf("all rows: %d (%v), want %d", len(got), err, len(rows))
	}
}
