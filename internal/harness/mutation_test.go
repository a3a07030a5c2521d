package harness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/dynamo"
	"github.com/ferrymeter/ferry/internal/harness"
	"github.com/ferrymeter/ferry/internal/instrument"
	"github.com/ferrymeter/ferry/internal/testenv"
)

// The nine one-line mutations the money invariants rest on. Four of them remove a condition
// clause: they are made at the wire (the guard removed from the request, exactly as if the line
// were gone), in this process. The others change a decision or a read: they are made to the
// source, one line replaced, and the harness's tests are built again with the mutated file (go's
// -overlay) and must find a broken invariant within the budget. Every run is seeded, so the seed
// that catches a mutation is the same on every run.
type mutation struct {
	// name is the mutation in a few words.
	name string
	// guards, for a mutation that removes condition clauses, are the guards removed at the wire.
	guards []string
	// file, from and to, for a mutation of the source: from is one whole line of file (it must
	// occur exactly once), to replaces it.
	file, from, to string
	pipeline       string
	budget         int
}

var mutations = []mutation{
	{name: "1: the checkpoint condition attribute_not_exists(billingAcceptedAtMs) removed",
		guards: []string{"ledger.checkpoint.unbilled", "ledger.checkpoint-put.unbilled"}, pipeline: "events", budget: 100},
	{name: "2: a cancelled billing transaction treated as REJECTED without the re-read",
		file: "internal/ledger/billing.go",
		from: "\t\tif !errors.Is(err, ErrCancelled) {",
		to:   "\t\tif errors.Is(err, ErrCancelled) { return 0, ErrLimitReached }; if true {",
		// The events schedules meet injected TransactionConflict cancellations.
		pipeline: "events", budget: 100},
	{name: "3: checkpoint absent: REJECTED without the budget read",
		file:     "internal/ledger/billing.go",
		from:     "\t\tif !billed && status == Inserting && b.capped() {",
		to:       "\t\tif !billed && status == Inserting && b.capped() { return 0, ErrLimitReached }; if false {",
		pipeline: "events", budget: 100},
	{name: "4: the hold settle write without its revision condition",
		guards: []string{"holds.settle.rev"}, pipeline: "holds", budget: 100},
	{name: "5: the charge update without its revision condition",
		guards: []string{"holds.charge.rev"}, pipeline: "holds", budget: 100},
	{name: "6: Reject without the checkpoint guard",
		guards: []string{"ledger.reject.unbilled"}, pipeline: "events", budget: 400},
	{name: "7: an S3 archive error swallowed",
		file:     "internal/worker/worker.go",
		from:     "\t\treturn false, w.Archive.Put(ctx, key, j.env.Event)",
		to:       "\t\t_ = w.Archive.Put(ctx, key, j.env.Event); return false, nil",
		pipeline: "events", budget: 100},
	{name: "8: the sweeper skipping its lease-really-lapsed re-check",
		file:     "internal/holds/sweep.go",
		from:     "func lapsed(h Hold, nowMs int64) bool { return h.LeaseExpired(nowMs) }",
		to:       "func lapsed(h Hold, nowMs int64) bool { return true }",
		pipeline: "holds", budget: 100},
	{name: "9a: the checkpoint read made eventually consistent",
		file:     "internal/ledger/dynamo.go",
		from:     "\t\tConsistentRead:           aws.Bool(true),",
		to:       "\t\tConsistentRead:           aws.Bool(false),",
		pipeline: "events", budget: 100},
	{name: "9b: the budget read made eventually consistent",
		file:     "internal/ledger/dynamo.go",
		from:     "\treturn s.Usage.ReadBudget(ctx, e.AccountID, b.Feature, e.Cycle, true)",
		to:       "\treturn s.Usage.ReadBudget(ctx, e.AccountID, b.Feature, e.Cycle, false)",
		pipeline: "events", budget: 100},
}

// envMutant tells the harness's tests, built with a mutated source file, to run one pipeline for
// a budget of schedules: "events:100".
const envMutant = "FERRY_HARNESS_MUTANT"

