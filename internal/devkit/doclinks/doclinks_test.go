package doclinks_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/devkit/doclinks"
)

// The repository's documents: README.md and every Markdown file under docs/. Every relative link
// and image resolves, and every #anchor names a heading of its target by GitHub's rules.
func TestDocs_EveryRelativeLinkAndAnchorResolves(t *testing.T) {
	root := repositoryRoot(t)
	docs := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.EqualFold(filepath.Ext(p), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			docs = append(docs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list docs/: %v", err)
	}
	if len(docs) < 2 {
		t.Fatalf("found no documents under docs/ in %s", root)
	}
	problems, err := doclinks.Check(root, docs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s", p)
	}
	if len(problems) > 0 {
		t.Logf("checked %d documents; an anchor is GitHub's slug of a heading: lower case, spaces as hyphens, punctuation dropped, -1, -2… for repeats", len(docs))
	}
}

// repositoryRoot is the folder above this package that holds go.mod.
func repositoryRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

func TestCheck_EveryKindOfLinkThatResolves_ReportsNothing(t *testing.T) {
	problems, err := doclinks.Check(filepath.Join("testdata", "resolves"), []string{"README.md", "docs/guide.md"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("reported a link that resolves: %s", p)
	}
}

func TestCheck_BrokenLinksAndAnchors_EachReportedOnItsLine(t *testing.T) {
	problems, err := doclinks.Check(filepath.Join("testdata", "broken"), []string{"README.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:3: docs/missing.md: docs/missing.md does not exist",
		"README.md:4: docs/guide.md#install: no heading of docs/guide.md has the anchor #install",
		"README.md:5: docs/guide.md#setup-2: no heading of docs/guide.md has the anchor #setup-2",
		"README.md:6: ../outside.md: the path leaves the repository",
		"README.md:7: src/main.txt#L9: src/main.txt has 3 lines, not line 9",
		"README.md:8: src/main.txt#main: src/main.txt is not Markdown: its only anchors are lines (#L12, #L12-L20)",
		"README.md:9: #nothing-here: no heading of README.md has the anchor #nothing-here",
		`README.md:11: <a href="docs/guide.md">: a link written as HTML is not checked; write it as a Markdown link`,
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug_FollowsGitHubsRules(t *testing.T) {
	for heading, want := range map[string]string{
		"A second implementation: `make test-moto`": "a-second-implementation-make-test-moto",
		"The seed's transaction tests":              "the-seeds-transaction-tests",
		"Was this customer billed correctly?":       "was-this-customer-billed-correctly",
		"Levers rejected, and why":                  "levers-rejected-and-why",
		"snake_case and kebab-case stay":            "snake_case-and-kebab-case-stay",
		"Q&A about C++":                             "qa-about-c",
		"Ferry — a ferry":                           "ferry--a-ferry",
		"Straße über Ærø":                           "straße-über-ærø",
		"Version 2.1 (2026)":                        "version-21-2026",
		"  two spaces":                              "--two-spaces",
		"I ♥ billing":                               "i--billing",
		"😀 emoji":                                   "-emoji",
	} {
		if got := doclinks.Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestAnchors_RepeatedHeadings_NumberedAsGitHubDoes(t *testing.T) {
	src := "# Setup\n\n## Setup\n\n## Setup 1\n\n## Setup-1\n\n## Setup\n\nSetup\n-----\n\n```\n# Not a heading\n```\n"
	want := []string{"setup", "setup-1", "setup-1-1", "setup-1-2", "setup-2", "setup-3"}
	if got := doclinks.Anchors([]byte(src)); !slices.Equal(got, want) {
		t.Errorf("Anchors = %q, want %q", got, want)
	}
}
