package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/devstack"
)

// The walkthrough (docs/walkthrough.md), run by scripts/walkthrough.sh (which reads it from the
// document), gets the answers the document shows from a fresh local stack. CI runs the same
// script against `make run` too.
func TestWalkthrough_AnswersAsTheDocumentSays(t *testing.T) {
	if testing.Short() {
		t.Skip("the walkthrough runs the labs, which compile cmd/ferry")
	}
	stack := startLocalStack(t)
	script, err := filepath.Abs(filepath.Join("..", "scripts", "walkthrough.sh"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script)
	cmd.Env = append(os.Environ(), "FERRY_ADDR="+strings.TrimPrefix(stack.URL, "http://"), "FERRY_ADMIN_KEY="+devstack.DefaultAdminKey)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/walkthrough.sh: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "every answer is the document's") {
		t.Errorf("the script did not report success:\n%s", out)
	}
}
