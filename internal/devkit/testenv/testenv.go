// Package testenv gives every test fresh, uniquely named tables, a bucket and queues on the local
// emulators, or on the endpoints named in FERRY_DYNAMODB_ENDPOINT, FERRY_S3_ENDPOINT and
// FERRY_SQS_ENDPOINT. The emulators start once per test binary and stop when it exits.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// provisionTimeout bounds resource creation for one test.
const provisionTimeout = 3 * time.Minute

var (
	shared     *devstack.Emulators
	sharedErr  error
	sharedOnce sync.Once
)

// Main runs a package's tests and stops the shared emulators afterwards. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// StopShared stops the emulators Endpoints started, if it started any: for a TestMain that
// does more than Main.
func StopShared() {
	if shared != nil {
		shared.Stop()
	}
}

// Endpoints starts the shared emulators (once) and returns the endpoints tests talk to.
func Endpoints(t testing.TB) cloud.Endpoints {
	t.Helper()
	sharedOnce.Do(func() {
		shared, sharedErr = devstack.StartEmulators(devstack.EmulatorOptions{External: cloud.EndpointsFromEnv()})
	})
	if sharedErr != nil {
		t.Fatalf("start the local stack: %v", sharedErr)
	}
	return shared.Endpoints
}

// External reports whether the tests run against endpoints from the environment rather than the
// emulators this binary started; tests that rely on an emulator's fault injection check it.
func External() bool { return cloud.EndpointsFromEnv().Local() }

// Env is one test's private slice of the stack.
type Env struct {
	Endpoints cloud.Endpoints
	// Clients reach every resource, as an operator's tools do; a function gets ClientsFor.
	Clients cloud.Clients
	Names   resources.Names
	Prefix  string
	// dynamoDB are the test's DynamoDB client options, applied to every client it builds.
	dynamoDB []func(*dynamodb.Options)
	// ablation, when FERRY_ABLATE is set, removes guards from every client.
	ablation *instrument.Ablation
	// table checks every condition the test's clients send against the guard table.
	table *instrument.TableCheck
}

// Options adjust a test's environment.
type Options struct {
	// DynamoDB options applied to the test's DynamoDB client (fault injection, counting).
	DynamoDB []func(*dynamodb.Options)
	// VisibilityTimeout for the test's queues; default 2 s so redelivery tests stay quick.
	VisibilityTimeout time.Duration
	// Tables, Queues and Buckets replace internal/platform/resources' lists (a capability under test).
	Tables  []resources.Table
	Queues  []resources.Queue
	Buckets []resources.Bucket
}

// New provisions fresh resources for t and deletes them when t ends.
func New(t testing.TB, opts ...Options) *Env {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.VisibilityTimeout == 0 {
		o.VisibilityTimeout = 2 * time.Second
	}
	endpoints := Endpoints(t)
	ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
	defer cancel()
	// FERRY_ABLATE removes guards from every client the test builds: the guard-ablation table
	// runs tests this way and expects them to fail.
	ablation, err := instrument.AblationFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	// Every condition clause sent on the test's tables must be a guard of the table, so that the
	// ablation runs remove it: one that is not fails the test.
	table := instrument.NewTableCheck(resources.Names{})
	o.DynamoDB = append([]func(*dynamodb.Options){table.Option}, o.DynamoDB...)
	if ablation != nil {
		o.DynamoDB = append(o.DynamoDB, ablation.Option)
	}
	clients, err := cloud.New(ctx, endpoints, cloud.Options{DynamoDB: o.DynamoDB})
	if err != nil {
		t.Fatalf("clients: %v", err)
	}
	prefix := UniquePrefix()
	names, err := devstack.Provision(ctx, clients, prefix, devstack.ProvisionOptions{
		VisibilityTimeout: o.VisibilityTimeout, Tables: o.Tables, Queues: o.Queues, Buckets: o.Buckets,
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
		defer cancel()
		if err := devstack.Teardown(ctx, clients, names); err != nil {
			t.Logf("teardown %s: %v", prefix, err)
		}
	})
	if err != nil {
		t.Fatalf("provision %s: %v", prefix, err)
	}
	if ablation != nil {
		ablation.SetNames(names)
	}
	table.SetNames(names)
	t.Cleanup(func() {
		for _, u := range table.Unlisted() {
			t.Errorf("a condition clause no guard of the table names: %s (add it to its adapter's Guards)", u)
		}
	})
	return &Env{Endpoints: endpoints, Clients: clients, Names: names, Prefix: prefix, dynamoDB: o.DynamoDB, ablation: ablation, table: table}
}

// ClientsFor builds a function's own clients: the test's DynamoDB options, and an IAM guard that
// refuses every call on the test's resources that fn's grant would refuse in AWS. A refused call
// fails the test when it ends, naming the function, the action and the resource.
func (e *Env) ClientsFor(t testing.TB, fn resources.Function) cloud.Clients {
	t.Helper()
	guard := instrument.NewGuard(fn, e.Names)
	c, err := cloud.New(context.Background(), e.Endpoints, cloud.Options{DynamoDB: e.dynamoDB}.Merge(guard.Options()))
	if err != nil {
		t.Fatalf("clients of %s: %v", fn.Name, err)
	}
	t.Cleanup(func() {
		for _, refused := range guard.Refused() {
			t.Errorf("IAM: %s", refused)
		}
	})
	return c
}

// ClientsWith builds another set of clients on the same endpoints, e.g. with fault injection.
func (e *Env) ClientsWith(t testing.TB, ddb ...func(*dynamodb.Options)) cloud.Clients {
	t.Helper()
	ddb = append([]func(*dynamodb.Options){e.table.Option}, ddb...)
	if e.ablation != nil {
		ddb = append(ddb, e.ablation.Option)
	}
	c, err := cloud.New(context.Background(), e.Endpoints, cloud.Options{DynamoDB: ddb})
	if err != nil {
		t.Fatalf("clients: %v", err)
	}
	return c
}

// UniquePrefix is a resource prefix no other test (or run) shares; lower-case, as S3 requires.
func UniquePrefix() string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("testenv: random prefix: %v", err)) // crypto/rand never fails on Linux
	}
	return "t" + hex.EncodeToString(b[:])
}

// NeedsGuard shows that a guard earns its place: run, on fresh resources, must hold (return nil)
// with every client as Ferry builds it, and must break (return what broke) when the guard is
// removed at the wire. db is the client to run on; env names the resources.
func NeedsGuard(t *testing.T, guard string, run func(t *testing.T, env *Env, db *dynamodb.Client) error) {
	t.Helper()
	g, ok := instrument.GuardNamed(guard)
	if !ok {
		t.Fatalf("no guard %q", guard)
	}
	env := New(t)
	if err := run(t, env, env.Clients.DynamoDB); err != nil {
		t.Fatalf("with %s in place: %v", guard, err)
	}
	env = New(t)
	ablation := instrument.NewAblation(env.Names, g)
	if err := run(t, env, env.ClientsWith(t, ablation.Option).DynamoDB); err == nil {
		t.Fatalf("with %s removed at the wire (%d writes stripped), nothing broke: the guard is dead or this test does not need it", guard, ablation.Stripped()[guard])
	} else {
		t.Logf("with %s removed: %v", guard, err)
	}
}
