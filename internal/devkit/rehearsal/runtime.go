package rehearsal

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// Bounds of one function run under the emulator.
const (
	rieStartTimeout = 10 * time.Second
	invokeTimeout   = 60 * time.Second
	rieStopTimeout  = 5 * time.Second
	// roleSessionDuration outlasts a rehearsal by far; Lambda's own sessions last 12 hours.
	roleSessionDuration = time.Hour
)

// Function is one function as CloudFormation created it: what Lambda would start it with.
type Function struct {
	Name       string
	Arn        string
	RoleArn    string
	Env        map[string]string
	TimeoutS   int32
	MemoryMB   int32
	Creds      aws.Credentials
	Bootstrap  string
	TemplateID string
}

// LoadFunction reads a created function's configuration from moto's Lambda, the environment
// exactly as CloudFormation resolved it, and takes its role's credentials as Lambda would (STS
// AssumeRole; moto's trust-policy check cannot express a service principal, so this runs before
// IAM is enforced). build holds <name>/bootstrap for this machine.
func LoadFunction(ctx context.Context, c Clients, physical, logical, build string) (Function, error) {
	out, err := c.Lambda.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(physical)})
	if err != nil {
		return Function{}, fmt.Errorf("function %s: %w", physical, err)
	}
	fn := Function{
		Name: aws.ToString(out.FunctionName), Arn: aws.ToString(out.FunctionArn), RoleArn: aws.ToString(out.Role),
		Env: map[string]string{}, TimeoutS: aws.ToInt32(out.Timeout), MemoryMB: aws.ToInt32(out.MemorySize), TemplateID: logical,
	}
	if out.Environment != nil {
		for k, v := range out.Environment.Variables {
			fn.Env[k] = v
		}
	}
	role, err := c.STS.AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn: aws.String(fn.RoleArn), RoleSessionName: aws.String(fn.Name), DurationSeconds: aws.Int32(int32(roleSessionDuration / time.Second)),
	})
	if err != nil {
		return Function{}, fmt.Errorf("assume the role of %s: %w", fn.Name, err)
	}
	fn.Creds = aws.Credentials{
		AccessKeyID: aws.ToString(role.Credentials.AccessKeyId), SecretAccessKey: aws.ToString(role.Credentials.SecretAccessKey),
		SessionToken: aws.ToString(role.Credentials.SessionToken),
	}
	fn.Bootstrap = filepath.Join(build, functionDirName(fn.Name), "bootstrap")
	return fn, nil
}

// functionDirName is a function's folder under functions/ (and the build): its physical name
// is "<stack prefix>-<name>".
func functionDirName(physical string) string {
	for i := len(physical) - 1; i >= 0; i-- {
		if physical[i] == '-' {
			return physical[i+1:]
		}
	}
	return physical
}

// environment is what Lambda gives the process: the function's variables, its role's
// credentials and Lambda's own variables; and, in place of AWS's endpoints, moto's, through the
// SDK's standard AWS_ENDPOINT_URL (not Ferry's FERRY_*_ENDPOINT, which switch to test
// credentials).
func (f Function) environment(motoURL string) []string {
	env := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range f.Env {
		env = append(env, k+"="+v)
	}
	return append(env,
		"AWS_REGION="+Region, "AWS_DEFAULT_REGION="+Region,
		"AWS_ACCESS_KEY_ID="+f.Creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+f.Creds.SecretAccessKey,
		"AWS_SESSION_TOKEN="+f.Creds.SessionToken,
		"AWS_ENDPOINT_URL="+motoURL,
		"AWS_LAMBDA_FUNCTION_NAME="+f.Name,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE="+strconv.Itoa(int(f.MemoryMB)),
		"AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(int(f.TimeoutS)),
	)
}

// Invocation is one function's answer and everything it logged.
type Invocation struct {
	Answer []byte
	Logs   string
}

// FunctionError is a function's failure: the runtime's error, or an answer the rehearsal did
// not want, with the function's logs.
type FunctionError struct {
	Function string
	Reason   string
	Logs     string
}

func (e *FunctionError) Error() string {
	return fmt.Sprintf("%s: %s\n--- %s's output ---\n%s", e.Function, e.Reason, e.Function, e.Logs)
}

// Invoke boots the function's bootstrap under AWS's Lambda Runtime Interface Emulator with the
// function's environment, sends event once and returns the answer. A runtime error is a
// FunctionError.
func Invoke(ctx context.Context, rie string, f Function, motoURL string, event []byte) (Invocation, error) {
	if _, err := os.Stat(f.Bootstrap); err != nil {
		return Invocation{}, fmt.Errorf("no build of %s at %s: %w", f.Name, f.Bootstrap, err)
	}
	addr, err := freeAddr()
	if err != nil {
		return Invocation{}, err
	}
	runtimeAddr, err := freeAddr()
	if err != nil {
		return Invocation{}, err
	}
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr, "--runtime-api-address", runtimeAddr, f.Bootstrap)
	cmd.Env = append(f.environment(motoURL), "HOME="+os.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return Invocation{}, fmt.Errorf("start the emulator: %w", err)
	}
	defer stopProcess(cmd)
	if err := waitListening(addr); err != nil {
		return Invocation{}, &FunctionError{Function: f.Name, Reason: err.Error(), Logs: logs.String()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/2015-03-31/functions/function/invocations", bytes.NewReader(event))
	if err != nil {
		return Invocation{}, err
	}
	resp, err := (&http.Client{Timeout: invokeTimeout}).Do(req)
	if err != nil {
		return Invocation{}, &FunctionError{Function: f.Name, Reason: "invoke: " + err.Error(), Logs: logs.String()}
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return Invocation{}, err
	}
	// Let the function's last log lines arrive.
	time.Sleep(50 * time.Millisecond)
	inv := Invocation{Answer: answer, Logs: logs.String()}
	var failure struct {
		ErrorMessage string `json:"errorMessage"`
		ErrorType    string `json:"errorType"`
	}
	if json.Unmarshal(answer, &failure) == nil && failure.ErrorType != "" {
		return inv, &FunctionError{Function: f.Name, Reason: failure.ErrorType + ": " + failure.ErrorMessage, Logs: inv.Logs}
	}
	return inv, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func waitListening(addr string) error {
	deadline := time.Now().Add(rieStartTimeout)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the emulator did not listen on %s within %s", addr, rieStartTimeout)
}

// stopProcess ends a process group by its id: a terminate, then a kill if it lingers.
func stopProcess(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(rieStopTimeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}
