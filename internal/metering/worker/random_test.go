package worker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/worker"
)

// Limits of the randomized harness. FERRY_RANDOM_SCHEDULES raises the number of schedules for a
// longer soak.
const (
	defaultRandomSchedules = 24
	randomEvents           = 16
	maxRedeliveryRounds    = 40
	faultyRounds           = 8 // after these, deliveries run without injected faults
	// maxInvocationMessages bounds the messages one invocation hands the worker.
	maxInvocationMessages = 6
)

// Many random schedules — duplicates, reordering, concurrent invocations of one to several
// messages (grouped by account into units, each redelivery grouped anew and counted as one by
// SQS's receive count), crashes right before and right after DynamoDB writes, failed reads, and
// kills between steps — each followed by redeliveries until every event is finished, as SQS
// would. After each schedule the invariants
// must hold: every event terminal; the meter equals the number of billed events; a capped
// account billed exactly min(limit, events); every INSERTED event archived byte for byte with
// its row; no REJECTED event billed.
func TestWorker_RandomSchedules_KeepTheInvariants(t *testing.T) {
	schedules := defaultRandomSchedules
	if v, err := strconv.Atoi(os.Getenv("FERRY_RANDOM_SCHEDULES")); err == nil && v > 0 {
		schedules = v
	}
	faults := instrument.NewFaults(nil)
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	for seed := range uint64(schedules) {
		rng := rand.New(rand.NewPCG(seed, 42))
		plan := []string{"free", "free", "plus", "internal"}[rng.IntN(4)]
		limit := int64(3 + rng.IntN(randomEvents))
		account := fmt.Sprintf("acct_r%d", seed)
		h.CreateAccount(t, account, plan, map[string]any{"events": limit})

		bodies := make([]string, randomEvents)
		var deliveries []int
		for i := range bodies {
			bodies[i] = message(t, h, account, fmt.Sprintf("evt_%02d", i), map[string]any{"i": i})
			for range 1 + rng.IntN(3) {
				deliveries = append(deliveries, i)
			}
		}

		var mu sync.Mutex // guards rng inside the fault plan and hook
		chance := func(p float64) bool { mu.Lock(); defer mu.Unlock(); return rng.Float64() < p }
		plan1 := func(op string, _, _ int) instrument.Fault {
			switch {
			case chance(0.06):
				return instrument.CrashAfter
			case chance(0.06):
				return instrument.CrashBefore // a throttle or a failed read
			}
			return instrument.NoFault
		}
		hook := func(_ context.Context, _ worker.Point) error {
			if chance(0.04) {
				return errKilled
			}
			return nil
		}

		for round := 0; len(deliveries) > 0; round++ {
			if round == maxRedeliveryRounds {
				t.Fatalf("seed %d: %d deliveries still failing after %d rounds", seed, len(deliveries), round)
			}
			if round < faultyRounds {
				faults.SetPlan(plan1)
				h.Worker().Worker.Hook = hook
			} else {
				faults.SetPlan(nil)
				h.Worker().Worker.Hook = nil
			}
			rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
			var invocations [][]int
			for rest := deliveries; len(rest) > 0; {
				n := 1 + rng.IntN(min(len(rest), maxInvocationMessages))
				invocations, rest = append(invocations, rest[:n]), rest[n:]
			}
			var failed []int
			var fmu sync.Mutex
			var wg sync.WaitGroup
			slots := make(chan struct{}, 1+rng.IntN(4))
			for _, inv := range invocations {
				wg.Add(1)
				slots <- struct{}{}
				go func(inv []int) {
					defer wg.Done()
					defer func() { <-slots }()
					var batch events.SQSEvent
					for k, i := range inv {
						batch.Records = append(batch.Records, events.SQSMessage{MessageId: strconv.Itoa(k), Body: bodies[i],
							Attributes: map[string]string{"ApproximateReceiveCount": strconv.Itoa(round + 1)}})
					}
					resp, _ := h.Worker().Worker.HandleSQS(context.Background(), batch)
					fmu.Lock()
					defer fmu.Unlock()
					for _, f := range resp.BatchItemFailures {
						k, _ := strconv.Atoi(f.ItemIdentifier)
						failed = append(failed, inv[k])
					}
				}(inv)
			}
			wg.Wait()
			deliveries = failed
		}
		faults.SetPlan(nil)
		h.Worker().Worker.Hook = nil

		billed := int64(0)
		for i, body := range bodies {
			id := fmt.Sprintf("evt_%02d", i)
			e := entry(t, h, account, id)
			switch e.Status {
			case ledger.Inserted:
				billed++
				assertStoredOnce(t, h, account, id, body)
			case ledger.Rejected:
				if e.Billed() {
					t.Errorf("seed %d: %s REJECTED with a checkpoint", seed, id)
				}
			default:
				t.Errorf("seed %d: %s ended %s", seed, id, e.Status)
			}
		}
		meter := used(t, h, account)
		switch plan {
		case "free":
			if want := min(limit, randomEvents); billed != want || meter != want {
				t.Errorf("seed %d (free, limit %d): billed %d, meter %d; want %d", seed, limit, billed, meter, want)
			}
		case "plus":
			if billed != randomEvents || meter != randomEvents {
				t.Errorf("seed %d (plus): billed %d, meter %d; want %d", seed, billed, meter, randomEvents)
			}
		case "internal":
			if billed != randomEvents || meter != 0 {
				t.Errorf("seed %d (internal): billed %d, meter %d; want %d and 0", seed, billed, meter, randomEvents)
			}
		}
		if t.Failed() {
			t.Fatalf("seed %d failed (plan %s, limit %d); rerun with this seed to reproduce", seed, plan, limit)
		}
	}
}
