// Package functions_test boots every function binary, as `make build` builds it, under AWS's
// Lambda Runtime Interface Emulator with the environment the CDK app gives it, and sends it one
// real invocation: the lambda.Start path, the configuration read at cold start and the handler,
// as Lambda runs them, before anyone deploys. `make test-lambda` builds the binaries for this
// machine's architecture and the emulator into _tools/, and runs it.
package functions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Environment the make target sets.
const (
	// envRIE is the path of the aws-lambda-rie binary.
	envRIE = "FERRY_RIE"
	// envLambdaBuild is the folder holding <function>/bootstrap.
	envLambdaBuild = "FERRY_LAMBDA_BUILD"
)

// Bounds of one boot.
const (
	rieStartTimeout  = 10 * time.Second
	invokeTimeout    = 30 * time.Second
	rieStopTimeout   = 5 * time.Second
	operatorKey      = "dev-admin-key" // the key the API Gateway fixtures carry
	fixtureAccountID = "acct_fixture"
	// stripeSecret is the webhooks function's Stripe signing secret here, in place of its
	// secret's ARN.
	stripeSecret = "whsec_lambda_test"
)

// invocation is one real invocation of one function.
type invocation struct {
	function string
	// fixture is the event, under testdata.
	fixture string
	// event adjusts the fixture before it is sent (the account's key, known only at run time).
	event func(raw []byte) []byte
	// check judges the function's answer.
	check func(t *testing.T, answer []byte)
}

