package holds_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
)

// budgetOp is one call on an account's holds budget, as a history records it.
type budgetOp struct {
	kind    string // reserve, settle, read
	amount  int64  // what a reservation holds (and a settlement releases)
	charged int64  // what a settlement charges
}

type budgetOut struct {
	admitted   bool
	used, held int64 // what a read saw
}

// budgetState is the model of the budget: used and held, under a fixed limit.
type budgetState struct{ used, held int64 }

// budgetLimit is the limit of the account the clients share: room for a few holds at a time.
const budgetLimit = 10_000

// budgetModel is the holds budget's specification: a reservation is admitted exactly when it
// fits (used + held + amount ≤ limit) and then holds its amount; a settlement of a hold moves
// what it charges to used and releases the amount it held; a read returns used and held.
var budgetModel = porcupine.Model{
	Init: func() any { return budgetState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(budgetState), input.(budgetOp), output.(budgetOut)
		switch in.kind {
		case "reserve":
			fits := s.used+s.held+in.amount <= budgetLimit
			if fits {
				return out.admitted, budgetState{used: s.used, held: s.held + in.amount}
			}
			return !out.admitted, s
		case "settle":
			return true, budgetState{used: s.used + in.charged, held: s.held - in.amount}
		case "read":
			return out.used == s.used && out.held == s.held, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(budgetOp), output.(budgetOut)
		switch in.kind {
		case "reserve":
			return fmt.Sprintf("reserve %d → admitted %v", in.amount, out.admitted)
		case "settle":
			return fmt.Sprintf("settle %d charging %d", in.amount, in.charged)
		}
		return fmt.Sprintf("read → used %d held %d", out.used, out.held)
	},
}

// reserveAmounts fill the limit exactly, leave a little, or overflow it by one.
var reserveAmounts = []int64{1_000, 2_500, 4_000, 5_001}

// Concurrent jobs reserve, settle and read one account's budget through the API; the history
// they record, with each call's start and end, is linearizable against the budget's model
// (checked by porcupine): no admission the budget had no room for, no refusal of one it had,
// and every read a state some order of the calls passes through.
func TestBudget_ConcurrentHistory_IsLinearizable(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_lin", "free", map[string]any{"tokens": budgetLimit})
	const clients, opsPerClient = 5, 8
	epoch := time.Now()
	var (
		mu  sync.Mutex
		ops []porcupine.Operation
		wg  sync.WaitGroup
	)
	record := func(c int, in budgetOp, out budgetOut, call int64) {
		mu.Lock()
		defer mu.Unlock()
		ops = append(ops, porcupine.Operation{ClientId: c, Input: in, Output: out, Call: call, Return: time.Since(epoch).Nanoseconds()})
	}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(7, uint64(c)))
			type open struct {
				id     string
				amount int64
			}
			var mine []open
			for i := range opsPerClient {
				call := time.Since(epoch).Nanoseconds()
				switch n := r.IntN(10); {
				case n < 5 || len(mine) == 0 && n < 8:
					amount := reserveAmounts[r.IntN(len(reserveAmounts))]
					res := reserve(t, h, key, fmt.Sprintf("lin-%d-%d", c, i), amount)
					switch res.Status {
					case http.StatusCreated:
						mine = append(mine, open{id: res.JSON(t)["id"].(string), amount: amount})
						record(c, budgetOp{kind: "reserve", amount: amount}, budgetOut{admitted: true}, call)
					case http.StatusPaymentRequired:
						record(c, budgetOp{kind: "reserve", amount: amount}, budgetOut{}, call)
					default:
						t.Errorf("reserve: %d %s", res.Status, res.Body)
						return
					}
				case n < 8:
					k := r.IntN(len(mine))
					hold := mine[k]
					mine = append(mine[:k], mine[k+1:]...)
					used := r.Int64N(hold.amount + 1)
					res := settleHold(t, h, key, hold.id, map[string]any{"used": used})
					if res.Status != http.StatusOK {
						t.Errorf("settle: %d %s", res.Status, res.Body)
						return
					}
					charged := num(t, res.JSON(t), "charged")
					record(c, budgetOp{kind: "settle", amount: hold.amount, charged: charged}, budgetOut{}, call)
				default:
					u, held := usageOf(t, h, key)
					record(c, budgetOp{kind: "read"}, budgetOut{used: u, held: held}, call)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	res, info := porcupine.CheckOperationsVerbose(budgetModel, ops, time.Minute)
	if res != porcupine.Ok {
		t.Fatalf("the history of %d operations is %s: %v", len(ops), res, info.PartialLinearizationsOperations())
	}
	t.Logf("%d operations by %d clients, linearizable", len(ops), clients)
}

// The checker can fail: two reservations that do not fit together, both admitted, are refused.
func TestBudgetModel_TwoAdmissionsOverTheLimit_AreNotLinearizable(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Input: budgetOp{kind: "reserve", amount: 6_000}, Output: budgetOut{admitted: true}, Call: 0, Return: 10},
		{ClientId: 1, Input: budgetOp{kind: "reserve", amount: 6_000}, Output: budgetOut{admitted: true}, Call: 1, Return: 11},
	}
	if porcupine.CheckOperations(budgetModel, ops) {
		t.Fatal("two admissions over the limit were accepted as linearizable")
	}
}
