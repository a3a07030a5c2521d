package house

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// tree lists every package of the module with what it links (`go list -deps -json`).
func tree(t *testing.T) []Package {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "list", "-json=ImportPath,Deps", "./...")
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var pkgs []Package
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// No production package links the tooling tree, and only the api function links the console.
func TestHouse_ProductionNeverLinksTheTooling(t *testing.T) {
	pkgs := tree(t)
	production, functions := 0, 0
	for _, p := range pkgs {
		if Production(Rel(p.ImportPath)) {
			production++
		}
		if strings.HasSuffix(p.ImportPath, "/bootstrap") {
			functions++
		}
	}
	// The check is only as good as the list it reads: it must see the whole tree.
	if production < 40 || functions < 12 {
		t.Fatalf("go list saw %d production packages and %d functions; is the tree what this test thinks it is?", production, functions)
	}
	for _, err := range Check(pkgs) {
		t.Error(err)
	}
}

// The check finds each kind of breach in a tree that has one.
func TestCheck_FindsEachBreach(t *testing.T) {
	m := func(rel string) string { return Module + "/" + rel }
	cases := []struct {
		name string
		pkg  Package
		want string
	}{
		{"a domain package importing a stand-in", Package{m("internal/holds"), []string{m("internal/devkit/standin/kinde")}},
			"production package internal/holds links the tooling tree: internal/devkit/standin/kinde"},
		{"a function linking the harness", Package{m("functions/worker/bootstrap"), []string{m("internal/metering/worker"), m("internal/devkit/harness")}},
			"production package functions/worker/bootstrap links the tooling tree: internal/devkit/harness"},
		{"a function other than api linking the labs", Package{m("functions/ingest/bootstrap"), []string{m("internal/operator/lab")}},
			"functions/ingest/bootstrap links the console, which only functions/api serves: internal/operator/lab"},
	}
	for _, c := range cases {
		errs := Check([]Package{c.pkg})
		if len(errs) != 1 || errs[0].Error() != c.want {
			t.Errorf("%s: %v; want %q", c.name, errs, c.want)
		}
	}
	fine := []Package{
		{m("functions/api/bootstrap"), []string{m("internal/operator/console"), m("internal/operator/lab")}},
		{m("internal/devkit/harness"), []string{m("internal/devkit/devstack")}},
		{m("cmd/ferry"), []string{m("internal/devkit/bench")}},
	}
	if errs := Check(fine); len(errs) != 0 {
		t.Errorf("a tree within the rules: %v", errs)
	}
}
