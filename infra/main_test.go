package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// Stops the CDK runtime and removes its temporary folder.
	jsii.Close()
	os.Exit(code)
}

// bundlingStacksKey is CDK's context key naming the stacks whose assets are bundled; an empty
// list skips bundling, so template tests do not build the functions.
const bundlingStacksKey = "aws:cdk:bundling-stacks"

// synthesized is one synthesized stack: its configuration, its template for assertions and the
// same template as plain JSON for the checks assertions cannot express.
type synthesized struct {
	cfg  Config
	tmpl assertions.Template
	json map[string]any
}

var synthCache = map[string]*synthesized{}

// synthStage synthesizes the stack for a context, without bundling, once per context.
func synthStage(t *testing.T, ctx map[string]any) *synthesized {
	t.Helper()
	key := fmt.Sprint(ctx) // fmt prints maps sorted by key
	if s, ok := synthCache[key]; ok {
		return s
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	s := synthWith(t, ctx, DefaultDefinitions(), root, false)
	synthCache[key] = s
	return s
}

// synthWith synthesizes the stack for a context, definitions and source root.
func synthWith(t *testing.T, ctx map[string]any, defs Definitions, root string, bundle bool) *synthesized {
	t.Helper()
	s, err := trySynth(ctx, defs, root, bundle, "")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func trySynth(ctx map[string]any, defs Definitions, root string, bundle bool, outdir string) (*synthesized, error) {
	appCtx := map[string]any{}
	for k, v := range ctx {
		appCtx[k] = v
	}
	if !bundle {
		appCtx[bundlingStacksKey] = []any{}
	}
	props := &awscdk.AppProps{Context: &appCtx}
	if outdir != "" {
		props.Outdir = jsii.String(outdir)
	}
	app := awscdk.NewApp(props)
	cfg, err := ConfigFromContext(func(key string) any { return app.Node().TryGetContext(jsii.String(key)) })
	if err != nil {
		return nil, err
	}
	stack, err := NewFerryStack(app, StackName(cfg.Stage), &FerryStackProps{Config: cfg, Definitions: defs, SourceRoot: root})
	if err != nil {
		return nil, err
	}
	tmpl := assertions.Template_FromStack(stack, nil)
	return &synthesized{cfg: cfg, tmpl: tmpl, json: *tmpl.ToJSON()}, nil
}

var (
	dev  = map[string]any{}
	prod = map[string]any{ctxStage: "prod"}
)

// check runs CDK assertions; a failed assertion panics, and check reports it as this test's
// failure instead of ending the whole test binary.
func check(t *testing.T, assert func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%v", r)
		}
	}()
	assert()
}

// Helpers over the template's JSON.

type object = map[string]any

func obj(m object) *map[string]any { return &m }

func like(m object) assertions.Matcher { return assertions.Match_ObjectLike(obj(m)) }

func arrayWith(items ...any) assertions.Matcher { return assertions.Match_ArrayWith(&items) }

// resourcesOfType returns the resources of one type by logical id.
func (s *synthesized) resourcesOfType(typ string) map[string]object {
	out := map[string]object{}
	for id, r := range s.json["Resources"].(object) {
		if res := r.(object); res["Type"] == typ {
			out[id] = res
		}
	}
	return out
}

// id returns the logical id of the one resource of a type whose properties match.
func (s *synthesized) id(t *testing.T, typ string, props object) string {
	t.Helper()
	var id string
	check(t, func() { id = *s.tmpl.GetResourceId(jsii.String(typ), like(object{"Properties": like(props)})) })
	return id
}

func props(r object) object {
	p, _ := r["Properties"].(object)
	return p
}

// refs lists the logical ids a value refers to (Ref, Fn::GetAtt), however deeply nested.
func refs(v any) []string {
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case object:
			if r, ok := v["Ref"].(string); ok {
				out = append(out, r)
			}
			if g, ok := v["Fn::GetAtt"].([]any); ok && len(g) > 0 {
				if r, ok := g[0].(string); ok {
					out = append(out, r)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

func refersTo(v any, id string) bool {
	for _, r := range refs(v) {
		if r == id {
			return true
		}
	}
	return false
}

// strs returns a string or a list of strings as a list.
func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// list returns a value as a list: CloudFormation accepts a single item or a list in many places.
func list(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	if v == nil {
		return nil
	}
	return []any{v}
}

// flatJoin renders an Fn::Join of strings and references as text with {id} for each reference,
// so a test can look for "/index/byAccount" inside an ARN.
func flatJoin(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case object:
		if j, ok := v["Fn::Join"].([]any); ok && len(j) == 2 {
			var b strings.Builder
			for _, part := range list(j[1]) {
				b.WriteString(flatJoin(part))
			}
			return b.String()
		}
		return "{" + strings.Join(refs(v), ",") + "}"
	}
	return ""
}

func sortedSet(items []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range items {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}
