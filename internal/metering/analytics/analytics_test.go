package analytics_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/event"
)

func parse(t *testing.T, ev map[string]any) event.Event {
	t.Helper()
	base := map[string]any{"specversion": "1.0", "id": "e1", "source": "/s", "type": "t"}
	for k, v := range ev {
		base[k] = v
	}
	raw, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	e, err := event.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func row(t *testing.T, ev event.Event) analytics.Row {
	t.Helper()
	r, err := analytics.RowFor(analytics.DefaultSchema, ev, "acct", 1, 2, "2026-11", "key")
	if err != nil {
		t.Fatalf("a valid event's row is refused: %v", err)
	}
	return r
}

// A 2 KB prompt is a valid event; its row keeps the lean fields, cut and marked, and is admitted.
func TestRowFor_CutsLongValuesAndMarksThem(t *testing.T) {
	prompt := strings.Repeat("é", 1024) // 2,048 bytes
	r := row(t, parse(t, map[string]any{"subject": strings.Repeat("s", 300), "data": map[string]any{"prompt": prompt, "n": 7}}))
	got, _ := r.Dimensions["prompt"].(string)
	if len(got) > analytics.MaxDimensionValueBytes || !strings.HasPrefix(prompt, got) || len(got) != 256 {
		t.Errorf("prompt kept as %d bytes", len(got))
	}
	if r.Truncated["dims.prompt"] != 2048 || r.Truncated["subject"] != 300 || len(r.Subject) != analytics.MaxTextBytes {
		t.Errorf("truncated %v, subject %d bytes", r.Truncated, len(r.Subject))
	}
	if fmt.Sprint(r.Dimensions["n"]) != "7" || len(r.Truncated) != 2 {
		t.Errorf("dimensions %v truncated %v", r.Dimensions, r.Truncated)
	}
	// Cut at a character boundary: a multi-byte character is never split.
	r = row(t, parse(t, map[string]any{"data": map[string]any{"p": "a" + strings.Repeat("é", 200)}}))
	if v := r.Dimensions["p"].(string); len(v) != 255 || !strings.HasSuffix(v, "é") {
		t.Errorf("cut inside a character: %d bytes", len(v))
	}
}

func TestRowFor_CountsWhatItLeavesOut(t *testing.T) {
	data := map[string]any{"bad-name": 1, "big": json.Number("1" + strings.Repeat("1", 40)), "huge": json.Number("1e200"), "nested": map[string]any{"x": 1}}
	for i := range 40 {
		data[fmt.Sprintf("f%02d", i)] = i
	}
	r := row(t, parse(t, map[string]any{"data": data}))
	if len(r.Dimensions) != analytics.MaxDimensions {
		t.Errorf("%d dimensions, want %d", len(r.Dimensions), analytics.MaxDimensions)
	}
	// bad-name, big and huge, and the 8 fields past the cap (in name order: f32…f39).
	if r.DimsOmitted != 11 {
		t.Errorf("omitted %d, want 11", r.DimsOmitted)
	}
	if _, ok := r.Dimensions["f39"]; ok {
		t.Error("a field past the cap was kept")
	}
}

// The largest row the caps allow fits the default sink schema, so no valid event ends
// UNINSERTABLE by its size or shape.
func TestRowFor_TheLargestCappedRowFitsTheDefaultSchema(t *testing.T) {
	data := map[string]any{}
	for i := range 40 {
		data[fmt.Sprintf("a%063d", i)] = strings.Repeat("x", 1000)
	}
	raw, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": strings.Repeat("i", event.MaxIDLength), "source": "/" + strings.Repeat("s", 1000),
		"type": strings.Repeat("t", 1000), "subject": strings.Repeat("u", 1000), "data": data})
	ev, err := event.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	r := row(t, ev)
	if len(r.Dimensions) != analytics.MaxDimensions || len(r.Truncated) != 3+analytics.MaxDimensions {
		t.Errorf("%d dimensions, %d truncated", len(r.Dimensions), len(r.Truncated))
	}
}

// A sink whose schema drifted (fewer columns than the rows need) refuses the row: that is what
// UNINSERTABLE is for.
func TestRowFor_ASinkThatDriftedRefusesTheRow(t *testing.T) {
	ev := parse(t, map[string]any{"data": map[string]any{"a": 1, "b": 2}})
	_, err := analytics.RowFor(analytics.Schema{MaxDimensions: 1, MaxValueBytes: 1024, MaxDimensionBytes: 1024}, ev, "acct", 1, 2, "2026-11", "key")
	if !errors.Is(err, analytics.ErrRowRejected) {
		t.Errorf("err %v, want ErrRowRejected", err)
	}
}
