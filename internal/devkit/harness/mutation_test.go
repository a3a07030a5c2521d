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

	"github.com/ferrymeter/ferry/internal/devkit/harness"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
)

// The one-line mutations the money invariants rest on: the audit's, made to the one worker
// design (the claim is the billing, and a unit's read is the only read a claim is planned from),
// and two for the rows that go with the claim. Three of them remove condition clauses: they are
// made at the wire (the guard removed from the request, exactly as if the line were gone) by the
// guard-ablation table, which must find each within its budget. The others change a decision or
// a read: they are made to the source. All of them are built into one copy of the harness's
// tests (go's -overlay), each behind a switch: the line is replaced by one that runs the mutated
// line when its switch is on and the original line otherwise, so one build serves every mutant;
// each mutant's run turns its switch on and must find a broken invariant within the budget. Every
// run is seeded, so the seed that catches a mutation is the same on every run.
type mutation struct {
	// id names the mutation's switch, and name says what it is.
	id, name string
	// guards, for a mutation that removes condition clauses, are the guards removed at the wire.
	guards []string
	// file, from and to, for a mutation of the source: from is one whole line of file (it must
	// occur exactly once); to replaces it, and runs the mutated line only while mutantOn(id).
	file, from, to string
	pipeline       string
	budget         int
}

var mutations = []mutation{
	// The double-charge defence: an entry is put, checkpointed, only where none is.
	{id: "1", name: "the claim's condition attribute_not_exists(#pk) removed",
		guards: []string{"ledger.claim.first-writer"}, pipeline: "events", budget: 100},
	{id: "2", name: "a cancelled claim taken as the limit: its members rejected without a fresh read",
		file: "internal/metering/worker/batch.go",
		from: "\t\tif !errors.Is(err, ledger.ErrCancelled) {",
		to: "\t\tif mutantOn(\"2\") && errors.Is(err, ledger.ErrCancelled) && len(c.Admit) > 0 { for _, e := range c.Admit { e.Reason = ledger.LimitReason(r.billing); c.Reject = append(c.Reject, e) }; " +
			"c.Admit, c.Rows, c.Moves, c.Markers, c.Rollups = nil, ledger.RowsItem{}, nil, nil, nil; " +
			"if w.Ledger.WriteBatchClaim(ctx, c) == nil { return struct{}{}, nil } }; if !errors.Is(err, ledger.ErrCancelled) {",
		// The events schedules meet injected TransactionConflict cancellations.
		pipeline: "events", budget: 100},
	{id: "4", name: "the hold settle write without its revision condition",
		guards: []string{"holds.settle.rev"}, pipeline: "holds", budget: 100},
	{id: "5", name: "the charge update without its revision condition",
		guards: []string{"holds.charge.rev"}, pipeline: "holds", budget: 100},
	// An entry an earlier release claimed alone is taken over only while it is unbilled.
	{id: "6", name: "a take-over without the entry's attribute_not_exists(#billingAcceptedAtMs)",
		guards: []string{"ledger.takeover.unbilled"}, pipeline: "events", budget: 100},
	{id: "7", name: "an S3 archive error swallowed",
		file:     "internal/metering/worker/batch.go",
		from:     "\t\tif err := w.Archive.Put(ctx, layout.key, layout.body); err != nil {",
		to:       "\t\tif err := w.Archive.Put(ctx, layout.key, layout.body); err != nil && !mutantOn(\"7\") {",
		pipeline: "events", budget: 100},
	{id: "8", name: "the sweeper skipping its lease-really-lapsed re-check",
		file:     "internal/holds/sweep.go",
		from:     "func lapsed(h Hold, nowMs int64) bool { return h.LeaseExpired(nowMs) }",
		to:       "func lapsed(h Hold, nowMs int64) bool { return mutantOn(\"8\") || h.LeaseExpired(nowMs) }",
		pipeline: "holds", budget: 100},
	{id: "9a", name: "the unit's read (its entries, record, budget rows, marks and markers) made eventually consistent",
		file:     "internal/metering/ledger/batch.go",
		from:     "\t\t\tka.Keys, ka.ConsistentRead = append(ka.Keys, k.Key), aws.Bool(true)",
		to:       "\t\t\tka.Keys, ka.ConsistentRead = append(ka.Keys, k.Key), aws.Bool(!mutantOn(\"9a\"))",
		pipeline: "events", budget: 100},
	{id: "9b", name: "the read of another unit's done record made eventually consistent",
		file:     "internal/metering/ledger/batch.go",
		from:     "\t\tConsistentRead: aws.Bool(true),",
		to:       "\t\tConsistentRead: aws.Bool(!mutantOn(\"9b\")),",
		pipeline: "events-batch", budget: 100},
	// Two more, for the rows that go with the claim: exactly one row per event rests on them.
	{id: "10", name: "a member whose row is in its unit's rows item written a row of its own",
		file:     "internal/metering/worker/batch.go",
		from:     "\t\tif !mb.foreign && has(mb.scenario.Stages, ledger.StageInsert) && !mb.entry.RowInUnit {",
		to:       "\t\tif !mb.foreign && has(mb.scenario.Stages, ledger.StageInsert) && (mutantOn(\"10\") || !mb.entry.RowInUnit) {",
		pipeline: "events-batch", budget: 100},
	{id: "11", name: "another unit's member probed for a row of its own, not where its entry says",
		file:     "internal/metering/worker/finish.go",
		from:     "\t\tpresent, err := w.Analytics.Exists(ctx, entry.RowRef())",
		to:       "\t\tref := entry.RowRef(); if mutantOn(\"11\") { ref = ref.Own() }; present, err := w.Analytics.Exists(ctx, ref)",
		pipeline: "events-batch", budget: 100},
}

