package holds_test

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
)

// Scenario 1: five jobs of 40,000 start at the same moment against a limit of 100,000. Holds
// admit two, refuse three with what is left, and the account spends 80,000.
func TestReserve_FiveJobsOfFortyThousandAtOnce_AdmitsTwoRefusesThreeSpends80000(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_five", "free", map[string]any{"tokens": 100_000})

	answers := make([]apptest.Response, 5)
	race(5, func(i int) { answers[i] = reserve(t, h, key, job(i), 40_000) })

	var admitted []string
	refused := 0
	for _, r := range answers {
		switch r.Status {
		case http.StatusCreated:
			admitted = append(admitted, r.JSON(t)["id"].(string))
		case http.StatusPaymentRequired:
			refused++
			p := r.JSON(t)
			if num(t, p, "remaining") != 20_000 || p["detail"] != "The job needs 40000 and 20000 is left." {
				t.Errorf("refusal = %v", p)
			}
			if ct := r.Header.Get("Content-Type"); ct != httpapi.ProblemContentType {
				t.Errorf("refusal content type %q", ct)
			}
		default:
			t.Fatalf("reserve: %d %s", r.Status, r.Body)
		}
	}
	if len(admitted) != 2 || refused != 3 {
		t.Fatalf("admitted %d, refused %d; want 2 and 3", len(admitted), refused)
	}
	wantUsage(t, h, key, 0, 80_000)

	// Each admitted job runs: four steps of 10,000, then settles.
	for _, id := range admitted {
		for step := range 4 {
			c := mustStatus(t, charge(t, h, key, id, job(step), 10_000), http.StatusOK)
			if c["capped"] != false || num(t, c, "charged") != 10_000 {
				t.Errorf("step %d: %v", step, c)
			}
		}
		s := mustStatus(t, settleHold(t, h, key, id, nil), http.StatusOK)
		if s["status"] != "SETTLED" || num(t, s, "charged") != 40_000 || num(t, s, "released") != 0 {
			t.Errorf("settle: %v", s)
		}
	}
	wantUsage(t, h, key, 80_000, 0)
}

// The race: 50 reservations of 1,000 start together against room for 40. Exactly 40 are
// admitted and the budget never holds more than the limit.
func TestReserve_FiftyConcurrentAgainstRoomForForty_AdmitsExactlyForty(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_race", "free", map[string]any{"tokens": 40_000})

	var admitted, refused, other atomic.Int64
	race(50, func(i int) {
		switch r := reserve(t, h, key, job(i), 1_000); r.Status {
		case http.StatusCreated:
			admitted.Add(1)
		case http.StatusPaymentRequired:
			refused.Add(1)
		default:
			other.Add(1)
			t.Errorf("reserve %d: %d %s", i, r.Status, r.Body)
		}
	})
	if admitted.Load() != 40 || refused.Load() != 10 || other.Load() != 0 {
		t.Errorf("admitted %d, refused %d, other %d; want 40, 10, 0", admitted.Load(), refused.Load(), other.Load())
	}
	wantUsage(t, h, key, 0, 40_000)
}

// Scenario 2: 120 jobs of 1,000, 50 at a time, against room for exactly 100. 100 are admitted,
// 20 refused, none fail; exactly 100,000 is spent and nothing is held at the end.
func TestLoad_120JobsFiftyAtATime_RoomForExactly100(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_load", "free", map[string]any{"tokens": 100_000})

	const jobs, concurrency = 120, 50
	var admitted, refused, failed atomic.Int64
	next := make(chan int)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := reserve(t, h, key, job(i), 1_000)
				switch r.Status {
				case http.StatusCreated:
					admitted.Add(1)
					id := r.JSON(t)["id"].(string)
					if c := charge(t, h, key, id, "run", 1_000); c.Status != http.StatusOK {
						failed.Add(1)
						continue
					}
					if s := settleHold(t, h, key, id, nil); s.Status != http.StatusOK {
						failed.Add(1)
					}
				case http.StatusPaymentRequired:
					refused.Add(1)
				default:
					failed.Add(1)
				}
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	if admitted.Load() != 100 || refused.Load() != 20 || failed.Load() != 0 {
		t.Errorf("admitted %d, refused %d, failed %d; want 100, 20, 0", admitted.Load(), refused.Load(), failed.Load())
	}
	wantUsage(t, h, key, 100_000, 0)
}