// Each of the nine mutations is caught: the harness breaks an invariant within its budget.
func TestMutations_EachOfTheNineIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the harness again for each source mutation")
	}
	if testenv.External() {
		t.Skip("the harness runs on the embedded emulators")
	}
	if os.Getenv(envMutant) != "" {
		t.Skip("this is a mutant's run")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mutations {
		t.Run(m.name[:strings.Index(m.name, ":")], func(t *testing.T) {
			if len(m.guards) > 0 {
				var gs []dynamo.Guard
				for _, name := range m.guards {
					g, ok := instrument.GuardNamed(name)
					if !ok {
						t.Fatalf("no guard %s", name)
					}
					gs = append(gs, g)
				}
				rep, err := harness.Run(context.Background(), harness.Options{
					Schedules: m.budget, Pipelines: []string{m.pipeline}, Ablate: gs, StopAtFailure: true,
					Endpoints: testenv.Endpoints(t),
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Failures) == 0 {
					t.Fatalf("mutation %s survived %d %s schedules", m.name, rep.Schedules, m.pipeline)
				}
				f := rep.Failures[0]
				t.Logf("mutation %s: caught by seed %d (schedule %d of %d): %s", m.name, f.Seed, rep.Schedules, m.budget, f.Violations[0])
				return
			}
			seed, violation := runMutant(t, root, m)
			t.Logf("mutation %s: caught by seed %d: %s", m.name, seed, violation)
		})
	}
}

var caughtLine = regexp.MustCompile(`mutant caught by seed (\d+) \(schedule \d+ of \d+\): (.*)`)

// runMutant builds the harness's tests with m applied to the source and runs them; it returns the
// seed that caught the mutant.
func runMutant(t *testing.T, root string, m mutation) (uint64, string) {
	t.Helper()
	path := filepath.Join(root, m.file)
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	at := -1
	for i, l := range lines {
		if l == m.from {
			if at >= 0 {
				t.Fatalf("%s has the line %q twice: the mutation is ambiguous", m.file, m.from)
			}
			at = i
		}
	}
	if at < 0 {
		t.Fatalf("%s no longer has the line %q: bring the mutation up to date", m.file, m.from)
	}
	lines[at] = m.to
	dir := t.TempDir()
	mutated := filepath.Join(dir, filepath.Base(m.file))
	if err := os.WriteFile(mutated, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {path: mutated}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "test", "-overlay", overlayFile, "-count=1", "-run", "^TestHarness_Mutant$", "-v", "./internal/harness/")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d", envMutant, m.pipeline, m.budget))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("mutation %s survived %d %s schedules:\n%s", m.name, m.budget, m.pipeline, tail(out))
	}
	match := caughtLine.FindSubmatch(out)
	if match == nil {
		t.Fatalf("mutation %s: the mutant's run failed, but not by a broken invariant:\n%s", m.name, tail(out))
	}
	seed, _ := strconv.ParseUint(string(match[1]), 10, 64)
	return seed, string(match[2])
}

func tail(out []byte) []byte {
	if len(out) > 4000 {
		return append([]byte("…"), out[len(out)-4000:]...)
	}
	return bytes.TrimSpace(out)
}

// A mutant's run: the harness, built with one mutated source file, runs the pipeline for the
// budget and fails at the first broken invariant. Only TestMutations_EachOfTheNineIsCaught runs it.
func TestHarness_Mutant(t *testing.T) {
	spec := os.Getenv(envMutant)
	if spec == "" {
		t.Skip("runs only as a mutant's run (" + envMutant + ")")
	}
	pipeline, budget, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(budget)
	if err != nil {
		t.Fatalf("%s=%q: want pipeline:budget", envMutant, spec)
	}
	rep, err := harness.Run(context.Background(), harness.Options{
		Schedules: n, Pipelines: []string{pipeline}, StopAtFailure: true, Endpoints: testenv.Endpoints(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) > 0 {
		f := rep.Failures[0]
		t.Fatalf("mutant caught by seed %d (schedule %d of %d): %s", f.Seed, rep.Schedules, n, f.Violations[0])
	}
	t.Logf("%d %s schedules kept every invariant", rep.Schedules, pipeline)
}