// TestLambdaRuntime_EveryFunctionBootsAndAnswersOneInvocation runs the invocations in order — the
// account the later ones use is created by the first — and fails for a function of
// resources.Functions that none invokes.
func TestLambdaRuntime_EveryFunctionBootsAndAnswersOneInvocation(t *testing.T) {
	rie, build := os.Getenv(envRIE), os.Getenv(envLambdaBuild)
	if rie == "" || build == "" {
		t.Skipf("%s and %s are unset: run make test-lambda, which builds the functions and the emulator", envRIE, envLambdaBuild)
	}
	env := testenv.New(t)
	var apiKey string
	withKey := func(raw []byte) []byte {
		var req events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			t.Fatal(err)
		}
		req.Headers["authorization"] = "Bearer " + apiKey
		out, _ := json.Marshal(req)
		return out
	}
	var billingEventID string
	signedNow := func(raw []byte) []byte {
		var req events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			t.Fatal(err)
		}
		req.Headers["stripe-signature"] = stripewebhook.Sign([]byte(req.Body), stripeSecret, time.Now())
		out, _ := json.Marshal(req)
		return out
	}
	nudgeFor := func(raw []byte) []byte {
		var batch events.SQSEvent
		if err := json.Unmarshal(raw, &batch); err != nil {
			t.Fatal(err)
		}
		batch.Records[0].Body = `{"id":"` + billingEventID + `"}`
		out, _ := json.Marshal(batch)
		return out
	}
	invocations := []invocation{
		{resources.FunctionAPI, "apigw/create-account.json", nil, func(t *testing.T, answer []byte) {
			body := httpAnswer(t, answer, http.StatusCreated)
			apiKey, _ = body["apiKey"].(string)
			if apiKey == "" {
				t.Fatalf("no apiKey in %v", body)
			}
		}},
		{resources.FunctionIngest, "apigw/post-event.json", withKey, func(t *testing.T, answer []byte) {
			httpAnswer(t, answer, http.StatusAccepted)
		}},
		{resources.FunctionHolds, "apigw/reserve-hold.json", withKey, func(t *testing.T, answer []byte) {
			httpAnswer(t, answer, http.StatusCreated)
		}},
		{resources.FunctionAPI, "apigw/get-usage.json", withKey, func(t *testing.T, answer []byte) {
			httpAnswer(t, answer, http.StatusOK)
		}},
		{resources.FunctionWorker, "sqs/worker-batch.json", nil, func(t *testing.T, answer []byte) {
			var resp events.SQSEventResponse
			if err := json.Unmarshal(answer, &resp); err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("answer %s (%v); want no batch item failures", answer, err)
			}
			store := &ledger.Table{DB: env.Clients.DynamoDB, Table: env.Names.Table(resources.TableLedger),
				Usage: usage.Table{DB: env.Clients.DynamoDB, Name: env.Names.Table(resources.TableUsage)}}
			e, err := store.Get(context.Background(), fixtureAccountID, "evt_fixture_1")
			if err != nil || e.Status != ledger.Inserted {
				t.Errorf("the batch's event: %+v, %v; want it INSERTED", e, err)
			}
		}},
		{resources.FunctionSweeper, "schedule/sweeper.json", nil, func(t *testing.T, answer []byte) {
			if string(bytes.TrimSpace(answer)) != "null" {
				t.Errorf("answer %s; want null (a run without error)", answer)
			}
		}},
		// Reporting: the reporter finds the fixture account's marked cycle (it is linked to no
		// provider here, so its marks come off), the drainer finds nothing due, and the meter
		// API and the nightly reconciler find nothing to prove.
		{resources.FunctionReporter, "schedule/reporter.json", nil, nullAnswer},
		{resources.FunctionDrainer, "schedule/drainer.json", nil, nullAnswer},
		{resources.FunctionReconciler, "schedule/reconciler.json", nil, nullAnswer},
		{resources.FunctionMeterAPI, "apigw/reconcile.json", nil, func(t *testing.T, answer []byte) {
			if body := httpAnswer(t, answer, http.StatusOK); body["ok"] != true {
				t.Errorf("reconcile answer %v; want ok", body)
			}
		}},
		// A Stripe delivery, signed now as Stripe signs it: stored, answered 200 with its id.
		{resources.FunctionWebhooks, "apigw/stripe-webhook.json", signedNow, func(t *testing.T, answer []byte) {
			body := httpAnswer(t, answer, http.StatusOK)
			billingEventID, _ = body["id"].(string)
			if billingEventID == "" || body["duplicate"] != false {
				t.Fatalf("answer %v; want the stored event's id, not a duplicate", body)
			}
		}},
		// The worker's nudge for it: its customer links no account, so it is IGNORED, with why.
		{resources.FunctionInbox, "sqs/inbox-batch.json", nudgeFor, func(t *testing.T, answer []byte) {
			var resp events.SQSEventResponse
			if err := json.Unmarshal(answer, &resp); err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("answer %s (%v); want no batch item failures", answer, err)
			}
			store := &inbox.Table{DB: env.Clients.DynamoDB, Table: env.Names.Table(resources.TableInbox)}
			e, err := store.Get(context.Background(), billingEventID)
			if err != nil || e.Status != inbox.Ignored || e.Reason == "" {
				t.Errorf("the billing event: %+v, %v; want it IGNORED with its reason", e, err)
			}
		}},
		// The notifier: no notification is due in the fixture's stack, so a run ends without error.
		{resources.FunctionNotifier, "schedule/notifier.json", nil, nullAnswer},
		{resources.FunctionInboxSweep, "schedule/sweeper.json", nil, func(t *testing.T, answer []byte) {
			if string(bytes.TrimSpace(answer)) != "null" {
				t.Errorf("answer %s; want null (a run without error)", answer)
			}
		}},
	}
	invoked := map[string]bool{}
	for _, inv := range invocations {
		t.Run(inv.function+" "+inv.fixture, func(t *testing.T) {
			fn, ok := resources.FunctionByName(inv.function)
			if !ok {
				t.Fatalf("no function %s", inv.function)
			}
			event := apptest.Fixture(t, inv.fixture)
			if inv.event != nil {
				event = inv.event(event)
			}
			answer := invoke(t, rie, filepath.Join(build, fn.Name, "bootstrap"), functionEnv(fn, env), event)
			inv.check(t, answer)
			invoked[fn.Name] = true
		})
	}
	for _, fn := range resources.Functions {
		if !invoked[fn.Name] {
			t.Errorf("function %s is never invoked under the emulator: give it an invocation here", fn.Name)
		}
	}
}

