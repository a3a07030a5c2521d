// Package house checks the shape of Ferry's tree: production code (what a Lambda function runs:
// functions/ and internal/ outside internal/devkit/) never imports the tooling under
// internal/devkit/, and only the api function, which serves the operator console, links the
// console and its labs.
package house

import (
	"fmt"
	"sort"
	"strings"
)

// Module is Ferry's module path.
const Module = "github.com/ferrymeter/ferry"

// Folders of the tree the rules name, under the module.
const (
	functionsDir = "functions"
	devkitDir    = "internal/devkit"
	// consoleDirs are linked only by the function that serves the console.
	consoleDir = "internal/operator/console"
	labDir     = "internal/operator/lab"
	// consoleFunction serves the operator console and runs its labs.
	consoleFunction = "functions/api"
)

// Package is one package of the tree and every package it links, as `go list -deps` reports them.
type Package struct {
	ImportPath string
	Deps       []string
}

// Rel is a package's path inside the module ("internal/holds"), or "" for one outside it.
func Rel(importPath string) string {
	if importPath == Module {
		return "."
	}
	rel, ok := strings.CutPrefix(importPath, Module+"/")
	if !ok {
		return ""
	}
	return rel
}

func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

// Production reports whether a package is production code: a function or a package under
// internal/ that is not tooling.
func Production(rel string) bool {
	return under(rel, functionsDir) || (under(rel, "internal") && !under(rel, devkitDir))
}

// Check returns every way pkgs break the house's rules: a production package that links tooling,
// and a function other than the console's that links the console or its labs.
func Check(pkgs []Package) []error {
	var errs []error
	for _, p := range pkgs {
		rel := Rel(p.ImportPath)
		if !Production(rel) {
			continue
		}
		// The console's function links it; so may a package that is no function (the registry
		// functions/ lists every builder for ferry dev and the tests, and runs in no Lambda).
		consoleAllowed := under(rel, consoleFunction) || !under(rel, functionsDir) || rel == functionsDir
		var tooling, console []string
		for _, d := range p.Deps {
			dr := Rel(d)
			switch {
			case dr == "":
			case under(dr, devkitDir):
				tooling = append(tooling, dr)
			case !consoleAllowed && (under(dr, consoleDir) || under(dr, labDir)):
				console = append(console, dr)
			}
		}
		if len(tooling) > 0 {
			sort.Strings(tooling)
			errs = append(errs, fmt.Errorf("production package %s links the tooling tree: %s", rel, strings.Join(tooling, ", ")))
		}
		if len(console) > 0 {
			sort.Strings(console)
			errs = append(errs, fmt.Errorf("%s links the console, which only %s serves: %s", rel, consoleFunction, strings.Join(console, ", ")))
		}
	}
	return errs
}
