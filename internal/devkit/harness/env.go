package harness

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymeter/ferry/functions"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/fnparts"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testclock"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

//go:embed catalog.json
var catalogJSON []byte

// Catalog is the harness's plans: the built-in catalog, with a MAX meter (gb, on
// storage.sampled events) and a UNIQUE_COUNT meter (users, on app.login events) beside its events
// count and its SUM of tokens (llm.call), so the events pipelines meter every aggregation the
// claim writes differently: an ADD under a cap, a SET from the row as read, a marker put once.
func Catalog() plans.Catalog {
	c, err := plans.Parse(catalogJSON)
	if err != nil {
		panic(fmt.Sprintf("harness: its catalog is invalid: %v", err)) // a build defect
	}
	return c
}

// provisionTimeout bounds creating (or deleting) one environment's resources.
const provisionTimeout = 2 * time.Minute

// Env is a set of resources with every Ferry function composed on them, by its builder, with
// clients that carry the harness's wire and the function's IAM guard. Schedules on one Env run
// one after another; between two, reset checks the queues are empty and gives the in-process
// emulators fresh state with the same tables and buckets, so that each schedule starts on what
// fresh resources hold: nothing (and each also runs on its own accounts and ids). A run composes
// its functions and clients once, not once per schedule.
type Env struct {
	// Of reaches each function's parts: e.Worker().Worker, e.API().Accounts.
	fnparts.Of
	Names resources.Names
	// Admin are the harness's own clients: never parked, never faulted.
	Admin   cloud.Clients
	Clock   *testclock.Clock
	Metrics *metrics.Counter
	Log     *slog.Logger

	functions map[string]*compose.Function
	// tables maps physical names to logical ones: tables, buckets and queues.
	tables    map[string]string
	guards    []*instrument.Guard
	endpoints cloud.Endpoints
	// provider is the providers' transport, with the schedule's Stripe stand-in.
	provider *providerWire

	// refusedBefore is how many calls each guard had refused when the schedule began.
	refusedBefore []int
	prefix        string
	inProcess     *inProcess
}

// NewEnv provisions fresh resources on endpoints and composes every function on them.
func NewEnv(ctx context.Context, endpoints cloud.Endpoints, log *slog.Logger) (*Env, error) {
	return newEnv(ctx, endpoints, cloud.Options{}, nil, log)
}

// newEnv is NewEnv with options every client carries (the in-process emulators' transport) and
// the in-process emulators, if any.
func newEnv(ctx context.Context, endpoints cloud.Endpoints, transport cloud.Options, ip *inProcess, log *slog.Logger) (*Env, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	pctx, cancel := context.WithTimeout(ctx, provisionTimeout)
	defer cancel()
	admin, err := cloud.New(pctx, endpoints, transport)
	if err != nil {
		return nil, err
	}
	defs := functions.Definitions()
	pfx := prefix()
	names, err := devstack.Provision(pctx, admin, pfx, devstack.ProvisionOptions{
		Tables: defs.Tables, Queues: defs.Queues, Buckets: defs.Buckets,
	})
	e := &Env{Names: names, Admin: admin, Clock: testclock.New(startTime), Metrics: metrics.NewCounter(), Log: log,
		functions: map[string]*compose.Function{}, endpoints: endpoints, prefix: pfx, inProcess: ip}
	e.Of = e.Function
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("provision the harness's resources: %w", err)
	}
	tables := map[string]string{}
	for l, p := range names.Tables {
		tables[p] = l
	}
	for l, p := range names.Buckets {
		tables[p] = l
	}
	for l, u := range names.Queues {
		tables[u] = l
	}
	e.tables = tables
	cfg := compose.DefaultConfig()
	cfg.Catalog = Catalog()
	cfg.OperatorKey = "harness-operator-key"
	e.provider = newProviderWire(e.Clock)
	clientsFor := func(fn resources.Function) (cloud.Clients, error) {
		guard := instrument.NewGuard(fn, names)
		e.guards = append(e.guards, guard)
		w := &wire{function: fn.Name, tables: tables}
		return cloud.New(ctx, endpoints, transport.Merge(guard.Options()).Merge(w.options()))
	}
	fns, err := defs.BuildAll(compose.Env{Names: names, ClientsFor: clientsFor, Config: cfg, Settings: e.provider.settings(), Log: log, Metrics: e.Metrics, Now: e.Clock.Now})
	if err != nil {
		e.Close()
		return nil, err
	}
	for _, fn := range fns {
		if err := e.provider.reachThrough(fn); err != nil {
			e.Close()
			return nil, err
		}
		e.functions[fn.Entry.Name] = fn
	}
	// The sweep reads and settles one shard at a time: the scheduler owns every interleaving,
	// so an actor must be one thread.
	if sw := e.Sweeper(); sw != nil {
		sw.Holds.SweepConcurrency = 1
	}
	return e, nil
}