// nullAnswer checks a scheduled run's answer: null, a run without error.
func nullAnswer(t *testing.T, answer []byte) {
	t.Helper()
	if string(bytes.TrimSpace(answer)) != "null" {
		t.Errorf("answer %s; want null (a run without error)", answer)
	}
}

// functionEnv is what the CDK app gives fn (resources.FunctionEnv, the code infra uses), pointed
// at this test's emulator resources: the endpoints and static credentials in place of AWS, and
// the operator key itself in place of its secret's ARN (there is no Secrets Manager here).
func functionEnv(fn resources.Function, env *testenv.Env) map[string]string {
	vars := resources.FunctionEnv(fn, env.Names, resources.EnvSettings{LogLevel: "info", LimitsSource: "plan"})
	for _, s := range fn.Secrets {
		switch s {
		case resources.EnvAdminKeySecretARN:
			vars[resources.EnvAdminKey] = operatorKey
		case resources.EnvStripeWebhookSecretARN:
			vars[resources.EnvStripeWebhookSecret] = stripeSecret
		}
	}
	vars[cloud.EnvDynamoDBEndpoint] = env.Endpoints.DynamoDB
	vars[cloud.EnvS3Endpoint] = env.Endpoints.S3
	vars[cloud.EnvSQSEndpoint] = env.Endpoints.SQS
	vars["AWS_REGION"] = "us-east-1"
	vars["AWS_ACCESS_KEY_ID"], vars["AWS_SECRET_ACCESS_KEY"] = "test", "test"
	vars["AWS_LAMBDA_FUNCTION_NAME"] = fn.Name
	vars["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = strconv.Itoa(fn.MemoryMB)
	vars["AWS_LAMBDA_FUNCTION_TIMEOUT"] = strconv.Itoa(int(fn.Timeout / time.Second))
	return vars
}

// invoke boots bootstrap under the emulator on loopback with exactly vars as its environment,
// sends event once and returns the function's answer. The emulator and the function stop when the
// invocation is answered.
func invoke(t *testing.T, rie, bootstrap string, vars map[string]string, event []byte) []byte {
	t.Helper()
	if _, err := os.Stat(bootstrap); err != nil {
		t.Fatalf("no built function at %s (make test-lambda builds it): %v", bootstrap, err)
	}
	addr, runtimeAddr := freeAddr(t), freeAddr(t)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr, "--runtime-api-address", runtimeAddr, bootstrap)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Its own process group, so that stopping it stops the function it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the emulator: %v", err)
	}
	defer func() {
		stop(cmd)
		if t.Failed() {
			t.Logf("the emulator's and the function's output:\n%s", logs.String())
		}
	}()
	waitListening(t, addr)
	client := &http.Client{Timeout: invokeTimeout}
	resp, err := client.Post("http://"+addr+"/2015-03-31/functions/function/invocations", "application/json", bytes.NewReader(event))
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var failure struct {
		ErrorMessage string `json:"errorMessage"`
		ErrorType    string `json:"errorType"`
	}
	if json.Unmarshal(answer, &failure) == nil && failure.ErrorType != "" {
		t.Fatalf("the function failed: %s: %s", failure.ErrorType, failure.ErrorMessage)
	}
	return answer
}

// httpAnswer decodes an API Gateway v2 response event and checks its status.
func httpAnswer(t *testing.T, answer []byte, status int) map[string]any {
	t.Helper()
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(answer, &resp); err != nil {
		t.Fatalf("not an API Gateway v2 response: %s", answer)
	}
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, resp.Body)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
		t.Fatalf("body %q is not JSON: %v", resp.Body, err)
	}
	return body
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(rieStartTimeout)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the emulator did not listen on %s within %s", addr, rieStartTimeout)
}

// stop ends the emulator's process group by its id: a terminate, then a kill if it lingers.
func stop(cmd *exec.Cmd) {
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

// lockedBuffer collects the output of the emulator and the function, written from two pipes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
