// Command infra is Ferry's AWS CDK app. `cdk synth` / `cdk deploy` run it (cdk.json at the
// repository root); `make synth` and `make deploy` wrap those. Everything it deploys is derived
// from internal/platform/resources and internal/platform/metrics, and its settings come from CDK context:
//
//	cdk deploy -c stage=prod -c alarmEmail=ops@example.com -c plansFile=plans.json
//
// See infra/README.md for every context key and its default.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// modulePath identifies Ferry's go.mod when looking for the module root.
const modulePath = "github.com/ferrymeter/ferry"

func main() {
	err := run()
	jsii.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
}

func run() error {
	app := awscdk.NewApp(nil)
	cfg, err := ConfigFromContext(func(key string) any { return app.Node().TryGetContext(jsii.String(key)) })
	if err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if _, err := NewFerryStack(app, StackName(cfg.Stage), &FerryStackProps{
		Config:      cfg,
		Definitions: DefaultDefinitions(),
		SourceRoot:  root,
	}); err != nil {
		return err
	}
	app.Synth(nil)
	return nil
}

// StackName is the CloudFormation stack of a stage: "ferry-prod".
func StackName(stage string) string { return "ferry-" + stage }

// moduleRoot finds Ferry's module root at or above the working directory: `cdk` runs the app
// from the repository root, `go test` from infra/.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isFerryModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the Ferry module: no go.mod for " + modulePath + " at or above the working directory")
		}
		dir = parent
	}
}

func isFerryModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module ")) == modulePath
		}
	}
	return false
}
