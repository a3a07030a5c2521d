package rollup

import (
	"fmt"
	"sort"
	"time"
)

// Bounds of finding a day's first instant.
const (
	// dayScanMargin is how far either side of a date's UTC midnight its local midnight can be:
	// UTC offsets run from −12 to +14 hours, and a transition can move it by a few more.
	dayScanMargin = 26 * time.Hour
	// maxZonePeriods bounds the zone periods (spans of one UTC offset) looked at in that scan;
	// no zone changes its offset more than twice in two days.
	maxZonePeriods = 8
)

// date is a calendar date, as the UTC midnight that starts it.
func date(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// localDate is the calendar date of t in loc.
func localDate(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return date(y, m, d)
}

// dayStart is the first instant of day in loc: the first instant whose local date is day or
// later. It is local midnight on most days; on a day whose midnight a transition skips (clocks
// forward at 00:00) it is the transition; a date a zone skipped whole (Samoa's 2011-12-30) starts
// where the next one does, so its window is empty. The local date only changes at a local
// midnight of the offset in force or at a transition, so the first of those candidates (around
// the date, in order) that is in the day or later is the answer.
func dayStart(day time.Time, loc *time.Location) (time.Time, error) {
	lo, hi := day.Add(-dayScanMargin), day.Add(dayScanMargin)
	var candidates []time.Time
	t := lo
	for period := 0; t.Before(hi); period++ {
		if period == maxZonePeriods {
			return time.Time{}, fmt.Errorf("time zone %s changes its offset more than %d times around %s", loc, maxZonePeriods, day.Format(time.DateOnly))
		}
		end := hi
		if _, e := t.In(loc).ZoneBounds(); e.After(t) && e.Before(hi) {
			end = e
		}
		candidates = append(candidates, t)
		_, offset := t.In(loc).Zone()
		fixed := time.FixedZone("", offset)
		lt := t.In(fixed)
		for m := time.Date(lt.Year(), lt.Month(), lt.Day()+1, 0, 0, 0, 0, fixed); m.Before(end); m = m.AddDate(0, 0, 1) {
			candidates = append(candidates, m)
		}
		t = end
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].Before(candidates[j]) })
	for _, c := range candidates {
		if !localDate(c, loc).Before(day) {
			return c.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("no first instant of %s in %s", day.Format(time.DateOnly), loc)
}
