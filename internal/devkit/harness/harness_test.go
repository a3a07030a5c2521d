package harness_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/ferrymeter/ferry/internal/devkit/harness"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// ciSchedules is how many schedules make harness runs in CI; FERRY_HARNESS_SCHEDULES raises it.
const ciSchedules = 150

func schedules(t *testing.T, fallback int) int {
	t.Helper()
	if v, err := strconv.Atoi(os.Getenv("FERRY_HARNESS_SCHEDULES")); err == nil && v > 0 {
		return v
	}
	return fallback
}

// Every pipeline, many seeded schedules of faults: after each, the invariants hold.
func TestHarness_SeededSchedules_KeepEveryInvariant(t *testing.T) {
	if testenv.External() {
		t.Skip("the harness owns every interleaving and injects faults at the client; it runs on the embedded emulators")
	}
	rep, err := harness.Run(context.Background(), harness.Options{
		First: 0, Schedules: schedules(t, ciSchedules), Endpoints: emulators(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d schedules, %d steps, by pipeline %v, faults %v, in %s", rep.Schedules, rep.Steps, rep.ByPipeline, rep.Faults, rep.Duration)
	for i, f := range rep.Failures {
		if i == 5 {
			t.Errorf("… and %d more failing schedules", len(rep.Failures)-i)
			break
		}
		t.Errorf("seed %d (%s) broke %d invariants: %v\nreproduce: %s", f.Seed, f.Pipeline, len(f.Violations), f.Violations, harness.Reproduce(f, nil))
	}
}

// emulators are the endpoints a harness run in a test uses: the test binary's SQS emulator, and
// DynamoDB and S3 in the run's own process (left empty), which it resets between schedules.
func emulators(t *testing.T) cloud.Endpoints {
	t.Helper()
	return cloud.Endpoints{SQS: testenv.Endpoints(t).SQS}
}
