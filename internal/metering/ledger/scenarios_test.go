package ledger

import (
	"reflect"
	"testing"
)

// The table's order is part of its meaning: the first match wins.
func TestScenarios_Order(t *testing.T) {
	var names []string
	for _, sc := range Scenarios {
		names = append(names, sc.Name)
	}
	want := []string{
		"claim won, billed: store then mark",
		"claim won, rejected: ack",
		"INSERTED: ack",
		"REJECTED: ack",
		"UNINSERTABLE: ack",
		"INSERTING, analytics row present: mark only",
		"INSERTING, billed, no row: store then mark, never bill",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("scenario order:\n got %q\nwant %q", names, want)
	}
}

// Every reachable state matches exactly the scenario intended, and no other row would match it
// (so the order never hides a mistake). An unbilled INSERTING entry that no claim took over (an
// earlier release's claim the unit did not meet) and a status Ferry does not write retry.
func TestMatch_EveryReachableStateMatchesExactlyItsScenario(t *testing.T) {
	store, mark := []Stage{StageArchive, StageInsert}, StageMark
	cases := []struct {
		name  string
		state State
		want  string
		steps []Stage
		retry bool
	}{
		{"claim won, billed", State{ClaimWon: true, Status: Inserting, Billed: true}, "claim won, billed: store then mark", append(append([]Stage(nil), store...), mark), false},
		{"claim won, rejected", State{ClaimWon: true, Status: Rejected}, "claim won, rejected: ack", nil, false},
		{"inserted", State{Status: Inserted, Billed: true}, "INSERTED: ack", nil, false},
		{"rejected", State{Status: Rejected}, "REJECTED: ack", nil, false},
		{"uninsertable", State{Status: Uninsertable, Billed: true}, "UNINSERTABLE: ack", nil, false},
		{"row present", State{Status: Inserting, Billed: true, RowPresent: true}, "INSERTING, analytics row present: mark only", []Stage{mark}, false},
		{"billed, no row", State{Status: Inserting, Billed: true}, "INSERTING, billed, no row: store then mark, never bill", append(append([]Stage(nil), store...), mark), false},
		{"claimed alone, not taken over", State{Status: Inserting}, unknownState.Name, nil, true},
		{"row without checkpoint", State{Status: Inserting, RowPresent: true}, unknownState.Name, nil, true},
		{"unknown status", State{Status: "PAUSED"}, unknownState.Name, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Match(tc.state)
			if got.Name != tc.want || !reflect.DeepEqual(got.Stages, tc.steps) || got.Retry != tc.retry {
				t.Errorf("Match(%+v) = %q %v retry=%v; want %q %v retry=%v", tc.state, got.Name, got.Stages, got.Retry, tc.want, tc.steps, tc.retry)
			}
			matches := 0
			for _, sc := range Scenarios {
				if sc.Match(tc.state) {
					matches++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.want != unknownState.Name]; matches != want {
				t.Errorf("%d scenarios match %+v; want %d", matches, tc.state, want)
			}
		})
	}
}

// No scenario writes anything for an event whose entry is unbilled and still INSERTING: only a
// claim bills, so the table never finishes an event the meter has not counted.
func TestMatch_NeverFinishesAnUnbilledEvent(t *testing.T) {
	for _, won := range []bool{false, true} {
		for _, row := range []bool{false, true} {
			s := State{ClaimWon: won, Status: Inserting, RowPresent: row}
			if sc := Match(s); len(sc.Stages) > 0 {
				t.Errorf("state %+v runs %v without a checkpoint", s, sc.Stages)
			}
		}
	}
}
