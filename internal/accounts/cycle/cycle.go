// Package cycle computes monthly billing cycles. A cycle starts on the account's agreement day
// (1–28, so every month has it) at 00:00 UTC and ends a month later; without an agreement day,
// cycles are UTC calendar months. A cycle is named by the month it starts in ("2026-11").
package cycle

import (
	"fmt"
	"time"
)

// Agreement days are limited to 1–28 so that every month contains the anchor.
const (
	MinAnchorDay = 1
	MaxAnchorDay = 28
	labelLayout  = "2006-01"
)

// Cycle is one billing cycle [Start, End).
type Cycle struct {
	Start time.Time
	End   time.Time
}

// Label names the cycle: the year and month it starts in.
func (c Cycle) Label() string { return c.Start.Format(labelLayout) }

// Contains reports whether t falls in the cycle.
func (c Cycle) Contains(t time.Time) bool { return !t.Before(c.Start) && t.Before(c.End) }

// Closed reports whether the cycle has ended at now.
func (c Cycle) Closed(now time.Time) bool { return !now.Before(c.End) }

// normalize turns 0 (no agreement day) into 1 (calendar months).
func normalize(anchorDay int) int {
	if anchorDay == 0 {
		return MinAnchorDay
	}
	return anchorDay
}

// ValidAnchor reports whether day can be an agreement day.
func ValidAnchor(day int) bool { return day >= MinAnchorDay && day <= MaxAnchorDay }

// At returns the cycle containing t for an agreement day (0 means calendar months).
func At(t time.Time, anchorDay int) Cycle {
	day := normalize(anchorDay)
	t = t.UTC()
	start := time.Date(t.Year(), t.Month(), day, 0, 0, 0, 0, time.UTC)
	if t.Before(start) {
		start = start.AddDate(0, -1, 0)
	}
	return Cycle{Start: start, End: start.AddDate(0, 1, 0)}
}

// Parse returns the cycle named label ("2026-11") for an agreement day.
func Parse(label string, anchorDay int) (Cycle, error) {
	m, err := time.Parse(labelLayout, label)
	if err != nil || m.Format(labelLayout) != label {
		return Cycle{}, fmt.Errorf("cycle %q is not of the form YYYY-MM", label)
	}
	start := time.Date(m.Year(), m.Month(), normalize(anchorDay), 0, 0, 0, 0, time.UTC)
	return Cycle{Start: start, End: start.AddDate(0, 1, 0)}, nil
}
