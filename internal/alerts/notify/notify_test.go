package notify_test

import (
	"testing"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
)

// A threshold's state is its highest change on the row; another threshold's keys, a prefix of
// its name included, are not its own.
func TestThresholdChange_IsTheHighestOfItsOwnKeys(t *testing.T) {
	alerted := map[string]bool{"p80@1": true, "p80@2": true, "p8@5": true, "v80@1": true, "limit=100": true, "p80@x": true}
	for def, want := range map[string]int64{"p80": 2, "p8": 5, "v80": 1, "v8": 0, "p100": 0} {
		if got := notify.ThresholdChange(alerted, def); got != want {
			t.Errorf("%s: change %d; want %d", def, got, want)
		}
	}
}

// Each change of a threshold is its own notification, and so is limit.reached at each limit;
// a redecided change is the same one.
func TestKey_OneNotificationPerChange(t *testing.T) {
	base := notify.Notification{Account: "acct_a", Feature: "events", Cycle: "2026-11", Percent: 80, Threshold: 80, Limit: 100}
	with := func(kind notify.Kind, change, threshold, limit int64) notify.Notification {
		n := base
		n.Kind, n.Change, n.Threshold, n.Limit = kind, change, threshold, limit
		return n
	}
	ids := map[string]string{}
	for name, n := range map[string]notify.Notification{
		"crossed 1":        with(notify.ThresholdCrossed, 1, 80, 100),
		"resolved 2":       with(notify.ThresholdResolved, 2, 800, 1000),
		"crossed 3":        with(notify.ThresholdCrossed, 3, 800, 1000),
		"crossed 5, at 80": with(notify.ThresholdCrossed, 5, 80, 100),
		"limit 100":        with(notify.LimitReached, 0, 0, 100),
		"limit 1000":       with(notify.LimitReached, 0, 0, 1000),
	} {
		if other, ok := ids[n.ID()]; ok {
			t.Errorf("%s and %s have one id", name, other)
		}
		ids[n.ID()] = name
	}
	// The usage told and the instant are not the notification's identity.
	a, b := with(notify.ThresholdCrossed, 1, 80, 100), with(notify.ThresholdCrossed, 1, 80, 100)
	a.Used, b.Used, b.AtMs = 85, 90, 7
	if a.ID() != b.ID() {
		t.Errorf("one crossing decided twice has two ids")
	}
}
