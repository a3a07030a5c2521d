package holds_test

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/holds"
)

// crashNext injects fault into the next TransactWriteItems call only.
func crashNext(fault instrument.Fault) instrument.FaultPlan {
	fired := false
	return func(op string, _, _ int) instrument.Fault {
		if op == "TransactWriteItems" && !fired {
			fired = true
			return fault
		}
		return instrument.NoFault
	}
}

func withFaults(t *testing.T) (*apptest.Harness, *instrument.Faults) {
	t.Helper()
	faults := instrument.NewFaults(nil)
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	return h, faults
}

// The process dies after the reservation commits and before it answers. The client retries with
// the same key and gets the hold that was made; the budget holds it once.
func TestReserve_CrashAfterCommitBeforeAnswer_RetryHoldsOnce(t *testing.T) {
	h, faults := withFaults(t)
	key := h.CreateAccount(t, "acct_crash_reserve", "free", nil)

	faults.SetPlan(crashNext(instrument.CrashAfter))
	if r := h.Do(t, http.MethodPost, "/v1/holds", key, map[string]any{"key": "job-1", "feature": "tokens", "amount": 40_000}); r.Status != http.StatusInternalServerError {
		t.Fatalf("crashed reserve answered %d %s", r.Status, r.Body)
	}
	if len(faults.Fired()) != 1 {
		t.Fatalf("fired %v", faults.Fired())
	}
	hold := mustStatus(t, reserve(t, h, key, "job-1", 40_000), http.StatusOK)
	if hold["id"] != holds.ID("acct_crash_reserve", "job-1") || hold["status"] != "RUNNING" {
		t.Errorf("retry answered %v", hold)
	}
	wantUsage(t, h, key, 0, 40_000)
}

// The process dies before the reservation reaches DynamoDB: nothing was held, and the retry
// makes the hold.
func TestReserve_CrashBeforeCommit_RetryMakesTheHold(t *testing.T) {
	h, faults := withFaults(t)
	key := h.CreateAccount(t, "acct_crash_before", "free", nil)

	faults.SetPlan(crashNext(instrument.CrashBefore))
	if r := h.Do(t, http.MethodPost, "/v1/holds", key, map[string]any{"key": "job-1", "feature": "tokens", "amount": 40_000}); r.Status != http.StatusInternalServerError {
		t.Fatalf("crashed reserve answered %d %s", r.Status, r.Body)
	}
	wantUsage(t, h, key, 0, 0)
	mustStatus(t, reserve(t, h, key, "job-1", 40_000), http.StatusCreated)
	wantUsage(t, h, key, 0, 40_000)
}

// The process dies after a charge step commits. The retried step gets the stored answer and the
// hold's usage moved once.
func TestCharge_CrashAfterCommitBeforeAnswer_RetryChargesOnce(t *testing.T) {
	h, faults := withFaults(t)
	key := h.CreateAccount(t, "acct_crash_charge", "free", nil)
	id := mustStatus(t, reserve(t, h, key, "job-1", 10_000), http.StatusCreated)["id"].(string)

	faults.SetPlan(crashNext(instrument.CrashAfter))
	if r := h.Do(t, http.MethodPost, "/v1/holds/"+id+"/charges", key, map[string]any{"key": "step-1", "amount": 6_000}); r.Status != http.StatusInternalServerError {
		t.Fatalf("crashed charge answered %d %s", r.Status, r.Body)
	}
	c := mustStatus(t, charge(t, h, key, id, "step-1", 6_000), http.StatusOK)
	if num(t, c, "charged") != 6_000 || num(t, c, "used") != 6_000 {
		t.Errorf("retried step = %v", c)
	}
	c = mustStatus(t, charge(t, h, key, id, "step-2", 6_000), http.StatusOK)
	if num(t, c, "charged") != 4_000 || c["capped"] != true {
		t.Errorf("next step = %v", c)
	}
}

// The process dies after a settlement commits. The retry returns the stored settlement and the
// budget moved once.
func TestSettle_CrashAfterCommitBeforeAnswer_RetryMovesNothing(t *testing.T) {
	h, faults := withFaults(t)
	key := h.CreateAccount(t, "acct_crash_settle", "free", nil)
	id := mustStatus(t, reserve(t, h, key, "job-1", 40_000), http.StatusCreated)["id"].(string)
	mustStatus(t, charge(t, h, key, id, "step-1", 31_200), http.StatusOK)

	faults.SetPlan(crashNext(instrument.CrashAfter))
	if r := h.Do(t, http.MethodPost, "/v1/holds/"+id+"/settle", key, nil); r.Status != http.StatusInternalServerError {
		t.Fatalf("crashed settle answered %d %s", r.Status, r.Body)
	}
	s := mustStatus(t, settleHold(t, h, key, id, nil), http.StatusOK)
	if s["status"] != "SETTLED" || num(t, s, "charged") != 31_200 || num(t, s, "released") != 8_800 {
		t.Errorf("retried settle = %v", s)
	}
	wantUsage(t, h, key, 31_200, 0)
}

// The sweeper dies after expiring a hold. The next run finds it final and moves nothing.
func TestSweeper_CrashAfterExpiring_NextRunMovesNothing(t *testing.T) {
	h, faults := withFaults(t)
	key := h.CreateAccount(t, "acct_crash_sweep", "free", nil)
	id := mustStatus(t, reserve(t, h, key, "job-1", 40_000), http.StatusCreated)["id"].(string)
	mustStatus(t, charge(t, h, key, id, "step-1", 5_000), http.StatusOK)
	h.Clock.Advance(holds.LeaseDuration)
	waitForIndex(t, h, func(ids map[string]bool) bool { return ids[id] })

	faults.SetPlan(crashNext(instrument.CrashAfter))
	if _, err := h.Sweeper().Holds.Sweep(t.Context()); err == nil {
		t.Fatal("the crashed sweep reported no failure")
	}
	faults.SetPlan(nil)
	if res, err := h.Sweeper().Holds.Sweep(t.Context()); err != nil || res.Expired != 0 {
		t.Errorf("the next sweep: %+v, %v", res, err)
	}
	hold := mustStatus(t, h.Do(t, http.MethodGet, "/v1/holds/"+id, key, nil), http.StatusOK)
	if hold["status"] != "EXPIRED" || num(t, hold, "charged") != 5_000 {
		t.Errorf("hold = %v", hold)
	}
	wantUsage(t, h, key, 5_000, 0)
}
