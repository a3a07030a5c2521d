package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3assets"
	"github.com/aws/jsii-runtime-go"
)

// functionsDir holds one folder per Lambda function: functions/<name>/ composes it, and
// functions/<name>/bootstrap/ is its main package, the binary Lambda runs.
const functionsDir = "functions"

// mainDir is the folder of a function's main package, under its own folder.
const mainDir = "bootstrap"

// goBuildFlags build a small static binary for Lambda's provided.al2023 runtime on Graviton.
// lambda.norpc leaves out the RPC server only the retired go1.x runtime needed.
var goBuildFlags = []string{"build", "-tags", "lambda.norpc", "-trimpath", "-buildvcs=false", "-ldflags=-s -w"}

// goBuildEnv is added to the build's environment.
var goBuildEnv = []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"}

// hashedDirs are the folders whose Go files make up every function's build; with go.mod and
// go.sum they decide whether a function's code changed.
var hashedDirs = []string{functionsDir, "internal"}

// goFunctionCode returns the code of functions/<name>, built by the returned bundler when CDK
// stages the asset. The asset's hash is computed from the Go sources (sourceDigest), so CDK
// neither hashes the whole repository (tool folders included) nor needs Docker.
func goFunctionCode(root, digest, name string) (awslambda.Code, *goBundler) {
	bundler := &goBundler{root: root, name: name}
	code := awslambda.Code_FromAsset(jsii.String(functionDir(root, name)), &awss3assets.AssetOptions{
		AssetHash:     jsii.String(functionAssetHash(digest, name)),
		AssetHashType: awscdk.AssetHashType_CUSTOM,
		Bundling: &awscdk.BundlingOptions{
			// Required by the API but never pulled: the local bundler always handles the build.
			Image: awscdk.DockerImage_FromRegistry(jsii.String("local-go-build-only")),
			Local: bundler,
		},
	})
	return code, bundler
}

func functionDir(root, name string) string { return filepath.Join(root, functionsDir, name) }

// checkFunctionSources reports a function whose folder has no Go code, before CDK would report
// it as a missing asset or a failed build.
func checkFunctionSources(root, name string) error {
	matches, err := filepath.Glob(filepath.Join(functionDir(root, name), mainDir, "*.go"))
	if err != nil {
		return err
	}
	if len(matches) == 0 {
		return fmt.Errorf("function %q: no Go files in %s; every function in resources.Functions needs a main package there", name, filepath.Join(functionDir(root, name), mainDir))
	}
	return nil
}

// goBundler builds one function with the local Go toolchain. CDK calls TryBundle with the folder
// the asset must end up in.
type goBundler struct {
	root string
	name string
	// err is the failed build, if any. A panic inside a jsii callback leaves the CDK runtime in
	// a bad state, so TryBundle records the error and leaves the folder empty; CDK then refuses
	// the empty asset, and the caller reports err instead of CDK's message.
	err error
}

// TryBundle implements awscdk.ILocalBundling. It always reports the asset handled: falling back
// to Docker is neither wanted nor possible here.
func (b *goBundler) TryBundle(outputDir *string, _ *awscdk.BundlingOptions) *bool {
	b.err = b.build(*outputDir)
	return jsii.Bool(true)
}

func (b *goBundler) build(outputDir string) error {
	args := append(append([]string{}, goBuildFlags...), "-o", filepath.Join(outputDir, "bootstrap"), "./"+functionsDir+"/"+b.name+"/"+mainDir)
	cmd := exec.Command("go", args...)
	cmd.Dir = b.root
	cmd.Env = append(os.Environ(), goBuildEnv...)
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build function %q (go %s): %w\n%s", b.name, strings.Join(args, " "), err, out.String())
	}
	return nil
}

// sourceDigest hashes everything that goes into a function's binary: go.mod, go.sum and the
// non-test Go files under functions/ and internal/, each with its path. Test files and testdata
// are left out so a change to a test does not redeploy every function.
func sourceDigest(root string) (string, error) {
	files := []string{"go.mod", "go.sum"}
	for _, dir := range hashedDirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) && path == filepath.Join(root, dir) {
					return fs.SkipDir
				}
				return err
			}
			if d.IsDir() {
				if skipDir(d.Name()) && path != filepath.Join(root, dir) {
					return fs.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				rel, err := filepath.Rel(root, path)
				if err != nil {
					return err
				}
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("hash function sources: %w", err)
		}
	}
	sort.Strings(files)
	h := sha256.New()
	for _, rel := range files {
		if err := hashFile(h, root, rel); err != nil {
			return "", fmt.Errorf("hash function sources: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// skipDir names folders the go command ignores too.
func skipDir(name string) bool {
	return name == "testdata" || strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".")
}

func hashFile(h io.Writer, root, rel string) error {
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	// Path and length frame each file, so moving code between files changes the digest.
	fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), info.Size())
	_, err = io.Copy(h, f)
	return err
}

// functionAssetHash is one function's asset hash: the source digest, the function's name (each
// function is its own asset), how it is built and the Go release that builds it.
func functionAssetHash(digest, name string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s", digest, name, strings.Join(goBuildFlags, " "), strings.Join(goBuildEnv, " "), runtime.Version())
	return hex.EncodeToString(h.Sum(nil))
}
