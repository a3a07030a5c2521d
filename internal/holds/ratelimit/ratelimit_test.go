package ratelimit

import (
	"testing"
	"time"
)

func TestWindowAt_AlignsToTheMinute(t *testing.T) {
	at := time.Date(2026, 11, 15, 12, 0, 42, 500_000_000, time.UTC)
	w := WindowAt(at, time.Minute)
	if want := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC); !w.Start.Equal(want) {
		t.Errorf("start = %s, want %s", w.Start, want)
	}
	if !w.End.Equal(w.Start.Add(time.Minute)) {
		t.Errorf("end = %s", w.End)
	}
}

func TestWindow_RetryAfter(t *testing.T) {
	start := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	w := WindowAt(start, time.Minute)
	cases := []struct {
		name string
		now  time.Time
		want time.Duration
	}{
		{"start of the window waits all of it", start, time.Minute},
		{"a fraction of a second rounds up", start.Add(42*time.Second + 500*time.Millisecond), 18 * time.Second},
		{"the last instant still waits a second", start.Add(time.Minute - time.Millisecond), time.Second},
		{"past the window waits at least a second", start.Add(2 * time.Minute), time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := w.RetryAfter(c.now); got != c.want {
				t.Errorf("RetryAfter = %s, want %s", got, c.want)
			}
		})
	}
}
