package holds_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// A worker disappears: its lease runs out, the sweeper settles the hold as EXPIRED at the usage
// it recorded and gives the rest back. The worker comes back late and is ignored: its charge is
// refused, and its settle gets the sweeper's result.
func TestSweeper_ExpiresALapsedLease_AndALateWorkerIsIgnored(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_lapse", "free", map[string]any{"tokens": 100_000})
	id := mustStatus(t, reserve(t, h, key, "job-1", 40_000), http.StatusCreated)["id"].(string)
	mustStatus(t, charge(t, h, key, id, "step-1", 12_000), http.StatusOK)

	h.Clock.Advance(holds.LeaseDuration - time.Second)
	if res, err := h.Sweeper().Holds.Sweep(t.Context()); err != nil || res.Expired != 0 {
		t.Fatalf("a live lease was swept: %+v, %v", res, err)
	}
	h.Clock.Advance(time.Second)
	sweep(t, h, 1)

	hold := mustStatus(t, h.Do(t, http.MethodGet, "/v1/holds/"+id, key, nil), http.StatusOK)
	if hold["status"] != "EXPIRED" || num(t, hold, "charged") != 12_000 || num(t, hold, "released") != 28_000 {
		t.Errorf("hold = %v", hold)
	}
	wantUsage(t, h, key, 12_000, 0)

	late := mustStatus(t, charge(t, h, key, id, "step-2", 5_000), http.StatusConflict)
	if late["holdStatus"] != "EXPIRED" {
		t.Errorf("late charge = %v", late)
	}
	s := mustStatus(t, settleHold(t, h, key, id, map[string]any{"used": 17_000}), http.StatusOK)
	if s["status"] != "EXPIRED" || num(t, s, "charged") != 12_000 || num(t, s, "released") != 28_000 {
		t.Errorf("late settle = %v", s)
	}
	wantUsage(t, h, key, 12_000, 0)
	if res, err := h.Sweeper().Holds.Sweep(t.Context()); err != nil || res.Expired != 0 {
		t.Errorf("a second sweep moved something: %+v, %v", res, err)
	}
	// The released capacity is usable again.
	mustStatus(t, reserve(t, h, key, "job-2", 88_000), http.StatusCreated)
}

// Every charge renews the lease: a long job that keeps charging keeps its hold.
func TestSweeper_AChargeRenewsTheLease(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_renew", "free", nil)
	id := mustStatus(t, reserve(t, h, key, "job-1", 10_000), http.StatusCreated)["id"].(string)

	h.Clock.Advance(90 * time.Second)
	mustStatus(t, charge(t, h, key, id, "step-1", 1_000), http.StatusOK)
	h.Clock.Advance(60 * time.Second) // 2.5 min after admission, 1 min after the charge
	if res, err := h.Sweeper().Holds.Sweep(t.Context()); err != nil || res.Expired != 0 {
		t.Fatalf("a renewed lease was swept: %+v, %v", res, err)
	}
	mustStatus(t, charge(t, h, key, id, "step-2", 0), http.StatusOK) // a heartbeat renews too
	h.Clock.Advance(holds.LeaseDuration - time.Millisecond)
	if res, err := h.Sweeper().Holds.Sweep(t.Context()); err != nil || res.Expired != 0 {
		t.Fatalf("a renewed lease was swept: %+v, %v", res, err)
	}
	if hold := mustStatus(t, h.Do(t, http.MethodGet, "/v1/holds/"+id, key, nil), http.StatusOK); hold["status"] != "RUNNING" {
		t.Fatalf("hold = %v", hold)
	}
	h.Clock.Advance(time.Millisecond)
	sweep(t, h, 1)
	wantUsage(t, h, key, 1_000, 0)
}

// A run is bounded: it settles at most SweepMaxHolds holds; the next run continues.
func TestSweeper_BoundedRun_TheNextRunContinues(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_bounded", "free", nil)
	for i := range 5 {
		mustStatus(t, reserve(t, h, key, job(i), 1_000), http.StatusCreated)
	}
	h.Sweeper().Holds.SweepMaxHolds = 3
	h.Sweeper().Holds.SweepPageSize = 1
	h.Clock.Advance(holds.LeaseDuration)
	waitForIndex(t, h, func(ids map[string]bool) bool { return len(ids) == 5 })

	res := sweep(t, h, 3)
	if !res.Truncated {
		t.Errorf("a run that stopped at its bound did not say so: %+v", res)
	}
	sweep(t, h, 2)
	wantUsage(t, h, key, 0, 0)
}

// Only RUNNING holds are in the lease index: settled holds never come back to the sweeper.
func TestSweeper_SettledHoldsLeaveTheIndex(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_index", "free", nil)
	settled := mustStatus(t, reserve(t, h, key, "job-settled", 1_000), http.StatusCreated)["id"].(string)
	lapsed := mustStatus(t, reserve(t, h, key, "job-lapsed", 1_000), http.StatusCreated)["id"].(string)
	mustStatus(t, settleHold(t, h, key, settled, nil), http.StatusOK)
	h.Clock.Advance(holds.LeaseDuration)

	waitForIndex(t, h, func(ids map[string]bool) bool { return ids[lapsed] && !ids[settled] })
	sweep(t, h, 1)
	waitForIndex(t, h, func(ids map[string]bool) bool { return len(ids) == 0 })
}

