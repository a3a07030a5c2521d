package stripe

import (
	"testing"
	"time"
)

// Each meter aggregates its customer's events by its own formula: sum adds the values, count
// counts the events, last takes the value of the latest by timestamp (received order breaking a
// tie within one second); cancelled events count for none.
func TestAggregate_ByTheMetersFormula(t *testing.T) {
	at := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	events := []*Event{
		{Value: 5, Timestamp: at.Add(2 * time.Second)},
		{Value: 9, Timestamp: at},
		{Value: 3, Timestamp: at.Add(2*time.Second + 500*time.Millisecond)},
		{Value: 100, Timestamp: at.Add(time.Hour), Cancelled: true},
	}
	live := func(e *Event) bool { return !e.Cancelled }
	for formula, want := range map[string]int64{FormulaSum: 17, FormulaCount: 3, FormulaLast: 3} {
		if got := aggregate(formula, events, live); got != want {
			t.Errorf("%s = %d, want %d", formula, got, want)
		}
	}
	if got := aggregate(FormulaLast, nil, live); got != 0 {
		t.Errorf("last of no events = %d", got)
	}
}
