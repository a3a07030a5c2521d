package rehearsal

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Environment `make deploy-rehearsal` sets; without it the rehearsal's own tests are skipped
// and only the checks on hand-made templates run.
const (
	envPython   = "FERRY_REHEARSAL_PYTHON"   // the rehearsal virtualenv's python
	envAssembly = "FERRY_REHEARSAL_ASSEMBLY" // the bundled cloud assembly of this commit
	envPrevious = "FERRY_REHEARSAL_PREVIOUS" // the previous release's assembly (no bundling)
	envStack    = "FERRY_REHEARSAL_STACK"    // the stack's name in both
	envRIE      = "FERRY_RIE"
	envBuild    = "FERRY_LAMBDA_BUILD"
)

// rehearsalTimeout bounds one rehearsal: a deploy takes seconds, each function's run about one.
const rehearsalTimeout = 5 * time.Minute

func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func options(t *testing.T) Options {
	t.Helper()
	python, assembly, stack := os.Getenv(envPython), os.Getenv(envAssembly), os.Getenv(envStack)
	rie, build := os.Getenv(envRIE), os.Getenv(envBuild)
	if python == "" || assembly == "" || stack == "" || rie == "" || build == "" {
		t.Skipf("%s, %s, %s, %s and %s are unset: run make deploy-rehearsal", envPython, envAssembly, envStack, envRIE, envBuild)
	}
	root := moduleRoot(t)
	return Options{
		Python: python, Server: filepath.Join(root, "scripts", "rehearsal_server.py"),
		Assembly: Assembly{Dir: assembly, Stack: stack}, RIE: rie, Build: build,
		Testdata: filepath.Join(root, "testdata"), Log: t.Logf,
	}
}

func rehearse(t *testing.T, o Options) (Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rehearsalTimeout)
	defer cancel()
	return Rehearse(ctx, o)
}

// The whole rehearsal: the stack created, every resource accounted for, every function run
// against what was created, with IAM enforced.
func TestRehearsal_TheStackDeploysAndEveryFunctionRuns(t *testing.T) {
	o := options(t)
	rep, err := rehearse(t, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("deployed in %s, drove in %s: %+v", rep.Deploy.Round(time.Millisecond), rep.Drive.Round(time.Millisecond), rep)
}

// A role without one grant it needs: the function's call is refused as AWS would refuse it, and
// the rehearsal fails naming the function.
func TestRehearsal_MissingGrantFails(t *testing.T) {
	o := options(t)
	o.PlaceholderAssets = true
	removed := ""
	o.Mutate = func(tm *Template) { removed = removeStatement(t, tm, "QueueEventsSend", "Ingest") }
	_, err := rehearse(t, o)
	if err == nil {
		t.Fatalf("the rehearsal passed without %s", removed)
	}
	if !IsAccessDenied(err) || !strings.Contains(err.Error(), "-ingest") {
		t.Fatalf("the rehearsal failed, but not with ingest's AccessDenied: %v", err)
	}
	t.Logf("without %s the rehearsal fails: %s", removed, firstLine(err))
}

// removeStatement deletes the statement with this Sid from the policy of the role whose logical
// id contains role, and names it.
func removeStatement(t *testing.T, tm *Template, sid, role string) string {
	t.Helper()
	for id, r := range tm.Resources {
		if r.Type != "AWS::IAM::Policy" || !strings.Contains(id, role) {
			continue
		}
		doc := r.Properties["PolicyDocument"].(map[string]any)
		var kept []any
		for _, st := range doc["Statement"].([]any) {
			if st.(map[string]any)["Sid"] != sid {
				kept = append(kept, st)
			}
		}
		if len(kept) < len(doc["Statement"].([]any)) {
			doc["Statement"] = kept
			return id + "'s statement " + sid
		}
	}
	t.Fatalf("no policy of a %s role has a statement %s", role, sid)
	return ""
}

// A reference that does not resolve fails the rehearsal, naming it: one to a name the template
// does not declare (CloudFormation would refuse the template; moto would deploy it with the
// value missing), and one to a resource moto does not create (it resolves to nothing).
func TestRehearsal_UnresolvedReferenceFails(t *testing.T) {
	o := options(t)
	o.PlaceholderAssets = true
	cases := map[string]struct {
		mutate func(*Template)
		want   string
	}{
		"undeclared": {func(tm *Template) {
			setVariable(t, tm, "Api", "FERRY_NOWHERE", map[string]any{"Ref": "NoSuchResource"})
		}, "Ref NoSuchResource names no resource or parameter"},
		"not created": {func(tm *Template) {
			for id, r := range tm.Resources {
				if r.Type == "AWS::ApiGatewayV2::Api" {
					setVariable(t, tm, "Api", "FERRY_HTTP_API", map[string]any{"Ref": id})
					return
				}
			}
			t.Fatal("no HTTP API in the template")
		}, "FERRY_HTTP_API resolved to"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			o.Mutate = c.mutate
			_, err := rehearse(t, o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v; want %q", err, c.want)
			}
			t.Logf("the rehearsal fails: %v", err)
		})
	}
}