// A hold's lease is two minutes, by value: admitted at t, its lease runs to t+2 min, each charge
// renews it to two minutes past the charge, and the sweeper leaves it alone until the lease has
// run out and settles it then. (A lease of two hours would keep a dead worker's capacity from
// the budget for two hours.)
func TestLease_LastsTwoMinutes(t *testing.T) {
	const lease = 2 * time.Minute
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_two_min", "free", nil)
	start := h.Clock.Now()
	hold := mustStatus(t, reserve(t, h, key, "job-1", 1_000), http.StatusCreated)
	if got := instant(t, hold, "leaseExpiresAt"); !got.Equal(start.Add(lease)) {
		t.Errorf("admitted at %s, the lease runs to %s; want two minutes later", start.Format(time.RFC3339), got.Format(time.RFC3339))
	}
	id := hold["id"].(string)
	h.Clock.Advance(30 * time.Second)
	step := mustStatus(t, charge(t, h, key, id, "step-1", 10), http.StatusOK)
	renewed := start.Add(30*time.Second + lease)
	if got := instant(t, step, "leaseExpiresAt"); !got.Equal(renewed) {
		t.Errorf("charged 30 s in, the lease runs to %s; want %s", got.Format(time.RFC3339), renewed.Format(time.RFC3339))
	}
	h.Clock.Set(renewed.Add(-time.Millisecond))
	if res, err := h.Sweeper().Holds.Sweep(t.Context()); err != nil || res.Expired != 0 {
		t.Fatalf("swept a millisecond before two minutes: %+v, %v", res, err)
	}
	h.Clock.Set(renewed)
	sweep(t, h, 1)
}

// instant reads an RFC 3339 time member of an answer.
func instant(t *testing.T, m map[string]any, field string) time.Time {
	t.Helper()
	s, _ := m[field].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s = %v: %v", field, m[field], err)
	}
	return at
}

// The sweeper re-reads each hold the lease index lists, and settles it only if the lease it reads
// has run out. AWS's index is eventually consistent: it can still list a hold whose lease a charge
// has just renewed. Here the index lags (instrument.IndexLag): it answers the sweep as it stood
// before the charge, so it lists the renewed hold as lapsed. Without the re-read the sweeper
// would expire a hold whose worker is alive and charging.
func TestSweeper_StaleIndexListsARenewedHold_TheReReadKeepsItRunning(t *testing.T) {
	lag := instrument.NewIndexLag(resources.IndexHoldsByLease)
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){lag.Option}})
	key := h.CreateAccount(t, "acct_stale", "free", nil)
	svc := h.Sweeper().Holds
	const pageSize, maxPages = 100, 5
	svc.SweepPageSize, svc.SweepMaxPages = pageSize, maxPages
	start := h.Clock.Now()
	id := mustStatus(t, reserve(t, h, key, "job-1", 1_000), http.StatusCreated)["id"].(string)

	// The index before the charge, read as the sweep at sweepAt will ask it: by then the
	// admission's lease (start + 2 min) has run out.
	sweepAt := start.Add(holds.LeaseDuration + 30*time.Second)
	listed := func() bool {
		for shard := range resources.HoldsLeaseShards {
			refs, err := svc.Store.LapsedLeases(context.Background(), shard, sweepAt.UnixMilli(), pageSize, maxPages)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range refs {
				if r.HoldID == id {
					return true
				}
			}
		}
		return false
	}
	for try := 0; !listed(); try++ {
		if try == 40 {
			t.Fatal("the lease index never listed the hold")
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The worker charges before its lease runs out: the lease now runs to 2 min past the charge.
	h.Clock.Advance(holds.LeaseDuration - 20*time.Second)
	mustStatus(t, charge(t, h, key, id, "step-1", 100), http.StatusOK)

	h.Clock.Set(sweepAt)
	lag.Lag(true)
	res, err := svc.Sweep(t.Context())
	lag.Lag(false)
	if err != nil {
		t.Fatal(err)
	}
	if lag.Served() == 0 || res.Found != 1 {
		t.Fatalf("the sweep did not read the stale index (%d stale answers, found %d)", lag.Served(), res.Found)
	}
	if res.Expired != 0 || res.Skipped != 1 {
		t.Errorf("the sweep expired a hold whose lease a charge had renewed: %+v", res)
	}
	if hold := mustStatus(t, h.Do(t, http.MethodGet, "/v1/holds/"+id, key, nil), http.StatusOK); hold["status"] != "RUNNING" {
		t.Errorf("hold = %v", hold)
	}
	mustStatus(t, charge(t, h, key, id, "step-2", 100), http.StatusOK)
}
