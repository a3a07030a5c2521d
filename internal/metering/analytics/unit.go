package analytics

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// A unit's rows item holds the rows of the events one batch claim admitted (a unit: one
// account's events, billed together by package worker). It is put in the claim's own
// transaction (package ledger), so it exists exactly when the entries that point at it do: no
// delivery ever writes such a row after the claim, and none can write it twice. Its key is the
// account and the claim's instant, like a row's, so one Query over a time range reads both.
//
// The rows are JSON lines, gzip-compressed, in one binary attribute: one unit's rows share most
// of their bytes, and a transactional write is billed per kilobyte stored (DynamoDB recommends
// compressing large attribute values). RowsOf reads them back as the rows they were.

// MaxUnitRowsBytes bounds a rows item's compressed rows, well inside DynamoDB's 400 KB item: a
// unit whose rows do not fit keeps the rows that do (in unit order) and the others are written
// one by one, as rows of their own.
const MaxUnitRowsBytes = 256 << 10

// unitFormat names the encoding of a rows item's rows attribute.
const unitFormat = "jsonl+gzip"

// UnitSortKey is the sort key of a unit's rows item: the claim's instant, then "~" and the unit.
// A row of its own has "#" after the instant (SortKey), so the two kinds of key never meet.
func UnitSortKey(unit string, rowInsertedAtMs int64) string {
	return fmt.Sprintf("%013d~%s", rowInsertedAtMs, unit)
}

// RowRef names where an event's row is: in its unit's rows item when Unit is set, else an item
// of its own (SortKey).
type RowRef struct {
	AccountID       string
	EventID         string
	RowInsertedAtMs int64
	Unit            string
}

// Own is the same event's row as an item of its own.
func (r RowRef) Own() RowRef { r.Unit = ""; return r }

// unitRow is one row as a rows item stores it: the fields the unit's rows do not share.
type unitRow struct {
	EventID       string         `json:"eventId"`
	Type          string         `json:"type"`
	Source        string         `json:"source"`
	Subject       string         `json:"subject,omitempty"`
	Time          string         `json:"time,omitempty"`
	ReceivedAtMs  int64          `json:"receivedAtMs"`
	ArchiveOffset int64          `json:"archiveOffset,omitempty"`
	ArchiveLength int64          `json:"archiveLength,omitempty"`
	Dimensions    map[string]any `json:"dims,omitempty"`
	Truncated     map[string]int `json:"truncated,omitempty"`
	DimsOmitted   int            `json:"dimsOmitted,omitempty"`
}

// UnitItem is the rows item of unit's claim holding rows (one account's, of one claim: the same
// instant, cycle and archive object), and how many of them it holds: all, or the longest prefix
// whose compressed rows fit MaxUnitRowsBytes (possibly none, and then no item).
func UnitItem(unit string, rows []Row) (map[string]types.AttributeValue, int, error) {
	if len(rows) == 0 {
		return nil, 0, nil
	}
	first := rows[0]
	for _, r := range rows {
		if r.AccountID != first.AccountID || r.RowInsertedAtMs != first.RowInsertedAtMs || r.Cycle != first.Cycle || r.ArchiveKey != first.ArchiveKey {
			return nil, 0, fmt.Errorf("unit %s: rows of different claims cannot share an item (%s and %s)", unit, first.EventID, r.EventID)
		}
	}
	blob, err := encodeRows(rows)
	if err != nil {
		return nil, 0, err
	}
	n := len(rows)
	if len(blob) > MaxUnitRowsBytes {
		// The longest prefix that fits, by bisection: lo fits (or is 0), hi does not.
		lo, hi := 0, n
		blob = nil
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			b, err := encodeRows(rows[:mid])
			if err != nil {
				return nil, 0, err
			}
			if len(b) <= MaxUnitRowsBytes {
				lo, blob = mid, b
			} else {
				hi = mid
			}
		}
		if n = lo; n == 0 {
			return nil, 0, nil
		}
	}
	return map[string]types.AttributeValue{
		"pk":              dynamo.S(first.AccountID),
		"sk":              dynamo.S(UnitSortKey(unit, first.RowInsertedAtMs)),
		"accountId":       dynamo.S(first.AccountID),
		"unit":            dynamo.S(unit),
		"rowInsertedAtMs": dynamo.N(first.RowInsertedAtMs),
		"cycle":           dynamo.S(first.Cycle),
		"archiveKey":      dynamo.S(first.ArchiveKey),
		"events":          dynamo.N(int64(n)),
		"format":          dynamo.S(unitFormat),
		"rows":            &types.AttributeValueMemberB{Value: blob},
	}, n, nil
}

func encodeRows(rows []Row) ([]byte, error) {
	var lines bytes.Buffer
	enc := json.NewEncoder(&lines)
	for _, r := range rows {
		if err := enc.Encode(unitRow{
			EventID: r.EventID, Type: r.Type, Source: r.Source, Subject: r.Subject, Time: r.Time,
			ReceivedAtMs: r.ReceivedAtMs, ArchiveOffset: r.ArchiveOffset, ArchiveLength: r.ArchiveLength,
			Dimensions: r.Dimensions, Truncated: r.Truncated, DimsOmitted: r.DimsOmitted,
		}); err != nil {
			return nil, fmt.Errorf("encode the row of %s: %w", r.EventID, err)
		}
	}
	var out bytes.Buffer
	z, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := z.Write(lines.Bytes()); err != nil {
		return nil, err
	}
	if err := z.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// IsUnitItem reports whether an analytics item is a unit's rows item.
func IsUnitItem(item map[string]types.AttributeValue) bool {
	_, ok := item["unit"]
	return ok
}

// RowsOf is the rows a unit's rows item holds, each as RowFor built it.
func RowsOf(item map[string]types.AttributeValue) ([]Row, error) {
	if f := dynamo.Str(item, "format"); f != unitFormat {
		return nil, fmt.Errorf("rows item %s: format %q, want %q", dynamo.Str(item, "sk"), f, unitFormat)
	}
	blob, ok := item["rows"].(*types.AttributeValueMemberB)
	if !ok {
		return nil, fmt.Errorf("rows item %s: no rows", dynamo.Str(item, "sk"))
	}
	z, err := gzip.NewReader(bytes.NewReader(blob.Value))
	if err != nil {
		return nil, fmt.Errorf("rows item %s: %w", dynamo.Str(item, "sk"), err)
	}
	dec := json.NewDecoder(z)
	dec.UseNumber()
	var rows []Row
	for {
		var u unitRow
		err := dec.Decode(&u)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("rows item %s: row %d: %w", dynamo.Str(item, "sk"), len(rows), err)
		}
		rows = append(rows, Row{
			AccountID: dynamo.Str(item, "accountId"), EventID: u.EventID, Type: u.Type, Source: u.Source,
			Subject: u.Subject, Time: u.Time, ReceivedAtMs: u.ReceivedAtMs,
			RowInsertedAtMs: dynamo.Int(item, "rowInsertedAtMs"), Cycle: dynamo.Str(item, "cycle"),
			ArchiveKey: dynamo.Str(item, "archiveKey"), ArchiveOffset: u.ArchiveOffset, ArchiveLength: u.ArchiveLength,
			Dimensions: u.Dimensions, Truncated: u.Truncated, DimsOmitted: u.DimsOmitted,
		})
	}
	if want := dynamo.Int(item, "events"); int64(len(rows)) != want {
		return nil, fmt.Errorf("rows item %s holds %d rows; it says %d", dynamo.Str(item, "sk"), len(rows), want)
	}
	return rows, nil
}