// envMutant tells the harness's tests, built with the mutants, which mutant is on and what to
// run: "2:events:100" (the mutant, the pipeline, the budget of schedules).
const envMutant = "FERRY_HARNESS_MUTANT"

// mutantSwitch is the file added to each mutated package: mutantOn reads the switch.
const mutantSwitch = `package %s

import (
	"os"
	"strings"
)

func mutantOn(id string) bool {
	on, _, _ := strings.Cut(os.Getenv("` + envMutant + `"), ":")
	return on == id
}
`

// Each mutation is caught: the harness breaks an invariant within its budget.
func TestMutations_EachIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the harness again with the source mutations")
	}
	if testenv.External() {
		t.Skip("the harness runs on the embedded emulators")
	}
	if os.Getenv(envMutant) != "" {
		t.Skip("this is a mutant's run")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var bin string
	// The mutants' build lives as long as the whole test.
	dir, err := os.MkdirTemp("", "ferry-mutants")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, m := range mutations {
		t.Run(m.id, func(t *testing.T) {
			if len(m.guards) > 0 {
				// The guard-ablation table runs the harness with each of these guards removed
				// (TestGuardAblation_EachRemovedGuardBreaksAnInvariant) or runs the store's test
				// that needs it: the mutation is caught there, by the same seeded runs.
				for _, name := range m.guards {
					if _, ok := instrument.GuardNamed(name); !ok {
						t.Fatalf("no guard %s", name)
					}
					if !inHarnessTable(name, m.pipeline) && storeAblations[name] == "" {
						t.Fatalf("mutation %s (%s) removes %s, which the guard-ablation table has no run for", m.id, m.name, name)
					}
				}
				return
			}
			if bin == "" {
				bin = buildMutants(t, root, dir)
			}
			seed, violation := runMutant(t, root, bin, m)
			t.Logf("mutation %s (%s): caught by seed %d: %s", m.id, m.name, seed, violation)
		})
	}
}

func inHarnessTable(guard, pipeline string) bool {
	for _, a := range harnessAblations {
		if a.guard == guard && a.pipeline == pipeline {
			return true
		}
	}
	return false
}

var caughtLine = regexp.MustCompile(`mutant caught by seed (\d+) \(schedule \d+ of \d+\): (.*)`)

// buildMutants builds the harness's tests once, into dir, with every source mutation behind its
// switch, and returns the test binary.
func buildMutants(t *testing.T, root, dir string) string {
	t.Helper()
	replace := map[string]string{}
	lines := map[string][]string{}
	for _, m := range mutations {
		if m.file == "" {
			continue
		}
		path := filepath.Join(root, m.file)
		if _, ok := lines[path]; !ok {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			lines[path] = strings.Split(string(src), "\n")
		}
		at := -1
		for i, l := range lines[path] {
			if l == m.from {
				if at >= 0 {
					t.Fatalf("%s has the line %q twice: mutation %s is ambiguous", m.file, m.from, m.id)
				}
				at = i
			}
		}
		if at < 0 {
			t.Fatalf("%s no longer has the line %q: bring mutation %s up to date", m.file, m.from, m.id)
		}
		lines[path][at] = m.to
	}
	for path, ls := range lines {
		mutated := filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(path, root+"/"), "/", "_"))
		if err := os.WriteFile(mutated, []byte(strings.Join(ls, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		replace[path] = mutated
		pkgDir := filepath.Dir(path)
		sw := filepath.Join(pkgDir, "zz_mutant_switch.go")
		if _, ok := replace[sw]; !ok {
			swFile := filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(sw, root+"/"), "/", "_"))
			if err := os.WriteFile(swFile, []byte(fmt.Sprintf(mutantSwitch, filepath.Base(pkgDir))), 0o644); err != nil {
				t.Fatal(err)
			}
			replace[sw] = swFile
		}
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": replace})
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
	bin := filepath.Join(dir, "harness-mutants.test")
	cmd := exec.Command(goBin, "test", "-c", "-overlay", overlayFile, "-o", bin, "./internal/devkit/harness/")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the mutants: %v\n%s", err, tail(out))
	}
	return bin
}

// runMutant runs the mutants' test binary with m's switch on; it returns the seed that caught it.
func runMutant(t *testing.T, root, bin string, m mutation) (uint64, string) {
	t.Helper()
	cmd := exec.Command(bin, "-test.count=1", "-test.run", "^TestHarness_Mutant$", "-test.v")
	cmd.Dir = filepath.Join(root, "internal", "devkit", "harness")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%s:%d", envMutant, m.id, m.pipeline, m.budget))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("mutation %s (%s) survived %d %s schedules:\n%s", m.id, m.name, m.budget, m.pipeline, tail(out))
	}
	match := caughtLine.FindSubmatch(out)
	if match == nil {
		t.Fatalf("mutation %s (%s): the mutant's run failed, but not by a broken invariant:\n%s", m.id, m.name, tail(out))
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
// budget and fails at the first broken invariant. Only TestMutations_EachIsCaught runs it.
func TestHarness_Mutant(t *testing.T) {
	spec := os.Getenv(envMutant)
	if spec == "" {
		t.Skip("runs only as a mutant's run (" + envMutant + ")")
	}
	_, rest, _ := strings.Cut(spec, ":")
	pipeline, budget, _ := strings.Cut(rest, ":")
	n, err := strconv.Atoi(budget)
	if err != nil {
		t.Fatalf("%s=%q: want mutant:pipeline:budget", envMutant, spec)
	}
	rep, err := harness.Run(context.Background(), harness.Options{
		Schedules: n, Pipelines: []string{pipeline}, StopAtFailure: true, Endpoints: emulators(t),
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