func TestReserve_RepeatedKey_ReturnsTheSameHoldAndHoldsNothingNew(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_repeat", "free", nil)

	first := mustStatus(t, reserve(t, h, key, "job-1", 25_000), http.StatusCreated)
	again := reserve(t, h, key, "job-1", 25_000)
	second := mustStatus(t, again, http.StatusOK)
	if first["id"] != second["id"] || again.Header.Get("Location") != "/v1/holds/"+first["id"].(string) {
		t.Errorf("repeat answered %v, first was %v", second, first)
	}
	wantUsage(t, h, key, 0, 25_000)

	// The same key with another amount is a different request: refused, and nothing changes.
	p := mustStatus(t, reserve(t, h, key, "job-1", 30_000), http.StatusUnprocessableEntity)
	if !strings.HasSuffix(p["type"].(string), "key-reused") {
		t.Errorf("problem = %v", p)
	}
	wantUsage(t, h, key, 0, 25_000)

	// Keys are scoped to the account: another account's equal key is its own hold.
	other := h.CreateAccount(t, "acct_repeat_2", "free", nil)
	theirs := mustStatus(t, reserve(t, h, other, "job-1", 25_000), http.StatusCreated)
	if theirs["id"] == first["id"] {
		t.Error("two accounts' equal keys named the same hold")
	}
}

func TestCharge_PastTheHold_IsCutToWhatIsLeftAndCapped(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_cap", "free", nil)
	id := mustStatus(t, reserve(t, h, key, "job-1", 10_000), http.StatusCreated)["id"].(string)

	steps := []struct {
		amount, charged, used int64
		capped                bool
	}{
		{8_000, 8_000, 8_000, false},
		{7_000, 2_000, 10_000, true}, // the estimate was too low: cut, and the job must stop
		{1, 0, 10_000, true},
	}
	for i, s := range steps {
		c := mustStatus(t, charge(t, h, key, id, job(i), s.amount), http.StatusOK)
		if num(t, c, "charged") != s.charged || c["capped"] != s.capped || num(t, c, "used") != s.used ||
			num(t, c, "amount") != 10_000 || c["status"] != "RUNNING" || c["leaseExpiresAt"] == nil {
			t.Errorf("step %d: %v", i, c)
		}
	}
	s := mustStatus(t, settleHold(t, h, key, id, nil), http.StatusOK)
	if num(t, s, "charged") != 10_000 || num(t, s, "released") != 0 {
		t.Errorf("settle: %v", s)
	}
	wantUsage(t, h, key, 10_000, 0)
}

func TestCharge_RepeatedStepKey_ChargesOnce(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_step", "free", nil)
	id := mustStatus(t, reserve(t, h, key, "job-1", 10_000), http.StatusCreated)["id"].(string)

	first := mustStatus(t, charge(t, h, key, id, "step-1", 4_000), http.StatusOK)
	h.Clock.Advance(30 * time.Second)
	again := mustStatus(t, charge(t, h, key, id, "step-1", 4_000), http.StatusOK)
	if num(t, again, "charged") != 4_000 || num(t, again, "used") != 4_000 || again["leaseExpiresAt"] != first["leaseExpiresAt"] {
		t.Errorf("repeated step answered %v; the first answer was %v", again, first)
	}
	p := mustStatus(t, charge(t, h, key, id, "step-1", 5_000), http.StatusUnprocessableEntity)
	if !strings.HasSuffix(p["type"].(string), "key-reused") {
		t.Errorf("problem = %v", p)
	}
	hold := mustStatus(t, h.Do(t, http.MethodGet, "/v1/holds/"+id, key, nil), http.StatusOK)
	if num(t, hold, "used") != 4_000 {
		t.Errorf("hold used %d after a repeated step, want 4000", num(t, hold, "used"))
	}
}

func TestSettle_ChargesUsageReleasesTheRest_SettlingTwiceMovesNothing(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_settle", "free", nil)
	id := mustStatus(t, reserve(t, h, key, "job-1", 40_000), http.StatusCreated)["id"].(string)
	mustStatus(t, charge(t, h, key, id, "step-1", 31_200), http.StatusOK)

	first := mustStatus(t, settleHold(t, h, key, id, nil), http.StatusOK)
	if first["id"] != id || first["status"] != "SETTLED" || num(t, first, "charged") != 31_200 || num(t, first, "released") != 8_800 {
		t.Errorf("settle = %v", first)
	}
	wantUsage(t, h, key, 31_200, 0)

	// Again, even with another figure: the stored result, and nothing moves.
	second := mustStatus(t, settleHold(t, h, key, id, map[string]any{"used": 1}), http.StatusOK)
	if num(t, second, "charged") != 31_200 || num(t, second, "released") != 8_800 {
		t.Errorf("second settle = %v", second)
	}
	wantUsage(t, h, key, 31_200, 0)
	c := mustStatus(t, charge(t, h, key, id, "step-2", 1), http.StatusConflict)
	if c["holdStatus"] != "SETTLED" {
		t.Errorf("charge after settle: %v", c)
	}
	hold := mustStatus(t, h.Do(t, http.MethodGet, "/v1/holds/"+id, key, nil), http.StatusOK)
	if hold["status"] != "SETTLED" || num(t, hold, "charged") != 31_200 || num(t, hold, "released") != 8_800 {
		t.Errorf("hold = %v", hold)
	}
}

