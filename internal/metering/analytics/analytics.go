// Package analytics writes the lean per-event analytics rows: one per accepted event, keyed for
// per-account, per-time-range queries, with the event's top-level data fields as dimensions,
// each field within a documented cap and every cut marked. The full payload lives in the archive. Writer is an interface so another sink (a warehouse, a
// stream) can be added beside the DynamoDB one.
package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ferrymeter/ferry/internal/metering/event"
)

// ErrRowRejected: the sink refused the row and will refuse it again — its schema no longer
// admits rows of this shape (drift). The worker quarantines such a row and, after a bounded
// number of tries, ends the event as UNINSERTABLE. A row RowFor builds for a valid event always
// fits DefaultSchema: a documented-valid event never ends UNINSERTABLE by its size or shape.
var ErrRowRejected = errors.New("analytics row rejected")

// The lean row's caps, per field. The row is for per-account, per-time-range queries over the
// fields that describe usage; the archive keeps every event whole. A value over its cap is cut
// (at a character boundary) and marked in Row.Truncated with its length as sent.
const (
	// MaxTextBytes caps each of type, source and subject.
	MaxTextBytes = 256
	// MaxDimensions caps how many of the data's top-level scalar fields become dimensions,
	// taken in name order; the others are counted in Row.DimsOmitted.
	MaxDimensions = 32
	// MaxDimensionValueBytes caps a string dimension's value.
	MaxDimensionValueBytes = 256
	// maxNumberDigits is DynamoDB's precision: a number with more significant digits, or
	// outside 1e-130…1e126 in magnitude, is counted in Row.DimsOmitted, never rounded.
	maxNumberDigits = 38
)

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
	// ArchiveOffset and ArchiveLength are the payload's byte range in a batch's archive object
	// (ArchiveLength 0: the object is the payload).
	ArchiveOffset int64
	ArchiveLength int64
	// Dimensions are the event data's top-level scalar fields: strings, numbers, booleans.
	Dimensions map[string]any
	// Truncated marks the fields the caps cut ("subject", "dims.prompt"), each with its length
	// in bytes as sent. The whole value is in the archive.
	Truncated map[string]int
	// DimsOmitted counts the data's top-level scalar fields that are not dimensions: a name that
	// is not a column name, a field past MaxDimensions, a number DynamoDB cannot hold exactly.
	DimsOmitted int
}

// Schema is the shape the analytics sink accepts. A row outside it is rejected: this is what
// "schema drift" looks like to Ferry, for instance a sink whose table was set up for fewer
// columns than producers now send.
type Schema struct {
	MaxDimensions     int
	MaxValueBytes     int
	MaxDimensionBytes int
}

// DefaultSchema is the sink's schema unless configured otherwise. It admits every row the caps
// allow: MaxDimensions dimensions of a 64-byte name and a value of at most 256 bytes.
var DefaultSchema = Schema{MaxDimensions: MaxDimensions, MaxValueBytes: 1024, MaxDimensionBytes: 16 << 10}

