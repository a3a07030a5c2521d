package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/usage"
)

// meterClaim is a unit's claim of one event that moves one feature by m.
func meterClaim(unit, id string, m ledger.Move, markers ...ledger.Marker) ledger.BatchClaim {
	return ledger.BatchClaim{
		AccountID: acct, Batch: unit, Cycle: cycle, ReceivedAtMs: nowMs, NowMs: nowMs,
		Billing: ledger.Billing{Kind: ledger.BillCapped, Tier: plans.Capped},
		Admit:   []ledger.Entry{{EventID: id, ReceivedAtMs: nowMs}},
		Moves:   []ledger.Move{m}, Markers: markers,
	}
}

// readRow reads a feature's budget row as a claim's read does.
func readRow(ctx context.Context, s *ledger.Table, feature string) (usage.Row, error) {
	st, err := s.ReadBatch(ctx, ledger.BatchRead{AccountID: acct, Batch: "probe", Cycle: cycle,
		Features: []ledger.FeatureRead{{Feature: feature, Row: usage.BudgetSK, Budget: true}}})
	return st.Unit.Rows[feature], err
}

// setMove is the replacement of a MAX figure by v, planned from row.
func setMove(v int64, row usage.Row) ledger.Move {
	return ledger.Move{Feature: "storage_gb", Meter: "storage_gb", Aggregation: meter.Max, Row: usage.BudgetSK,
		Set: true, Value: v, Rev: row.Rev}
}

// Two units plan a MAX from the same read of a row that exists: the first replaces it, the
// second, planned before that write, is cancelled (and reads again). Without the rev condition
// the second's smaller value would overwrite the larger one.
func TestGuard_AMaxPlannedFromAStaleRead_IsCancelled(t *testing.T) {
	testenv.NeedsGuard(t, "usage.set.rev", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := store(env, db), context.Background()
		if err := s.WriteBatchClaim(ctx, meterClaim("u0", "evt_0", setMove(10, usage.Row{}))); err != nil {
			return err
		}
		read, err := readRow(ctx, s, "storage_gb")
		if err != nil || read.Used != 10 || read.Rev == 0 {
			return fmt.Errorf("the row after the first MAX: %+v %v", read, err)
		}
		if err := s.WriteBatchClaim(ctx, meterClaim("u1", "evt_1", setMove(50, read))); err != nil {
			return err
		}
		err = s.WriteBatchClaim(ctx, meterClaim("u2", "evt_2", setMove(30, read)))
		now, rerr := readRow(ctx, s, "storage_gb")
		if rerr != nil {
			return rerr
		}
		if !errors.Is(err, ledger.ErrCancelled) || now.Used != 50 {
			return fmt.Errorf("a MAX of 30 planned from the row at 10 committed over 50 (err %v): the figure is %d", err, now.Used)
		}
		return nil
	})
}

// The same on a row read absent: the first unit creates it, the second is cancelled.
func TestGuard_AMaxPlannedOnARowReadAbsent_IsCancelled(t *testing.T) {
	testenv.NeedsGuard(t, "usage.set.fresh", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := store(env, db), context.Background()
		if err := s.WriteBatchClaim(ctx, meterClaim("u1", "evt_1", setMove(50, usage.Row{}))); err != nil {
			return err
		}
		err := s.WriteBatchClaim(ctx, meterClaim("u2", "evt_2", setMove(30, usage.Row{})))
		now, rerr := readRow(ctx, s, "storage_gb")
		if rerr != nil {
			return rerr
		}
		if !errors.Is(err, ledger.ErrCancelled) || now.Used != 50 {
			return fmt.Errorf("a MAX of 30 planned on an absent row committed over 50 (err %v): the figure is %d", err, now.Used)
		}
		return nil
	})
}

// Two units meet one distinct value, each reading its marker absent: the first counts it, the
// second is cancelled. Without the marker's condition the value would count twice.
func TestGuard_ADistinctValueCountsOncePerCycle(t *testing.T) {
	testenv.NeedsGuard(t, "usage.distinct.first", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := store(env, db), context.Background()
		h := meter.DistinctHash("ann")
		count := func(unit string) ledger.Move {
			return ledger.Move{Feature: "active_users", Meter: "users", Aggregation: meter.UniqueCount, Row: usage.BudgetSK,
				Add: 1, Capped: true, Limit: plans.Unlimited, Record: &usage.Record{Unit: unit, Row: usage.BudgetSK, Amount: 1, Events: 1}}
		}
		mk := ledger.Marker{Feature: "active_users", Hash: h}
		if err := s.WriteBatchClaim(ctx, meterClaim("u1", "evt_1", count("u1"), mk)); err != nil {
			return err
		}
		err := s.WriteBatchClaim(ctx, meterClaim("u2", "evt_2", count("u2"), mk))
		tot, rerr := s.Usage.Read(ctx, acct, "active_users", cycle)
		if rerr != nil {
			return rerr
		}
		if !errors.Is(err, ledger.ErrCancelled) || tot.Used != 1 {
			return fmt.Errorf("one distinct value counted by two units (err %v): the figure is %d", err, tot.Used)
		}
		return nil
	})
}