// A job that reports its final usage: a job that failed half way pays for the half it did, and
// usage past the hold is charged at the hold.
func TestSettle_WithFinalUsage(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_final", "free", nil)
	half := mustStatus(t, reserve(t, h, key, "job-half", 40_000), http.StatusCreated)["id"].(string)
	over := mustStatus(t, reserve(t, h, key, "job-over", 10_000), http.StatusCreated)["id"].(string)

	s := mustStatus(t, settleHold(t, h, key, half, map[string]any{"used": 24_000}), http.StatusOK)
	if num(t, s, "charged") != 24_000 || num(t, s, "released") != 16_000 {
		t.Errorf("half: %v", s)
	}
	s = mustStatus(t, settleHold(t, h, key, over, map[string]any{"used": 15_000}), http.StatusOK)
	if num(t, s, "charged") != 10_000 || num(t, s, "released") != 0 {
		t.Errorf("over: %v", s)
	}
	wantUsage(t, h, key, 34_000, 0)
}

func TestReserve_UnlimitedFeature_AdmitsWithoutALimit(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_internal", "internal", nil)
	for i := range 3 {
		mustStatus(t, reserve(t, h, key, job(i), 1_000_000_000), http.StatusCreated)
	}
	wantUsage(t, h, key, 0, 3_000_000_000)
}

// A plan change applies to the next admission only: running holds keep what they hold.
func TestReserve_PlanChangeWhileHoldsRun_AppliesToTheNextAdmissionOnly(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_change", "free", map[string]any{"tokens": 100_000})
	running := mustStatus(t, reserve(t, h, key, "job-running", 60_000), http.StatusCreated)["id"].(string)

	r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_change", apptest.AdminKey, map[string]any{"limits": map[string]any{"tokens": 50_000}})
	mustStatus(t, r, http.StatusOK)

	// The running job still has all of its hold.
	c := mustStatus(t, charge(t, h, key, running, "step-1", 60_000), http.StatusOK)
	if num(t, c, "charged") != 60_000 || c["capped"] != false {
		t.Errorf("charge on the running hold after the downgrade: %v", c)
	}
	// The next admission sees the new limit, already exceeded by the running hold.
	p := mustStatus(t, reserve(t, h, key, "job-next", 1), http.StatusPaymentRequired)
	if num(t, p, "remaining") != 0 {
		t.Errorf("refusal = %v", p)
	}
	mustStatus(t, settleHold(t, h, key, running, map[string]any{"used": 30_000}), http.StatusOK)
	mustStatus(t, reserve(t, h, key, "job-after", 20_000), http.StatusCreated)
	p = mustStatus(t, reserve(t, h, key, "job-one-more", 1), http.StatusPaymentRequired)
	if num(t, p, "remaining") != 0 {
		t.Errorf("refusal = %v", p)
	}
	wantUsage(t, h, key, 30_000, 20_000)
}

func TestReserve_RateLimit_The121stNewHoldInAMinuteIs429(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_rate", "internal", nil)
	for i := range 120 {
		mustStatus(t, reserve(t, h, key, job(i), 1), http.StatusCreated)
	}
	r := reserve(t, h, key, job(120), 1)
	p := mustStatus(t, r, http.StatusTooManyRequests)
	if r.Header.Get("Retry-After") != "60" || !strings.HasSuffix(p["type"].(string), "rate-limited") {
		t.Errorf("429 = %v, Retry-After %q", p, r.Header.Get("Retry-After"))
	}
	// A repeated key is not a new hold: it still finds its hold.
	mustStatus(t, reserve(t, h, key, job(7), 1), http.StatusOK)
	wantUsage(t, h, key, 0, 120)

	h.Clock.Advance(time.Minute)
	mustStatus(t, reserve(t, h, key, job(120), 1), http.StatusCreated)
}

