// Package rehearsal deploys Ferry's synthesized CloudFormation stack into moto (its
// CloudFormation, IAM, STS, Lambda, DynamoDB, SQS, S3 and Secrets Manager, on loopback) and runs
// every function against what was created: each binary under AWS's Lambda Runtime Interface
// Emulator, with the environment CloudFormation resolved for it, signing its calls with its own
// role's credentials while moto enforces IAM. It also rehearses an upgrade: the previous
// template deployed, then updated to the current one, with nothing that holds data replaced.
//
// It is tooling (`make deploy-rehearsal`); no function imports it. docs/deploy-rehearsal.md says
// what it checks and what moto does not model.
package rehearsal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Options name what a rehearsal needs.
type Options struct {
	// Python runs scripts/rehearsal_server.py (the rehearsal virtualenv's interpreter).
	Python, Server string
	// Assembly is the bundled cloud assembly to deploy.
	Assembly Assembly
	// RIE is the Lambda Runtime Interface Emulator; Build holds <function>/bootstrap built for
	// this machine from the same sources as the assembly's assets.
	RIE, Build string
	// Testdata is the fixtures' folder.
	Testdata string
	// Mutate, when set, changes the template before it is deployed (the tests' failures).
	Mutate func(*Template)
	// PlaceholderAssets uploads empty zips in place of the functions' code. The functions run
	// from Build either way (this machine's architecture); the real assets are uploaded to prove
	// the template finds them, which one rehearsal of a commit is enough for.
	PlaceholderAssets bool
	// Log receives one line per step.
	Log func(format string, args ...any)
}

// Report is what a rehearsal counted.
type Report struct {
	Resources, Created, Unmodeled int
	Assets                        int
	Functions                     int
	OutputsChecked                int
	Deploy, Drive                 time.Duration
}

// Rehearse deploys the assembly's stack into a moto of its own, accounts for every resource,
// checks what CloudFormation resolved, and drives the functions with IAM enforced. Any failure
// is returned with what the failing function logged.
func Rehearse(ctx context.Context, o Options) (Report, error) {
	var rep Report
	tmpl, raw, err := loadTemplate(o.Assembly, o.Mutate)
	if err != nil {
		return rep, err
	}
	rep.Resources = len(tmpl.Resources)
	if err := CheckReferences(tmpl); err != nil {
		return rep, fmt.Errorf("the template does not resolve (CloudFormation would refuse it):\n%w", err)
	}
	m, err := StartMoto(o.Python, o.Server)
	if err != nil {
		return rep, err
	}
	defer m.Stop()
	start := time.Now()
	stack, err := deploy(ctx, m, o.Assembly, raw, o.PlaceholderAssets)
	if err != nil {
		return rep, fmt.Errorf("%w\nmoto's log:\n%s", err, tail(m.Log()))
	}
	rep.Deploy = time.Since(start)
	made, skipped, err := AccountFor(tmpl, stack.Created(), Unmodeled())
	rep.Created, rep.Unmodeled = made, skipped
	if err != nil {
		return rep, fmt.Errorf("every resource accounted for: %w", err)
	}
	o.Log("%d resources: %d created, %d of types moto does not model (unmodeled.txt), in %s", rep.Resources, made, skipped, rep.Deploy.Round(time.Millisecond))
	if rep.OutputsChecked, err = CheckOutputs(tmpl, stack, Unmodeled()); err != nil {
		return rep, err
	}
	d := &Drive{Moto: m, Template: tmpl, Stack: stack, RIE: o.RIE, Build: o.Build, Testdata: o.Testdata, Log: o.Log}
	if err := d.Prepare(ctx); err != nil {
		return rep, fmt.Errorf("the functions as CloudFormation created them:\n%w", err)
	}
	rep.Functions = len(d.functions)
	o.Log("%d functions: every variable of their environments resolved; %d outputs resolved; each function's role assumed", rep.Functions, rep.OutputsChecked)
	if err := m.EnforceIAM(ctx); err != nil {
		return rep, err
	}
	o.Log("IAM enforced: every call is signed and checked against its caller's policies")
	start = time.Now()
	if err := d.Run(ctx); err != nil {
		return rep, err
	}
	rep.Drive = time.Since(start)
	return rep, nil
}

// deploy bootstraps moto as `cdk bootstrap` would, uploads the assets and creates the stack.
func deploy(ctx context.Context, m *Moto, a Assembly, template []byte, placeholders bool) (Stack, error) {
	if err := m.CreateAdmin(ctx); err != nil {
		return Stack{}, err
	}
	c := m.Admin()
	if err := Bootstrap(ctx, c); err != nil {
		return Stack{}, err
	}
	if _, err := UploadAssets(ctx, c, a, placeholders); err != nil {
		return Stack{}, err
	}
	if err := CreateStack(ctx, c, a.Stack, template); err != nil {
		return Stack{}, err
	}
	return DescribeStack(ctx, c, a.Stack)
}

func loadTemplate(a Assembly, mutate func(*Template)) (Template, []byte, error) {
	raw, err := os.ReadFile(a.TemplatePath())
	if err != nil {
		return Template{}, nil, err
	}
	tmpl, err := a.Template()
	if err != nil {
		return Template{}, nil, err
	}
	if mutate != nil {
		mutate(&tmpl)
		if raw, err = marshal(tmpl); err != nil {
			return Template{}, nil, err
		}
	}
	return tmpl, raw, nil
}

// tail keeps the end of a long log, from its last Python traceback if it has one.
func tail(s string) string {
	const keep = 4000
	if i := strings.LastIndex(s, "Traceback (most recent call last)"); i >= 0 {
		s = s[i:]
	}
	if len(s) > keep {
		return "…" + s[len(s)-keep:]
	}
	return s
}

// IsAccessDenied reports whether err is a function's failure whose logs show AWS refusing a call
// for want of a grant. moto answers a refused JSON-protocol call (SQS, DynamoDB) with a 403 and
// an XML body the SDK cannot decode, so the status is what the function logs then.
func IsAccessDenied(err error) bool {
	var fe *FunctionError
	return errors.As(err, &fe) && containsAny(fe.Logs, "AccessDenied", "not authorized to perform", "StatusCode: 403")
}
