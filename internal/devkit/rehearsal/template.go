package rehearsal

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Template is a synthesized CloudFormation template, as JSON.
type Template struct {
	Description string                    `json:"Description,omitempty"`
	Parameters  map[string]any            `json:"Parameters,omitempty"`
	Conditions  map[string]any            `json:"Conditions,omitempty"`
	Resources   map[string]Resource       `json:"Resources"`
	Outputs     map[string]map[string]any `json:"Outputs,omitempty"`
	Rules       map[string]any            `json:"Rules,omitempty"`
}

// Resource is one resource of a template.
type Resource struct {
	Type                string         `json:"Type"`
	Properties          map[string]any `json:"Properties,omitempty"`
	DependsOn           any            `json:"DependsOn,omitempty"`
	Metadata            map[string]any `json:"Metadata,omitempty"`
	Condition           string         `json:"Condition,omitempty"`
	DeletionPolicy      string         `json:"DeletionPolicy,omitempty"`
	UpdateReplacePolicy string         `json:"UpdateReplacePolicy,omitempty"`
}

// ReadTemplate reads a template file.
func ReadTemplate(path string) (Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Template{}, err
	}
	var t Template
	if err := json.Unmarshal(raw, &t); err != nil {
		return Template{}, fmt.Errorf("template %s: %w", path, err)
	}
	return t, nil
}

// Assembly is a synthesized cloud assembly (cdk.out): one stack's template and its assets.
type Assembly struct {
	Dir   string
	Stack string
}

// TemplatePath is the stack's template file.
func (a Assembly) TemplatePath() string { return filepath.Join(a.Dir, a.Stack+".template.json") }

// Template reads the stack's template.
func (a Assembly) Template() (Template, error) { return ReadTemplate(a.TemplatePath()) }

// pseudoParameters are CloudFormation's own names, which a Ref may name without declaring them.
var pseudoParameters = map[string]bool{
	"AWS::AccountId": true, "AWS::NotificationARNs": true, "AWS::NoValue": true, "AWS::Partition": true,
	"AWS::Region": true, "AWS::StackId": true, "AWS::StackName": true, "AWS::URLSuffix": true,
}

// subVariable is a ${Name} or ${Name.Attribute} inside an Fn::Sub string (${!Literal} is text).
var subVariable = regexp.MustCompile(`\$\{([^!}][^}]*)\}`)

// CheckReferences reports every Ref, Fn::GetAtt and Fn::Sub variable that names nothing the
// template declares, as CloudFormation does before it creates anything ("Unresolved resource
// dependencies"). moto skips that validation: it resolves an unknown name to nothing and carries
// on, so without this check a broken reference would deploy as an empty value.
func CheckReferences(t Template) error {
	known := func(name string) bool {
		_, res := t.Resources[name]
		_, param := t.Parameters[name]
		return res || param || pseudoParameters[name]
	}
	var errs []error
	var walk func(where string, v any, subVars map[string]bool)
	walk = func(where string, v any, subVars map[string]bool) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["Ref"].(string); ok && !known(ref) {
				errs = append(errs, fmt.Errorf("%s: Ref %s names no resource or parameter", where, ref))
			}
			if att, ok := v["Fn::GetAtt"].([]any); ok && len(att) > 0 {
				if name, _ := att[0].(string); !known(name) {
					errs = append(errs, fmt.Errorf("%s: Fn::GetAtt %v names no resource", where, att))
				}
			}
			if sub, ok := v["Fn::Sub"]; ok {
				text, vars := sub, map[string]bool{}
				if l, ok := sub.([]any); ok && len(l) == 2 {
					text = l[0]
					if m, ok := l[1].(map[string]any); ok {
						for k := range m {
							vars[k] = true
						}
					}
				}
				if s, ok := text.(string); ok {
					for _, m := range subVariable.FindAllStringSubmatch(s, -1) {
						name := strings.SplitN(m[1], ".", 2)[0]
						if !vars[m[1]] && !known(name) && !known(m[1]) {
							errs = append(errs, fmt.Errorf("%s: Fn::Sub variable ${%s} names nothing", where, m[1]))
						}
					}
				}
			}
			for _, k := range sortedKeys(v) {
				walk(where+"."+k, v[k], subVars)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", where, i), x, subVars)
			}
		}
	}
	for _, id := range sortedKeys(t.Resources) {
		r := t.Resources[id]
		walk(id+".Properties", r.Properties, nil)
		for _, dep := range strs(r.DependsOn) {
			if _, ok := t.Resources[dep]; !ok {
				errs = append(errs, fmt.Errorf("%s: DependsOn %s names no resource", id, dep))
			}
		}
	}
	for _, id := range sortedKeys(t.Outputs) {
		walk("Outputs."+id, t.Outputs[id], nil)
	}
	return errors.Join(errs...)
}

//go:embed unmodeled.txt
var unmodeledList string

// Unmodeled returns the resource types listed in unmodeled.txt.
func Unmodeled() map[string]bool {
	out := map[string]bool{}
	s := bufio.NewScanner(strings.NewReader(unmodeledList))
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			out[line] = true
		}
	}
	return out
}

// AccountFor checks that every resource the template declares was created (its logical id in
// created), or is of a type listed as unmodeled; and that every listed type is declared and none
// of its resources was created, so the list cannot keep a type moto has since learned. It
// returns how many resources were created and skipped.
func AccountFor(t Template, created map[string]bool, unmodeled map[string]bool) (made, skipped int, err error) {
	var errs []error
	declared := map[string]bool{}
	for _, id := range sortedKeys(t.Resources) {
		r := t.Resources[id]
		declared[r.Type] = true
		switch {
		case created[id] && unmodeled[r.Type]:
			errs = append(errs, fmt.Errorf("%s (%s) was created, but its type is listed as unmodeled: remove %s from unmodeled.txt", id, r.Type, r.Type))
		case created[id]:
			made++
		case unmodeled[r.Type]:
			skipped++
		default:
			errs = append(errs, fmt.Errorf("%s (%s) was not created, and its type is not listed as unmodeled", id, r.Type))
		}
	}
	for _, typ := range sortedKeys(unmodeled) {
		if !declared[typ] {
			errs = append(errs, fmt.Errorf("unmodeled.txt lists %s, which the template no longer declares: remove it", typ))
		}
	}
	return made, skipped, errors.Join(errs...)
}

// unresolved reports a value CloudFormation resolved to nothing: moto renders a reference to a
// resource it skipped as "None" (Python's), or drops the value.
func unresolved(v string) bool {
	return v == "" || v == "None" || strings.Contains(v, "None.") || strings.Contains(v, "/None") ||
		strings.Contains(v, ":None") || strings.Contains(v, "${")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// strs returns a string or a list of strings as a list.
func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// refs lists the logical ids a value refers to (Ref, Fn::GetAtt), however deeply nested.
func refs(v any) []string {
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["Ref"].(string); ok {
				out = append(out, r)
			}
			if g, ok := v["Fn::GetAtt"].([]any); ok && len(g) > 0 {
				if r, ok := g[0].(string); ok {
					out = append(out, r)
				}
			}
			for _, k := range sortedKeys(v) {
				walk(v[k])
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