func TestHolds_AnotherAccountsHold_IsNotFound(t *testing.T) {
	h := apptest.New(t)
	owner := h.CreateAccount(t, "acct_owner", "free", nil)
	other := h.CreateAccount(t, "acct_other", "free", nil)
	id := mustStatus(t, reserve(t, h, owner, "job-1", 1_000), http.StatusCreated)["id"].(string)

	for _, r := range []apptest.Response{
		h.Do(t, http.MethodGet, "/v1/holds/"+id, other, nil),
		charge(t, h, other, id, "step-1", 10),
		settleHold(t, h, other, id, nil),
		h.Do(t, http.MethodGet, "/v1/holds/hold_aaaaaaaaaaaaaaaaaaaaaaaaaa", owner, nil),
		h.Do(t, http.MethodGet, "/v1/holds/not-a-hold-id", owner, nil),
	} {
		if r.Status != http.StatusNotFound || r.Header.Get("Content-Type") != httpapi.ProblemContentType {
			t.Errorf("got %d %s, want a 404 problem", r.Status, r.Body)
		}
	}
	hold := mustStatus(t, h.Do(t, http.MethodGet, "/v1/holds/"+id, owner, nil), http.StatusOK)
	if hold["status"] != "RUNNING" || num(t, hold, "used") != 0 {
		t.Errorf("the owner's hold changed: %v", hold)
	}
}

func TestHolds_BadInput_AnswersAProblemAndStoresNothing(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_bad", "free", nil)

	cases := []struct {
		name   string
		path   string
		body   any
		header []string
		status int
	}{
		{"malformed JSON", "/v1/holds", `{"key": "j",`, nil, 400},
		{"no key", "/v1/holds", map[string]any{"feature": "tokens", "amount": 10}, nil, 400},
		{"zero amount", "/v1/holds", map[string]any{"key": "j", "feature": "tokens", "amount": 0}, nil, 400},
		{"negative amount", "/v1/holds", map[string]any{"key": "j", "feature": "tokens", "amount": -5}, nil, 400},
		{"fractional amount", "/v1/holds", `{"key": "j", "feature": "tokens", "amount": 1.5}`, nil, 400},
		{"amount over the bound", "/v1/holds", map[string]any{"key": "j", "feature": "tokens", "amount": int64(1) << 52}, nil, 400},
		{"unknown feature", "/v1/holds", map[string]any{"key": "j", "feature": "tokenz", "amount": 10}, nil, 400},
		{"unknown field", "/v1/holds", map[string]any{"key": "j", "feature": "tokens", "amount": 10, "extra": 1}, nil, 400},
		{"key too long", "/v1/holds", map[string]any{"key": strings.Repeat("k", 256), "feature": "tokens", "amount": 10}, nil, 400},
		{"control character in key", "/v1/holds", map[string]any{"key": "a\nb", "feature": "tokens", "amount": 10}, nil, 400},
		{"not JSON", "/v1/holds", `key=j`, []string{"Content-Type", "text/plain"}, 415},
		{"body too large", "/v1/holds", `{"key": "` + strings.Repeat("k", 70_000) + `"}`, nil, 413},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.Do(t, http.MethodPost, c.path, key, c.body, c.header...)
			if r.Status != c.status || r.Header.Get("Content-Type") != httpapi.ProblemContentType {
				t.Errorf("got %d %q %s, want a %d problem", r.Status, r.Header.Get("Content-Type"), r.Body, c.status)
			}
		})
	}
	if n := holdItems(t, h); n != 0 {
		t.Errorf("%d items stored after bad requests", n)
	}
	wantUsage(t, h, key, 0, 0)

	id := mustStatus(t, reserve(t, h, key, "job-1", 1_000), http.StatusCreated)["id"].(string)
	for _, c := range []struct {
		name, path string
		body       any
	}{
		{"charge without a key", "/v1/holds/" + id + "/charges", map[string]any{"amount": 10}},
		{"negative charge", "/v1/holds/" + id + "/charges", map[string]any{"key": "s", "amount": -1}},
		{"charge as a string", "/v1/holds/" + id + "/charges", `{"key": "s", "amount": "10"}`},
		{"negative final usage", "/v1/holds/" + id + "/settle", map[string]any{"used": -1}},
		{"settle with an unknown field", "/v1/holds/" + id + "/settle", map[string]any{"usedd": 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if r := h.Do(t, http.MethodPost, c.path, key, c.body); r.Status != http.StatusBadRequest {
				t.Errorf("got %d %s, want 400", r.Status, r.Body)
			}
		})
	}
	if n := holdItems(t, h); n != 1 {
		t.Errorf("%d items after bad charges and settlements, want only the hold", n)
	}
	hold := mustStatus(t, h.Do(t, http.MethodGet, "/v1/holds/"+id, key, nil), http.StatusOK)
	if hold["status"] != "RUNNING" || num(t, hold, "used") != 0 {
		t.Errorf("hold = %v", hold)
	}
}
