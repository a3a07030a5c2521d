package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/harness"
	"github.com/ferrymeter/ferry/internal/testenv"
)

func TestSpeed(t *testing.T) {
	for _, p := range []string{"events", "holds", "idempotency"} {
		for _, b := range []int{5, 25} {
			start := time.Now()
			rep, err := harness.Run(context.Background(), harness.Options{Schedules: 25, Pipelines: []string{p}, Batch: b, Endpoints: testenv.Endpoints(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s batch %d: %d schedules %d steps %s (%.1f ms/schedule, %.2f ms/step) failures %d", p, b, rep.Schedules, rep.Steps, time.Since(start), float64(time.Since(start).Milliseconds())/25, float64(time.Since(start).Microseconds())/1000/float64(rep.Steps), len(rep.Failures))
		}
	}
}