// The pure plan: members in unit order, each admitted while every capped meter it moves fits;
// a refused member moves nothing; a bad value is REJECTED with its reason; MAX and LATEST write
// only when they beat the row as read; distinct values already counted add nothing.
func TestPlanUnit_AdmissionAndMoves(t *testing.T) {
	reading := func(m, f string, a meter.Aggregation, v int64) meter.Reading {
		return meter.Reading{Meter: m, Feature: f, Aggregation: a, Value: v}
	}
	events := reading("events", "events", meter.Count, 1)
	member := func(id string, rs ...meter.Reading) ledger.UnitMember {
		return ledger.UnitMember{Entry: ledger.Entry{EventID: id}, Readings: append([]meter.Reading{events}, rs...)}
	}
	limits := map[string]plans.Limit{"events": plans.Max(10), "tokens": plans.Max(100), "gb": plans.Max(50), "users": plans.Max(2), "seats": plans.Unlimited}
	in := ledger.UnitInput{
		AccountID: acct, Unit: "u", Cycle: cycle, NowMs: nowMs,
		Billing: ledger.Billing{Kind: ledger.BillCapped, Tier: plans.Capped},
		Limit:   func(f string) plans.Limit { return limits[f] },
		State: ledger.UnitState{
			Rows: map[string]usage.Row{
				"tokens": {Totals: usage.Totals{Used: 50, Committed: 60, Held: 10}, Exists: true, Rev: 3},
				"gb":     {Totals: usage.Totals{Used: 20, Committed: 20}, Exists: true, Rev: 7},
				"seats":  {Totals: usage.Totals{Used: 4, Committed: 4}, Exists: true, Rev: 2, Order: "5"},
			},
			Distinct: map[string]bool{ledger.DistinctKey("users", meter.DistinctHash("ann")): true},
		},
	}
	u := func(v string) meter.Reading {
		r := reading("u", "users", meter.UniqueCount, 1)
		r.Distinct = v
		return r
	}
	seat := func(v int64, order string) meter.Reading {
		r := reading("s", "seats", meter.Latest, v)
		r.OrderKey = order
		return r
	}
	in.Open = []ledger.UnitMember{
		member("a", reading("t", "tokens", meter.Sum, 30)),                                    // 60+30 = 90: in
		member("b", reading("t", "tokens", meter.Sum, 20)),                                    // 90+20 > 100: out
		member("c", reading("t", "tokens", meter.Sum, 10), reading("g", "gb", meter.Max, 45)), // in
		member("d", reading("g", "gb", meter.Max, 51)),                                        // above 50: out
		member("e", u("ann")),               // counted already: in, adds 0
		member("f", u("bob")),               // new: in
		member("g", u("cat")),               // new, past 2? 1 committed (bob): in
		member("h", u("dan")),               // past 2: out
		member("i", seat(9, "4"), u("bob")), // older than the row: in, no write
		{Entry: ledger.Entry{EventID: "j"}, Refused: errors.New("bad meter value: meter t: /t is missing")},
	}
	p := ledger.PlanUnit(in)
	var admitted, rejected []string
	for _, e := range p.Admit {
		admitted = append(admitted, e.EventID)
	}
	for _, e := range p.Reject {
		rejected = append(rejected, e.EventID+": "+e.Reason)
	}
	if got := strings.Join(admitted, ","); got != "a,c,e,f,g,i" {
		t.Errorf("admitted %s", got)
	}
	wantRejected := []string{
		"b: monthly limit reached: tokens limit is 100 (meter t has 90 committed; this event needs 20)",
		"d: monthly limit reached: gb limit is 50 (meter g: this event's value 51 is above it)",
		"h: monthly limit reached: users limit is 2 (meter u has 2 distinct values; this event brings a new one)",
		"j: bad meter value: meter t: /t is missing",
	}
	if !reflect.DeepEqual(rejected, wantRejected) {
		t.Errorf("rejected:\n%s\nwant\n%s", strings.Join(rejected, "\n"), strings.Join(wantRejected, "\n"))
	}
	moves := map[string]ledger.Move{}
	for _, m := range p.Moves {
		moves[m.Feature] = m
	}
	if m := moves["events"]; m.Add != 6 || !m.Capped || m.Record != nil {
		t.Errorf("events move %+v", m)
	}
	if m := moves["tokens"]; m.Add != 40 || m.Record == nil || m.Record.Amount != 40 || m.Record.Events != 2 {
		t.Errorf("tokens move %+v %+v", m, m.Record)
	}
	if m := moves["gb"]; !m.Set || m.Value != 45 || m.Rev != 7 || m.Record.Amount != 45 {
		t.Errorf("gb move %+v", m)
	}
	if m := moves["users"]; m.Add != 2 || len(p.Markers) != 2 {
		t.Errorf("users move %+v, markers %+v", m, p.Markers)
	}
	if m := moves["seats"]; m.Set || m.Record == nil || m.Record.Amount != 9 {
		t.Errorf("seats: an older LATEST than the row's writes nothing but its record: %+v", m)
	}
	// The plan is a function of its input: the same unit and state plan the same claim.
	if again := ledger.PlanUnit(in); !reflect.DeepEqual(again, p) {
		t.Error("the same input planned two claims")
	}
}
