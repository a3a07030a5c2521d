package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
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

// fencedBlock is one fenced code block of a Markdown document, fences and info string included.
var fencedBlock = regexp.MustCompile("(?ms)^```[^\n]*\n.*?^```$")

// The README's taste of the walkthrough is copied from the walkthrough: each of its command and
// answer blocks appears in docs/walkthrough.md, in the same order, and an answer right after its
// command there too, so the walkthrough's run checks the answers the README shows.
func TestReadme_TheTasteIsCopiedFromTheWalkthrough(t *testing.T) {
	readme := readDoc(t, "README.md")
	walkthrough := readDoc(t, filepath.Join("docs", "walkthrough.md"))
	const heading = "## A taste of the walkthrough\n"
	_, section, found := strings.Cut(readme, heading)
	if !found {
		t.Fatalf("README.md has no section %q", strings.TrimSpace(heading))
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	blocks := fencedBlock.FindAllString(section, -1)
	if len(blocks) == 0 {
		t.Fatal("the README's taste of the walkthrough shows no command")
	}
	at, lastEnd := 0, -1
	for i, block := range blocks {
		offset := strings.Index(walkthrough[at:], block)
		if offset < 0 {
			t.Fatalf("block %d of the README's taste is not in docs/walkthrough.md after the blocks before it:\n%s", i+1, block)
		}
		start := at + offset
		isAnswer := strings.HasPrefix(block, "```text")
		if isAnswer && lastEnd >= 0 && strings.TrimSpace(walkthrough[lastEnd:start]) != "" {
			t.Errorf("block %d of the README's taste is an answer, but in docs/walkthrough.md it does not follow the command before it:\n%s", i+1, block)
		}
		at, lastEnd = start+len(block), start+len(block)
	}
}

// readDoc reads a document at the repository root's path rel.
func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
