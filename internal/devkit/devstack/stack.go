package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymeter/ferry/api"
	"github.com/ferrymeter/ferry/functions"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/fnparts"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Defaults of the local stack.
const (
	DefaultAddr     = "127.0.0.1:8080"
	DefaultAdminKey = "dev-admin-key"
	DefaultPrefix   = "ferry-dev"
	// devVisibilityTimeout: locally a failed message comes back after seconds, not minutes.
	devVisibilityTimeout = 5 * time.Second
	devPollers           = 2
	healthTimeout        = 2 * time.Second
	shutdownTimeout      = 10 * time.Second
)

// StackOptions configure the local stack.
type StackOptions struct {
	Addr string
	// OperatorKey authenticates the operator routes (default DefaultAdminKey).
	OperatorKey string
	// External endpoints replace the emulators (FERRY_*_ENDPOINT).
	External cloud.Endpoints
	// Prefix names this stack's resources; a fresh prefix gives a fresh stack on shared endpoints.
	Prefix            string
	VisibilityTimeout time.Duration
	Catalog           *plans.Catalog
	// Settings are the deployment settings the functions read, as the CDK app would set them:
	// where limits come from, the providers usage is reported to, the webhook inbox's keys
	// (ferry dev points them at stand-ins: ProviderStandIns, NewInboxDev).
	Settings compose.Settings
	// Definitions replace functions.Definitions (a capability under test).
	Definitions *compose.Definitions
	// Clients adjust the stack's SDK clients (request metering, fault injection); every function
	// also gets an IAM guard on its own.
	Clients cloud.Options
	// Adjust changes each function after it is composed and before it is served (a test's
	// stricter analytics schema, say).
	Adjust func(*compose.Function)
	Log    *slog.Logger
	Now    func() time.Time
}

