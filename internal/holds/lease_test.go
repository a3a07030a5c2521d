package holds_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/holds"
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
