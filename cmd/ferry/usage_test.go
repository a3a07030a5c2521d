package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Without a range, `ferry usage` shows the last windows up to the one holding now, aligned as
// the query wants them.
func TestDefaultUsageRange_EndsWithTheCurrentWindow(t *testing.T) {
	now := time.Date(2026, 11, 20, 9, 41, 17, 0, time.UTC)
	for _, tc := range []struct {
		window   rollup.Window
		tz       string
		anchor   int
		from, to string
	}{
		{rollup.Minute, "", 0, "2026-11-20T08:42:00Z", "2026-11-20T09:42:00Z"},
		{rollup.Hour, "", 0, "2026-11-19T10:00:00Z", "2026-11-20T10:00:00Z"},
		{rollup.Day, "", 0, "2026-11-14T00:00:00Z", "2026-11-21T00:00:00Z"},
		{rollup.Day, "Asia/Kolkata", 0, "2026-11-13T18:30:00Z", "2026-11-20T18:30:00Z"},
		{rollup.Cycle, "", 15, "2026-09-15T00:00:00Z", "2026-12-15T00:00:00Z"},
	} {
		from, to, err := defaultUsageRange(tc.window, tc.tz, tc.anchor, now)
		if err != nil || from.Format(time.RFC3339) != tc.from || to.Format(time.RFC3339) != tc.to {
			t.Errorf("%s %s: [%s, %s), %v; want [%s, %s)", tc.window, tc.tz, from.Format(time.RFC3339), to.Format(time.RFC3339), err, tc.from, tc.to)
		}
	}
	if _, _, err := defaultUsageRange("WEEK", "", 0, now); err == nil {
		t.Error("a window that is none: no error")
	}
}

// `ferry usage` prints the query's answer as a table, through the operator's route; a refused
// query fails with the problem's words.
func TestUsage_PrintsTheQuerysTable(t *testing.T) {
	h := apptest.New(t)
	t.Setenv(resources.EnvAdminKey, apptest.AdminKey)
	h.CreateAccount(t, "acct_cli", "free", nil)
	s := &rollup.Store{DB: h.Env.Clients.DynamoDB, Table: h.Env.Names.Table(resources.TableRollups)}
	var cs []meter.Contribution
	for _, at := range []string{"2026-11-13T18:29:00Z", "2026-11-13T18:30:00Z", "2026-11-14T02:00:00Z"} {
		when, _ := time.Parse(time.RFC3339, at)
		cs = append(cs, meter.Contribution{Meter: "events", Aggregation: meter.Count, AtMs: when.UnixMilli(), Value: 1})
	}
	if err := s.Apply(context.Background(), "acct_cli", cs); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	err := run(context.Background(), []string{"usage", "--url", h.Server.URL, "--account", "acct_cli", "--window", "DAY", "--tz", "Asia/Kolkata",
		"--from", "2026-11-13T00:00:00+05:30", "--to", "2026-11-15T00:00:00+05:30"}, &out, &errs)
	if err != nil {
		t.Fatalf("%v: %s", err, errs.String())
	}
	want := strings.Join([]string{
		"events (COUNT) of acct_cli, DAY windows in Asia/Kolkata, from 2026-11-13T00:00:00+05:30 to 2026-11-15T00:00:00+05:30",
		"window start          window end            value",
		"2026-11-13 00:00 IST  2026-11-14 00:00 IST  1",
		"2026-11-14 00:00 IST  2026-11-15 00:00 IST  2",
		"",
	}, "\n")
	if out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	err = run(context.Background(), []string{"usage", "--url", h.Server.URL, "--account", "acct_cli", "--window", "HOUR",
		"--from", "2026-11-13T18:30:00Z", "--to", "2026-11-13T20:00:00Z"}, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "400 from must be aligned to a HOUR window: on a whole hour in UTC, such as 2026-11-13T18:00:00Z") {
		t.Errorf("a misaligned range: %v", err)
	}
}
