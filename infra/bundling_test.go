package main

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// TestBundling_BuildsStaticArm64Bootstraps synthesizes with bundling on, as `cdk synth` does,
// and inspects each function's staged asset.
func TestBundling_BuildsStaticArm64Bootstraps(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	outdir := t.TempDir()
	s, err := trySynth(map[string]any{}, DefaultDefinitions(), root, true, outdir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, f := range resources.Functions {
		t.Run(f.Name, func(t *testing.T) {
			fn := props(s.json["Resources"].(object)[functionID(t, s, f.Name)].(object))
			key := fn["Code"].(object)["S3Key"].(string)
			hash := strings.TrimSuffix(key, ".zip")
			if other, ok := seen[hash]; ok {
				t.Errorf("functions %s and %s share one asset", other, f.Name)
			}
			seen[hash] = f.Name
			bin, err := elf.Open(filepath.Join(outdir, "asset."+hash, "bootstrap"))
			if err != nil {
				t.Fatal(err)
			}
			defer bin.Close()
			if bin.Machine != elf.EM_AARCH64 {
				t.Errorf("bootstrap built for %v; want arm64", bin.Machine)
			}
			for _, p := range bin.Progs {
				if p.Type == elf.PT_INTERP {
					t.Error("bootstrap is dynamically linked; want a static binary (CGO_ENABLED=0)")
				}
			}
		})
	}
}

func TestBundling_BuildFailureNamesTheFunction(t *testing.T) {
	defs := DefaultDefinitions()
	root := fakeRoot(t, defs, resources.FunctionWorker)
	_, err := trySynth(map[string]any{}, defs, root, true, t.TempDir())
	if err == nil {
		t.Fatal("a function that does not compile was synthesized")
	}
	if !strings.Contains(err.Error(), `build function "worker"`) || !strings.Contains(err.Error(), "undefinedCall") {
		t.Errorf("err = %v; want the function's name and the compiler's message", err)
	}
}

func TestBundling_MissingFunctionFolderRefused(t *testing.T) {
	defs := DefaultDefinitions()
	root := fakeRoot(t, defs)
	if err := os.RemoveAll(filepath.Join(root, functionsDir, resources.FunctionIngest)); err != nil {
		t.Fatal(err)
	}
	_, err := trySynth(map[string]any{}, defs, root, false, "")
	if err == nil || !strings.Contains(err.Error(), `function "ingest": no Go files`) {
		t.Errorf("err = %v; want the missing function named", err)
	}
}

func TestSourceDigest_FollowsBuildInputsOnly(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+modulePath+"\n")
	write("go.sum", "")
	write("functions/api/bootstrap/main.go", "package main\n")
	write("internal/metering/ledger/ledger.go", "package ledger\n")
	digest := func() string {
		t.Helper()
		d, err := sourceDigest(root)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	base := digest()

	// Not build inputs: tests, test data, tool folders, other top-level folders.
	write("internal/metering/ledger/ledger_test.go", "package ledger\n")
	write("internal/metering/ledger/testdata/fixture.go", "package fixture\n")
	write("_tools/node_modules/x/template.go", "package x\n")
	write("internal/_scratch/x.go", "package x\n")
	write("cmd/ferry/main.go", "package main\n")
	write("internal/metering/ledger/README.md", "notes\n")
	if got := digest(); got != base {
		t.Error("digest changed for a file that is not part of any function's build")
	}

	for _, change := range []struct{ rel, content string }{
		{"internal/metering/ledger/ledger.go", "package ledger // changed\n"},
		{"internal/metering/ledger/more.go", "package ledger\n"},
		{"functions/api/bootstrap/main.go", "package main // changed\n"},
		{"go.sum", "example.com/x v1.0.0 h1:x\n"},
	} {
		before := digest()
		write(change.rel, change.content)
		if digest() == before {
			t.Errorf("digest unchanged after writing %s", change.rel)
		}
	}

	if functionAssetHash(base, "api") == functionAssetHash(base, "worker") {
		t.Error("two functions share an asset hash; CDK would stage one binary for both")
	}
}
