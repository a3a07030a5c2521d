package instrument

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// What measures and breaks Ferry from outside stays out of what runs in AWS: no function links
// the instrumentation, the test harnesses, the local stack, the benchmarks or the labs.
func TestFunctions_DoNotLinkTheInstrumentation(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "list", "-deps", "./functions/...")
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./functions/...: %v\n%s", err, out)
	}
	const module = "github.com/ferrymeter/ferry/"
	// internal/operator/lab is linked: the api function runs the console's labs (the same code as ferry
	// lab), which drive the stack over HTTP and link none of these.
	forbidden := []string{"internal/devkit/instrument", "internal/devkit/testenv", "internal/devkit/apptest", "internal/devkit/devstack", "internal/devkit/bench", "internal/operator/operate"}
	linked := map[string]bool{}
	for _, pkg := range strings.Fields(string(out)) {
		linked[pkg] = true
	}
	for _, f := range forbidden {
		if linked[module+f] {
			t.Errorf("a function links %s", f)
		}
	}
	for _, must := range []string{"internal/app", "internal/platform/retry", "internal/platform/problem"} {
		if !linked[module+must] {
			t.Errorf("no function links %s: is the package list what this test thinks it is?", must)
		}
	}
}
