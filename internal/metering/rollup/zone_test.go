package rollup

import (
	"testing"
	"time"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UTC()
}

// The first instant of a date, in zones of every kind: whole-hour, 30- and 45-minute offsets,
// clocks moved at 02:00, at midnight (forward, so midnight never happens; back, so it happens
// twice), by half an hour, and a date skipped whole. The expected instants were computed apart,
// by scanning every minute with Python's zoneinfo over the same IANA database.
func TestDayStart_InEveryKindOfZone(t *testing.T) {
	for _, tc := range []struct {
		zone, date, want string
	}{
		{"UTC", "2026-11-05", "2026-11-05T00:00:00Z"},
		{"Asia/Kolkata", "2026-11-05", "2026-11-04T18:30:00Z"},
		{"Asia/Kathmandu", "2026-11-05", "2026-11-04T18:15:00Z"},
		{"America/St_Johns", "2026-11-05", "2026-11-05T03:30:00Z"},
		// New York: 23 hours on the day clocks go forward, 25 on the day they go back.
		{"America/New_York", "2026-03-08", "2026-03-08T05:00:00Z"},
		{"America/New_York", "2026-03-09", "2026-03-09T04:00:00Z"},
		{"America/New_York", "2026-11-01", "2026-11-01T04:00:00Z"},
		{"America/New_York", "2026-11-02", "2026-11-02T05:00:00Z"},
		// São Paulo, 2018: clocks went from 00:00 to 01:00, so the day began at 01:00.
		{"America/Sao_Paulo", "2018-11-03", "2018-11-03T03:00:00Z"},
		{"America/Sao_Paulo", "2018-11-04", "2018-11-04T03:00:00Z"},
		{"America/Sao_Paulo", "2018-11-05", "2018-11-05T02:00:00Z"},
		// Havana: clocks go from 01:00 back to 00:00, so midnight happens twice; the first.
		{"America/Havana", "2026-11-01", "2026-11-01T04:00:00Z"},
		{"America/Havana", "2026-11-02", "2026-11-02T05:00:00Z"},
		{"America/Havana", "2026-03-08", "2026-03-08T05:00:00Z"},
		// Lord Howe Island moves its clocks by half an hour: days of 23.5 and 24.5 hours.
		{"Australia/Lord_Howe", "2026-10-04", "2026-10-03T13:30:00Z"},
		{"Australia/Lord_Howe", "2026-10-05", "2026-10-04T13:00:00Z"},
		{"Australia/Lord_Howe", "2026-04-05", "2026-04-04T13:00:00Z"},
		{"Australia/Lord_Howe", "2026-04-06", "2026-04-05T13:30:00Z"},
		// Samoa skipped 2011-12-30: it starts, empty, where the 31st does.
		{"Pacific/Apia", "2011-12-29", "2011-12-29T10:00:00Z"},
		{"Pacific/Apia", "2011-12-30", "2011-12-30T10:00:00Z"},
		{"Pacific/Apia", "2011-12-31", "2011-12-30T10:00:00Z"},
	} {
		t.Run(tc.zone+"/"+tc.date, func(t *testing.T) {
			d, err := time.Parse(time.DateOnly, tc.date)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dayStart(d, zone(t, tc.zone))
			if err != nil || !got.Equal(utc(t, tc.want)) {
				t.Errorf("dayStart = %s, %v; want %s", got.Format(time.RFC3339), err, tc.want)
			}
		})
	}
}

// DAY windows are the zone's calendar days: their lengths follow the zone's clock changes, and a
// skipped date has no window.
func TestDayWindows_FollowTheZone(t *testing.T) {
	for _, tc := range []struct {
		zone, from, to string
		hours          []float64
	}{
		{"America/New_York", "2026-03-07T05:00:00Z", "2026-03-10T04:00:00Z", []float64{24, 23, 24}},
		{"America/New_York", "2026-10-31T04:00:00Z", "2026-11-03T05:00:00Z", []float64{24, 25, 24}},
		{"Australia/Lord_Howe", "2026-10-03T13:30:00Z", "2026-10-05T13:00:00Z", []float64{23.5, 24}},
		{"Pacific/Apia", "2011-12-29T10:00:00Z", "2012-01-01T10:00:00Z", []float64{24, 24, 24}},
		{"Asia/Kolkata", "2026-11-01T18:30:00Z", "2026-11-03T18:30:00Z", []float64{24, 24}},
	} {
		t.Run(tc.zone, func(t *testing.T) {
			in := QueryInput{Window: Day, Zone: zone(t, tc.zone), From: utc(t, tc.from), To: utc(t, tc.to)}
			ws, err := in.windows()
			if err != nil {
				t.Fatal(err)
			}
			var hours []float64
			for i, w := range ws {
				hours = append(hours, w.End.Sub(w.Start).Hours())
				if i > 0 && !ws[i-1].End.Equal(w.Start) {
					t.Errorf("window %d does not start where %d ends", i, i-1)
				}
			}
			if len(hours) != len(tc.hours) {
				t.Fatalf("windows of %v hours; want %v", hours, tc.hours)
			}
			for i := range hours {
				if hours[i] != tc.hours[i] {
					t.Errorf("windows of %v hours; want %v", hours, tc.hours)
					break
				}
			}
		})
	}
}
