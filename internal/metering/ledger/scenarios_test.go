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
		"batch claim won, billed: store then mark",
		"batch claim won, rejected: ack",
		"claim won: bill, store, mark",
		"INSERTED: ack",
		"REJECTED: ack",
		"UNINSERTABLE: ack",
		"INSERTING, analytics row present: mark only",
		"INSERTING, billed, no row: store then mark, never bill",
		"INSERTING, not billed, no row: bill, store, mark",
		"INSERTING, row present, not billed: bill then mark",
		"ledger unreadable: fail this message (retry)",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("scenario order:\n got %q\nwant %q", names, want)
	}
}

// Every reachable state matches exactly the scenario intended, and no other row would match it
// (so the order never hides a mistake).
func TestMatch_EveryReachableStateMatchesExactlyItsScenario(t *testing.T) {
	bill, store, mark := StageBill, []Stage{StageArchive, StageInsert}, StageMark
	full := append(append([]Stage{bill}, store...), mark)
	cases := []struct {
		name  string
		state State
		want  string
		steps []Stage
		retry bool
	}{
		{"claim won", State{ClaimWon: true, Readable: true, Status: Inserting}, "claim won: bill, store, mark", full, false},
		{"batch claim won, billed", State{ClaimWon: true, Readable: true, Status: Inserting, Billed: true}, "batch claim won, billed: store then mark", append(append([]Stage(nil), store...), mark), false},
		{"batch claim won, rejected", State{ClaimWon: true, Readable: true, Status: Rejected}, "batch claim won, rejected: ack", nil, false},
		{"inserted", State{Readable: true, Status: Inserted, Billed: true}, "INSERTED: ack", nil, false},
		{"rejected", State{Readable: true, Status: Rejected}, "REJECTED: ack", nil, false},
		{"uninsertable", State{Readable: true, Status: Uninsertable, Billed: true}, "UNINSERTABLE: ack", nil, false},
		{"row present", State{Readable: true, Status: Inserting, Billed: true, RowPresent: true}, "INSERTING, analytics row present: mark only", []Stage{mark}, false},
		{"billed, no row", State{Readable: true, Status: Inserting, Billed: true}, "INSERTING, billed, no row: store then mark, never bill", append(append([]Stage(nil), store...), mark), false},
		{"not billed, no row", State{Readable: true, Status: Inserting}, "INSERTING, not billed, no row: bill, store, mark", full, false},
		{"row without checkpoint", State{Readable: true, Status: Inserting, RowPresent: true}, "INSERTING, row present, not billed: bill then mark", []Stage{bill, mark}, false},
		{"unreadable", State{}, "ledger unreadable: fail this message (retry)", nil, true},
		{"unknown status", State{Readable: true, Status: "PAUSED"}, "unrecognised ledger state: fail this message (retry)", nil, true},
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

// No scenario ever bills an event whose checkpoint is present.
func TestMatch_NeverBillsABilledEvent(t *testing.T) {
	for _, status := range []Status{Inserting, Inserted, Rejected, Uninsertable} {
		for _, row := range []bool{false, true} {
			s := State{Readable: true, Status: status, Billed: true, RowPresent: row}
			for _, step := range Match(s).Stages {
				if step == StageBill {
					t.Errorf("state %+v bills again", s)
				}
			}
		}
	}
}
