package cycle

import (
	"testing"
	"time"
)

func TestAt(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		t      string
		anchor int
		label  string
		start  string
	}{
		{"calendar month", "2026-11-30T23:59:59Z", 0, "2026-11", "2026-11-01T00:00:00Z"},
		{"first instant of a month", "2026-12-01T00:00:00Z", 0, "2026-12", "2026-12-01T00:00:00Z"},
		{"before the anchor is the previous cycle", "2026-11-14T10:00:00Z", 15, "2026-10", "2026-10-15T00:00:00Z"},
		{"on the anchor", "2026-11-15T00:00:00Z", 15, "2026-11", "2026-11-15T00:00:00Z"},
		{"across the year", "2027-01-03T00:00:00Z", 28, "2026-12", "2026-12-28T00:00:00Z"},
		{"other zones are read as UTC", "2026-12-01T01:00:00+02:00", 0, "2026-11", "2026-11-01T00:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := At(at(tc.t), tc.anchor)
			if c.Label() != tc.label || !c.Start.Equal(at(tc.start)) || !c.End.Equal(at(tc.start).AddDate(0, 1, 0)) {
				t.Errorf("At(%s, %d) = %s [%s, %s)", tc.t, tc.anchor, c.Label(), c.Start, c.End)
			}
			if !c.Contains(at(tc.t)) {
				t.Errorf("cycle does not contain its instant")
			}
			p, err := Parse(tc.label, tc.anchor)
			if err != nil || p != c {
				t.Errorf("Parse(%s) = %+v, %v", tc.label, p, err)
			}
		})
	}
}

func TestParse_RefusesMalformed(t *testing.T) {
	for _, s := range []string{"", "2026-13", "2026-1", "26-11", "2026-11-01", "november"} {
		if _, err := Parse(s, 0); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}