// Stack is a running local Ferry: emulators, resources, every function composed by its builder
// and wired by its kind — HTTP functions behind a gateway on Addr, consumers behind their queues'
// event sources, scheduled functions on their schedules.
type Stack struct {
	// Of reaches each function's parts: s.Worker().Worker, s.API().Accounts.
	fnparts.Of
	Functions []*compose.Function
	Emulators *Emulators
	Clients   cloud.Clients
	Names     resources.Names
	URL       string
	Counter   *metrics.Counter
	// Routes lets capabilities serve extra local-only paths (e.g. /openapi.yaml).
	Routes *http.ServeMux

	log    *slog.Logger
	server *http.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Start brings the whole stack up and returns once every part is ready.
func Start(ctx context.Context, opts StackOptions) (*Stack, error) {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.OperatorKey == "" {
		opts.OperatorKey = DefaultAdminKey
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.VisibilityTimeout == 0 {
		opts.VisibilityTimeout = devVisibilityTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	defs := functions.Definitions()
	if opts.Definitions != nil {
		defs = *opts.Definitions
	}
	log := opts.Log
	listener, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", opts.Addr, err)
	}
	emu, err := StartEmulators(EmulatorOptions{External: opts.External})
	if err != nil {
		listener.Close()
		return nil, err
	}
	s := &Stack{Emulators: emu, Counter: metrics.NewCounter(), Routes: http.NewServeMux(), log: log}
	s.Of = s.Function
	fail := func(err error) (*Stack, error) {
		listener.Close()
		emu.Stop()
		return nil, err
	}
	clients, err := cloud.New(ctx, emu.Endpoints, opts.Clients)
	if err != nil {
		return fail(err)
	}
	s.Clients = clients
	names, err := Provision(ctx, clients, opts.Prefix, ProvisionOptions{
		VisibilityTimeout: opts.VisibilityTimeout, Tables: defs.Tables, Queues: defs.Queues, Buckets: defs.Buckets,
	})
	if err != nil {
		return fail(fmt.Errorf("provision the local stack (prefix %q): %w", opts.Prefix, err))
	}
	s.Names = names
	cfg := compose.DefaultConfig()
	cfg.OperatorKey = opts.OperatorKey
	if opts.Catalog != nil {
		cfg.Catalog = *opts.Catalog
	}
	// The console's labs drive the stack through its own address, as ferry lab does.
	settings := opts.Settings.With(compose.Settings{resources.EnvAPIURL: "http://" + listener.Addr().String()})
	// A local stack's notifications go to receivers on this machine (ferry listen), over http,
	// unless its settings say otherwise; a deployment never sets this.
	if settings.Get(resources.EnvAlertsAllowLoopback) == "" {
		settings = settings.With(compose.Settings{resources.EnvAlertsAllowLoopback: "true"})
	}
	// Each function gets its own clients, which refuse what its IAM role would refuse in AWS, so
	// a capability that reaches past its grant fails here as it would there (AccessDenied).
	clientsFor := func(fn resources.Function) (cloud.Clients, error) {
		guard := instrument.NewGuard(fn, names)
		return cloud.New(ctx, emu.Endpoints, opts.Clients.Merge(guard.Options()))
	}
	fns, err := defs.BuildAll(compose.Env{Names: names, ClientsFor: clientsFor, Config: cfg, Settings: settings, Log: log, Metrics: s.Counter, Now: opts.Now})
	if err != nil {
		return fail(err)
	}
	if opts.Adjust != nil {
		for _, fn := range fns {
			opts.Adjust(fn)
		}
	}
	s.Functions = fns
	wiring, err := Wire(ctx, defs.Routes, fns, names, clients.SQS, log)
	if err != nil {
		return fail(err)
	}
	s.Routes.HandleFunc("GET /healthz", s.health)
	s.Routes.Handle("GET /openapi.yaml", api.Handler())
	// Another method on either path is a 405 (with Allow), as on the API's own routes.
	s.Routes.Handle("/healthz", httpapi.MethodNotAllowed(log, http.MethodGet))
	s.Routes.Handle("/openapi.yaml", httpapi.MethodNotAllowed(log, http.MethodGet))
	s.Routes.Handle("/", wiring.Gateway)

	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, source := range wiring.Sources {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); source.Run(runCtx, devPollers) }()
	}
	for _, sch := range wiring.Schedules {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.schedule(runCtx, sch) }()
	}
	s.server = NewServer(RefuseUncleanPaths(s.Routes))
	s.URL = "http://" + listener.Addr().String()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.server.Serve(ProblemListener(listener)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "err", err)
		}
	}()
	return s, nil
}

// Function returns the stack's composed function of that name, or nil.
func (s *Stack) Function(name string) *compose.Function {
	for _, fn := range s.Functions {
		if fn.Entry.Name == name {
			return fn
		}
	}
	return nil
}

// schedule runs a scheduled function every period, as EventBridge Scheduler does in AWS.
func (s *Stack) schedule(ctx context.Context, sch Schedule) {
	t := time.NewTicker(sch.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := sch.Run(ctx); err != nil && ctx.Err() == nil {
				s.log.Error("scheduled function failed", "function", sch.Function, "err", err)
			}
		}
	}
}

// health answers 200 when DynamoDB, S3 and SQS all answer for this stack's resources.
func (s *Stack) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	c := s.Clients
	checks := map[string]error{}
	_, checks["dynamodb"] = c.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.Names.Table(resources.TableLedger))})
	_, checks["s3"] = c.S3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.Names.Bucket(resources.BucketArchive))})
	_, checks["sqs"] = c.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(s.Names.QueueURL(resources.QueueEvents)), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	status := http.StatusOK
	body := map[string]string{}
	for name, err := range checks {
		body[name] = "ok"
		if err != nil {
			body[name] = err.Error()
			status = http.StatusServiceUnavailable
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// Close stops serving, the event source and the schedules, then the emulators.
func (s *Stack) Close() {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = s.server.Shutdown(ctx)
		s.cancel()
		s.wg.Wait()
		for _, fn := range s.Functions {
			if fn.Close != nil {
				fn.Close()
			}
		}
		s.Emulators.Stop()
	})
}