var dimensionName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// RowFor builds the analytics row of an accepted event, within the caps. It returns an error
// wrapping ErrRowRejected only when the sink's schema does not admit the row.
func RowFor(schema Schema, ev event.Event, accountID string, receivedAtMs, rowInsertedAtMs int64, cycleLabel, archiveKey string) (Row, error) {
	row := Row{
		AccountID: accountID, EventID: ev.ID(),
		ReceivedAtMs: receivedAtMs, RowInsertedAtMs: rowInsertedAtMs, Cycle: cycleLabel, ArchiveKey: archiveKey,
		Truncated: map[string]int{},
	}
	row.Type = row.capped("type", ev.CE.Type(), MaxTextBytes)
	row.Source = row.capped("source", ev.CE.Source(), MaxTextBytes)
	row.Subject = row.capped("subject", ev.CE.Subject(), MaxTextBytes)
	if t := ev.CE.Time(); !t.IsZero() {
		row.Time = t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	row.dimensions(ev)
	if len(row.Truncated) == 0 {
		row.Truncated = nil
	}
	if err := schema.admits(row); err != nil {
		return Row{}, fmt.Errorf("event %s: %w: %v", ev.ID(), ErrRowRejected, err)
	}
	return row, nil
}

// capped returns s cut to at most limit bytes, at a character boundary, and marks a cut.
func (r *Row) capped(field, s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	r.Truncated[field] = len(s)
	return s[:cut]
}

// dimensions takes the data's top-level scalar fields, in name order, within the caps.
func (r *Row) dimensions(ev event.Event) {
	ct := ev.CE.DataContentType()
	if len(ev.CE.Data()) == 0 || ev.CE.DataBase64 || (ct != "" && !strings.Contains(ct, "json")) {
		return
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(ev.CE.Data(), &fields) != nil {
		return // data that is not a JSON object has no dimensions; it is in the archive
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		raw := fields[name]
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if dec.Decode(&v) != nil {
			continue
		}
		switch v.(type) {
		case map[string]any, []any, nil:
			continue // nested values stay in the archive
		}
		if !dimensionName.MatchString(name) || len(r.Dimensions) == MaxDimensions {
			r.DimsOmitted++
			continue
		}
		switch x := v.(type) {
		case string:
			v = r.capped("dims."+name, x, MaxDimensionValueBytes)
		case json.Number:
			if !storableNumber(string(x)) {
				r.DimsOmitted++
				continue
			}
		}
		if r.Dimensions == nil {
			r.Dimensions = map[string]any{}
		}
		r.Dimensions[name] = v
	}
}

// storableNumber reports whether DynamoDB holds the JSON number exactly: at most 38 significant
// digits, and zero or a magnitude from 1e-130 to below 1e126.
func storableNumber(lit string) bool {
	mantissa := strings.TrimPrefix(lit, "-")
	if i := strings.IndexAny(mantissa, "eE"); i >= 0 {
		mantissa = mantissa[:i]
	}
	digits := strings.Trim(strings.Replace(mantissa, ".", "", 1), "0")
	if len(digits) > maxNumberDigits {
		return false
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return false
	}
	f = math.Abs(f)
	return f == 0 || f >= 1e-130 && f < 1e126
}

// admits checks a row against the sink's schema.
func (s Schema) admits(row Row) error {
	var problems []string
	if len(row.Dimensions) > s.MaxDimensions {
		problems = append(problems, fmt.Sprintf("%d fields (limit %d)", len(row.Dimensions), s.MaxDimensions))
	}
	names := make([]string, 0, len(row.Dimensions))
	for k := range row.Dimensions {
		names = append(names, k)
	}
	sort.Strings(names)
	size := 0
	for _, name := range names {
		n := valueBytes(row.Dimensions[name])
		if n > s.MaxValueBytes {
			problems = append(problems, fmt.Sprintf("field %q is %d bytes (limit %d)", name, n, s.MaxValueBytes))
		}
		size += len(name) + n
	}
	if size > s.MaxDimensionBytes {
		problems = append(problems, fmt.Sprintf("fields total %d bytes (limit %d)", size, s.MaxDimensionBytes))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// valueBytes is the size of a dimension's stored value.
func valueBytes(v any) int {
	switch x := v.(type) {
	case string:
		return len(x)
	case json.Number:
		return len(x)
	case bool:
		if x {
			return len("true")
		}
		return len("false")
	}
	return 0
}

// Writer is an analytics sink.
type Writer interface {
	// Write stores the row; writing the same row again changes nothing.
	Write(ctx context.Context, row Row) error
	// Exists reports whether the event's row is stored where ref says (its unit's rows item,
	// or an item of its own), reading with strong consistency: it decides where a recovering
	// worker re-enters.
	Exists(ctx context.Context, ref RowRef) (bool, error)
	// WriteBatch stores rows in bulk (a refused row is ErrRowRejected, and the caller writes
	// the rows one by one to learn which); writing the same rows again changes nothing.
	WriteBatch(ctx context.Context, rows []Row) error
	// ExistsBatch reports which of one account's rows are stored where their refs say,
	// strongly consistent, keyed by event id.
	ExistsBatch(ctx context.Context, accountID string, refs []RowRef) (map[string]bool, error)
}
