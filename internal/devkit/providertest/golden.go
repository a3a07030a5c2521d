// Package providertest holds what the providers' webhook readers test alike.
package providertest

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// Fixtures is the folder of real-shaped webhook deliveries, from a provider reader's package.
const Fixtures = "../../../testdata/webhooks"

// ReadFixtures checks that every fixture of provider (testdata/webhooks/<provider>/*.json) reads
// as its line in testdata/webhooks/<provider>.golden says (run with -update to rewrite it).
func ReadFixtures(t *testing.T, provider string, read func([]byte) inbox.Facts) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(Fixtures, provider, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	sort.Strings(files)
	var lines []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, filepath.Base(f)+": "+read(raw).Summary())
	}
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join(Fixtures, provider+".golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("the fixtures read differently from %s:\n got:\n%s\n want:\n%s", golden, got, want)
	}
}