// Function returns a composed function by name; a name no entry has is a harness defect.
func (e *Env) Function(name string) *compose.Function {
	fn, ok := e.functions[name]
	if !ok {
		panic(fmt.Sprintf("harness: no function %q", name))
	}
	return fn
}

// Close deletes the environment's resources.
func (e *Env) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
	defer cancel()
	if err := devstack.Teardown(ctx, e.Admin, e.Names); err != nil {
		e.Log.Warn("harness teardown", "err", err)
	}
}

// markRefused notes how many calls each IAM guard has refused so far.
func (e *Env) markRefused() {
	e.refusedBefore = make([]int, len(e.guards))
	for i, g := range e.guards {
		e.refusedBefore[i] = len(g.Refused())
	}
}

// refusedSince returns the calls the IAM guards refused since markRefused.
func (e *Env) refusedSince() []string {
	var out []string
	for i, g := range e.guards {
		out = append(out, g.Refused()[e.refusedBefore[i]:]...)
	}
	return out
}

// prefix is a resource prefix no other environment shares.
func prefix() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("harness: random prefix: %v", err)) // crypto/rand never fails on Linux
	}
	return "h" + hex.EncodeToString(b[:])
}

// reset returns the resources to the state fresh ones have, for the next schedule. It first
// checks that the schedule left no message on any queue (the pipelines take what they queue off
// the queue themselves, so a message left is a pipeline's defect); then it replaces the
// in-process emulators' state with none and makes the same tables and buckets again, empty. It
// reports false when it cannot (the emulators are not in process): the run then makes a new Env.
func (e *Env) reset(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, provisionTimeout)
	defer cancel()
	for logical, url := range e.Names.Queues {
		out, err := e.Admin.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url),
			AttributeNames: []sqstypes.QueueAttributeName{
				sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			},
		})
		if err != nil {
			return false, fmt.Errorf("read the %s queue: %w", logical, err)
		}
		for k, v := range out.Attributes {
			if v != "0" {
				return false, fmt.Errorf("the %s queue is not empty after the schedule (%s %s): a pipeline left messages behind", logical, k, v)
			}
		}
	}
	if e.inProcess == nil || !e.inProcess.resettable() {
		return false, nil
	}
	e.inProcess.fresh()
	defs := functions.Definitions()
	names, err := devstack.CreateAnew(ctx, e.Admin, e.prefix, defs.Tables, defs.Buckets)
	if err != nil {
		return false, fmt.Errorf("make the tables and buckets again: %w", err)
	}
	for l, p := range names.Tables {
		if e.Names.Tables[l] != p {
			return false, fmt.Errorf("table %s was made again as %s, not %s", l, p, e.Names.Tables[l])
		}
	}
	for l, p := range names.Buckets {
		if e.Names.Buckets[l] != p {
			return false, fmt.Errorf("bucket %s was made again as %s, not %s", l, p, e.Names.Buckets[l])
		}
	}
	return true, nil
}
