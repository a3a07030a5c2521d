package reconcile

import (
	"strings"
	"testing"
)

func n(v int64) *int64 { return &v }

// Decide is a pure function of its evidence: every verdict, its repair and its cause.
func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name   string
		e      Evidence
		want   Verdict
		repair *int64
		cause  string
	}{
		{"unreadable", Evidence{Ledger: 10, Sent: 10, Unread: "503 from the provider"}, Unreadable, nil, "could not be read back (503 from the provider)"},
		{"unreadable beats a closed cycle", Evidence{Ledger: 10, Sent: 9, Closed: true}, Unreadable, nil, "could not be read back"},
		{"match", Evidence{Ledger: 6048, Sent: 6048, Meter: n(6048)}, Match, nil, "The meter equals the ledger."},
		{"match with a report behind", Evidence{Ledger: 12, Sent: 10, Meter: n(12)}, Match, nil, "the last report Ferry recorded was 10"},
		{"match in a closed cycle", Evidence{Ledger: 12, Sent: 12, Meter: n(12), Closed: true}, Match, nil, "equals the ledger"},
		// The reference scenario: late events after the last report.
		{"late events", Evidence{Ledger: 8457, Sent: 8031, Meter: n(8031)}, UnderBilled, n(8457), CauseLate},
		{"a negative correction", Evidence{Ledger: 99, Sent: 100, Meter: n(100)}, OverBilled, n(99), CauseLate},
		{"a failed report", Evidence{Ledger: 20, Sent: 20, Meter: n(15), Failed: 1}, UnderBilled, n(20), "The last report failed"},
		{"a lost report", Evidence{Ledger: 20, Sent: 20, Meter: n(15)}, UnderBilled, n(20), "below what Ferry sent (20): a report was lost"},
		{"counted twice", Evidence{Ledger: 20, Sent: 20, Meter: n(25)}, OverBilled, n(20), "counted twice, or something else wrote to the meter"},
		{"counted twice, ledger moved too", Evidence{Ledger: 22, Sent: 20, Meter: n(25)}, OverBilled, n(22), "The ledger also changed after the last report."},
		{"closed cycle drift, under", Evidence{Ledger: 30, Sent: 28, Meter: n(28), Closed: true}, ClosedCycleDrift, nil, "Ferry never writes a closed cycle"},
		{"closed cycle drift, over", Evidence{Ledger: 30, Sent: 30, Meter: n(31), Closed: true}, ClosedCycleDrift, nil, "counted twice"},
		// A ledger below zero (a row written before corrections were bounded) is never sent.
		{"a ledger below zero", Evidence{Ledger: -5, Sent: 10, Meter: n(10)}, OverBilled, nil, CauseNegative},
		{"a ledger below zero, a meter below it", Evidence{Ledger: -5, Sent: 0, Meter: n(-9)}, UnderBilled, nil, CauseNegative},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.e)
			if d.Verdict != tc.want {
				t.Errorf("verdict %s, want %s", d.Verdict, tc.want)
			}
			switch {
			case (d.Repair == nil) != (tc.repair == nil):
				t.Errorf("repair %v, want %v", d.Repair, tc.repair)
			case d.Repair != nil && *d.Repair != *tc.repair:
				t.Errorf("repair %d, want %d", *d.Repair, *tc.repair)
			}
			if !strings.Contains(d.Cause, tc.cause) {
				t.Errorf("cause %q does not say %q", d.Cause, tc.cause)
			}
		})
	}
}

// The repair always takes the ledger's side, whatever the meter and the last report say, and is
// never a negative total: a ledger below zero is reviewed, not repaired.
func TestDecide_RepairIsAlwaysTheLedger(t *testing.T) {
	for ledger := int64(-3); ledger < 4; ledger++ {
		for sent := int64(0); sent < 4; sent++ {
			for meter := int64(0); meter < 4; meter++ {
				d := Decide(Evidence{Ledger: ledger, Sent: sent, Meter: n(meter)})
				if meter == ledger {
					if d.Verdict != Match || d.Repair != nil {
						t.Errorf("(%d,%d,%d): %+v", ledger, sent, meter, d)
					}
					continue
				}
				if ledger < 0 {
					if d.Repair != nil || !d.Review {
						t.Errorf("(%d,%d,%d): %+v; a negative ledger is reviewed, never sent", ledger, sent, meter, d)
					}
					continue
				}
				if d.Repair == nil || *d.Repair != ledger {
					t.Errorf("(%d,%d,%d): repair %v, want the ledger %d", ledger, sent, meter, d.Repair, ledger)
				}
			}
		}
	}
}
