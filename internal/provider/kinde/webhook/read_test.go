package webhook_test

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	kindewebhook "github.com/ferrymeter/ferry/internal/provider/kinde/webhook"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const fixtures = "../../../../testdata/webhooks"

// Every Kinde fixture reads as its golden line says: the reader finds each field wherever a
// delivery has been seen to carry it.
func TestRead_Fixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtures, "kinde", "*.json"))
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
		lines = append(lines, filepath.Base(f)+": "+kindewebhook.Read(raw).Summary())
	}
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join(fixtures, "kinde.golden")
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
