// Package analytics writes the lean per-event analytics rows: one per accepted event, keyed for
// per-account, per-time-range queries, with the event's top-level data fields as dimensions. The
// full payload lives in the archive. Writer is an interface so another sink (a warehouse, a
// stream) can be added beside the DynamoDB one.
package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/ferrymeter/ferry/internal/event"
)

// ErrRowRejected: the sink refused the row and will refuse it again (schema drift, oversize).
// The worker quarantines such a row and, after a bounded number of tries, ends the event as
// UNINSERTABLE.
var ErrRowRejected = errors.New("analytics row rejected")

// Row is one event's analytics row. Every field derives from the queued envelope and the ledger
// claim, so a retry writes a byte-identical row.
type Row struct {
	AccountID       string
	EventID         string
	Type            string
	Source          string
	Subject         string
	Time            string // the event's own time, RFC 3339, if it had one
	ReceivedAtMs    int64
	RowInsertedAtMs int64
	Cycle           string
	ArchiveKey      string
	// Dimensions are the event data's top-level scalar fields: strings, numbers, booleans.
	Dimensions map[string]any
}

// Schema is the shape the analytics sink accepts. A row outside it is rejected: this is what
// "schema drift" looks like to Ferry, for instance a producer that starts sending more fields
// than the sink has columns for.
type Schema struct {
	MaxDimensions     int
	MaxValueBytes     int
	MaxDimensionBytes int
}

// DefaultSchema is the sink's schema unless configured otherwise.
var DefaultSchema = Schema{MaxDimensions: 32, MaxValueBytes: 1024, MaxDimensionBytes: 8 << 10}

var dimensionName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// RowFor builds the analytics row of an accepted event. It returns an error wrapping
// ErrRowRejected when the event's data does not fit the schema.
func RowFor(schema Schema, ev event.Event, accountID string, receivedAtMs, rowInsertedAtMs int64, cycleLabel, archiveKey string) (Row, error) {
	row := Row{
		AccountID: accountID, EventID: ev.ID(), Type: ev.CE.Type(), Source: ev.CE.Source(), Subject: ev.CE.Subject(),
		ReceivedAtMs: receivedAtMs, RowInsertedAtMs: rowInsertedAtMs, Cycle: cycleLabel, ArchiveKey: archiveKey,
	}
	if t := ev.CE.Time(); !t.IsZero() {
		row.Time = t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	dims, err := dimensions(schema, ev)
	if err != nil {
		return Row{}, fmt.Errorf("event %s: %w: %v", ev.ID(), ErrRowRejected, err)
	}
	row.Dimensions = dims
	return row, nil
}

func dimensions(schema Schema, ev event.Event) (map[string]any, error) {
	ct := ev.CE.DataContentType()
	if len(ev.CE.Data()) == 0 || (ct != "" && !strings.Contains(ct, "json")) {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(ev.CE.Data(), &fields) != nil {
		return nil, nil // data that is not a JSON object has no dimensions; it is in the archive
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	dims := map[string]any{}
	size := 0
	var problems []string
	for _, name := range names {
		raw := fields[name]
		var v any
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.UseNumber()
		if dec.Decode(&v) != nil {
			continue
		}
		switch v.(type) {
		case map[string]any, []any, nil:
			continue // nested values stay in the archive
		}
		if !dimensionName.MatchString(name) {
			problems = append(problems, fmt.Sprintf("field %q is not a valid column name", name))
			continue
		}
		if len(raw) > schema.MaxValueBytes {
			problems = append(problems, fmt.Sprintf("field %q is %d bytes (limit %d)", name, len(raw), schema.MaxValueBytes))
			continue
		}
		size += len(name) + len(raw)
		dims[name] = v
	}
	if len(dims) > schema.MaxDimensions {
		problems = append(problems, fmt.Sprintf("%d fields (limit %d)", len(dims), schema.MaxDimensions))
	}
	if size > schema.MaxDimensionBytes {
		problems = append(problems, fmt.Sprintf("fields total %d bytes (limit %d)", size, schema.MaxDimensionBytes))
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return dims, nil
}

// Writer is an analytics sink.
type Writer interface {
	// Write stores the row; writing the same row again changes nothing.
	Write(ctx context.Context, row Row) error
	// Exists reports whether the row for (account, event, rowInsertedAtMs) is stored, reading
	// with strong consistency: it decides where a recovering worker re-enters.
	Exists(ctx context.Context, accountID, eventID string, rowInsertedAtMs int64) (bool, error)
}