func setVariable(t *testing.T, tm *Template, function, name string, value any) {
	t.Helper()
	for id, r := range tm.Resources {
		if r.Type == "AWS::Lambda::Function" && strings.Contains(id, "Functions"+function+"Function") {
			r.Properties["Environment"].(map[string]any)["Variables"].(map[string]any)[name] = value
			return
		}
	}
	t.Fatalf("no function %s", function)
}

func upgradeOptions(t *testing.T) UpgradeOptions {
	t.Helper()
	o := options(t)
	previous := os.Getenv(envPrevious)
	if previous == "" {
		t.Skipf("%s is unset: run make deploy-rehearsal", envPrevious)
	}
	return UpgradeOptions{
		Python: o.Python, Server: o.Server, Previous: Assembly{Dir: previous, Stack: o.Assembly.Stack},
		Current: o.Assembly, Log: t.Logf,
	}
}

// The previous template deployed, then updated to this one: nothing that holds data replaced,
// and what the tables and the bucket held before is there after.
func TestUpgrade_NothingThatHoldsDataIsReplaced(t *testing.T) {
	o := upgradeOptions(t)
	ctx, cancel := context.WithTimeout(context.Background(), rehearsalTimeout)
	defer cancel()
	rep, err := RehearseUpgrade(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
}

// An update that would replace a table fails: a renamed logical id, a changed key.
func TestUpgrade_ReplacingATableFails(t *testing.T) {
	o := upgradeOptions(t)
	cases := map[string]func(*Template){
		"renamed logical id": func(tm *Template) {
			for id, r := range tm.Resources {
				if r.Type == "AWS::DynamoDB::Table" && strings.Contains(id, "Ledger") {
					delete(tm.Resources, id)
					tm.Resources[id+"Renamed"] = r
					replaceRefs(tm, id, id+"Renamed")
					return
				}
			}
		},
		"renamed key": func(tm *Template) {
			for id, r := range tm.Resources {
				if r.Type == "AWS::DynamoDB::Table" && strings.Contains(id, "Ledger") {
					ks := r.Properties["KeySchema"].([]any)
					old := ks[0].(map[string]any)["AttributeName"].(string)
					ks[0].(map[string]any)["AttributeName"] = old + "Renamed"
					for _, d := range r.Properties["AttributeDefinitions"].([]any) {
						if d.(map[string]any)["AttributeName"] == old {
							d.(map[string]any)["AttributeName"] = old + "Renamed"
						}
					}
					return
				}
			}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			o.Mutate = mutate
			ctx, cancel := context.WithTimeout(context.Background(), rehearsalTimeout)
			defer cancel()
			_, err := RehearseUpgrade(ctx, o)
			if err == nil || !strings.Contains(err.Error(), "would replace") {
				t.Fatalf("err = %v; want the replacement refused", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// replaceRefs points every Ref and Fn::GetAtt of one logical id at another.
func replaceRefs(tm *Template, from, to string) {
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			if v["Ref"] == from {
				v["Ref"] = to
			}
			if g, ok := v["Fn::GetAtt"].([]any); ok && len(g) > 0 && g[0] == from {
				g[0] = to
			}
			for k, x := range v {
				v[k] = walk(x)
			}
		case []any:
			for i, x := range v {
				v[i] = walk(x)
			}
		case string:
			if v == from {
				return to
			}
		}
		return v
	}
	for id, r := range tm.Resources {
		r.Properties = walk(r.Properties).(map[string]any)
		if d, ok := r.DependsOn.([]any); ok {
			r.DependsOn = walk(d)
		}
		tm.Resources[id] = r
	}
	for id, o := range tm.Outputs {
		tm.Outputs[id] = walk(map[string]any(o)).(map[string]any)
	}
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
