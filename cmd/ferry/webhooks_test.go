package main

import (
	"testing"
	"time"
)

// A time flag is an RFC 3339 time as the providers write it, a duration from now, or now.
func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	cases := map[string]time.Time{
		"":                                    now,
		"-1h":                                 now.Add(-time.Hour),
		"90s":                                 now.Add(90 * time.Second),
		"2026-12-01T20:00:00.123456789+11:00": time.Date(2026, 12, 1, 9, 0, 0, 123456789, time.UTC),
	}
	for in, want := range cases {
		got, err := parseWhen(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseWhen(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseWhen("yesterday", now); err == nil {
		t.Error("parseWhen(yesterday): no error")
	}
}
