// Package figures formats and summarises what the labs and benchmarks measure: integers with
// thousands separators, nearest-rank percentiles of latencies, durations rounded for reading.
package figures

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Thousands formats an integer with thousands separators: 100000 → "100,000".
func Thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Percentile is the nearest-rank percentile p of ds; 0 for none.
func Percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

// Round rounds a duration for reading: to the millisecond from a second up, to ten
// microseconds from a millisecond up.
func Round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d
}
