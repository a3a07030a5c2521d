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
	"github.com/ferrymeter/ferry/internal/analytics"
	"github.com/ferrymeter/ferry/internal/app"
	"github.com/ferrymeter/ferry/internal/cloud"
	"github.com/ferrymeter/ferry/internal/httpapi"
	"github.com/ferrymeter/ferry/internal/metrics"
	"github.com/ferrymeter/ferry/internal/plans"
	"github.com/ferrymeter/ferry/internal/resources"
	"github.com/ferrymeter/ferry/internal/worker"
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

// ScheduledFunc is a function that runs on a schedule (the sweeper, the reporter).
type ScheduledFunc func(ctx context.Context) error

// StackOptions configure the local stack.
type StackOptions struct {
	Addr     string
	AdminKey string
	// External endpoints replace the emulators (FERRY_*_ENDPOINT).
	External cloud.Endpoints
	// Prefix names this stack's resources; a fresh prefix gives a fresh stack on shared endpoints.
	Prefix            string
	VisibilityTimeout time.Duration
	Catalog           *plans.Catalog
	// Meters are the providers usage is reported to (ferry dev points them at stand-ins).
	Meters app.MetersConfig
	Log    *slog.Logger
	Now    func() time.Time
	// Extend lets capabilities add routes, middleware and scheduled functions to the app before
	// the stack starts serving.
	Extend func(a *app.App, s *Stack) error
}

// Stack is a running local Ferry: emulators, resources, the composed app behind a gateway on
// Addr, the worker's event source and the schedules.
type Stack struct {
	App       *app.App
	Emulators *Emulators
	Names     resources.Names
	URL       string
	Counter   *metrics.Counter
	Schedules map[string]ScheduledFunc
	// Routes lets capabilities serve extra local-only paths (e.g. /openapi.yaml).
	Routes *http.ServeMux

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
	if opts.AdminKey == "" {
		opts.AdminKey = DefaultAdminKey
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
	s := &Stack{Emulators: emu, Counter: metrics.NewCounter(), Schedules: map[string]ScheduledFunc{}, Routes: http.NewServeMux()}
	fail := func(err error) (*Stack, error) {
		listener.Close()
		emu.Stop()
		return nil, err
	}
	clients, err := cloud.New(ctx, emu.Endpoints, cloud.Options{})
	if err != nil {
		return fail(err)
	}
	names, err := Provision(ctx, clients, opts.Prefix, ProvisionOptions{VisibilityTimeout: opts.VisibilityTimeout})
	if err != nil {
		return fail(fmt.Errorf("provision the local stack (a stack with prefix %q may already exist on these endpoints): %w", opts.Prefix, err))
	}
	s.Names = names
	catalog := plans.Default()
	if opts.Catalog != nil {
		catalog = *opts.Catalog
	}
	cfg := app.Config{
		Names: names, AdminKey: opts.AdminKey, Catalog: catalog,
		Schema: analytics.DefaultSchema, MaxQuarantines: worker.DefaultMaxQuarantines, Meters: opts.Meters,
	}
	s.App = app.New(cfg, clients, log, s.Counter, opts.Now)
	// The schedules EventBridge runs in AWS.
	s.Schedules[resources.FunctionSweeper] = func(ctx context.Context) error {
		res, err := s.App.Holds.Sweep(ctx)
		if res.Expired > 0 || res.Failed > 0 {
			log.Info("sweep done", "expired", res.Expired, "skipped", res.Skipped, "failed", res.Failed)
		}
		return err
	}
	s.Schedules[resources.FunctionReporter] = func(ctx context.Context) error {
		res, err := s.App.Meters.Reporter.Run(ctx)
		if res.Found > 0 {
			log.Info("report done", "found", res.Found, "reported", res.Reported, "review", res.Review, "retrying", res.Retrying, "failed", res.Failed)
		}
		_, merr := s.App.Meters.Reconciler.RunMarked(ctx)
		return errors.Join(err, merr)
	}
	s.Schedules[resources.FunctionDrainer] = func(ctx context.Context) error {
		res, err := s.App.Meters.Drainer.Run(ctx)
		if res.Due > 0 {
			log.Info("drain done", "due", res.Due, "sent", res.Sent, "retrying", res.Retrying, "dead", res.Dead)
		}
		return err
	}
	s.Schedules[resources.FunctionReconciler] = func(ctx context.Context) error {
		_, err := s.App.Meters.Reconciler.RunAll(ctx, time.Now().Add(resources.ReconcilerTimeout), nil)
		return err
	}
	if opts.Extend != nil {
		if err := opts.Extend(s.App, s); err != nil {
			return fail(err)
		}
	}

	handlers := map[string]httpapi.LambdaHandler{}
	for _, f := range resources.Functions {
		handlers[f.Name] = httpapi.NewLambdaHandler(s.App.API.Handler(f.Name))
	}
	gw, err := NewGateway(handlers, resources.DefaultRouteFunction, log)
	if err != nil {
		return fail(err)
	}
	s.Routes.HandleFunc("GET /healthz", s.health)
	s.Routes.Handle("GET /openapi.yaml", api.Handler())
	s.Routes.Handle("/", gw)

	for _, f := range resources.Functions {
		if f.Every > 0 && s.Schedules[f.Name] == nil {
			return fail(fmt.Errorf("function %s runs every %s but the local stack has no handler for it", f.Name, f.Every))
		}
	}
	queueURL := names.QueueURL(resources.QueueEvents)
	arn, err := QueueARN(ctx, clients.SQS, queueURL)
	if err != nil {
		return fail(err)
	}

	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	source := &EventSource{SQS: clients.SQS, QueueURL: queueURL, QueueARN: arn, Handler: s.App.Worker.HandleSQS, Log: log}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); source.Run(runCtx, devPollers) }()
	for _, f := range resources.Functions {
		if f.Every > 0 {
			s.wg.Add(1)
			go func(name string, every time.Duration, run ScheduledFunc) {
				defer s.wg.Done()
				s.schedule(runCtx, name, every, run)
			}(f.Name, f.Every, s.Schedules[f.Name])
		}
	}
	s.server = &http.Server{Handler: s.Routes, ReadHeaderTimeout: 10 * time.Second}
	s.URL = "http://" + listener.Addr().String()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "err", err)
		}
	}()
	return s, nil
}

// schedule runs a scheduled function every period, as EventBridge Scheduler does in AWS.
func (s *Stack) schedule(ctx context.Context, name string, every time.Duration, run ScheduledFunc) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := run(ctx); err != nil && ctx.Err() == nil {
				s.App.Log.Error("scheduled function failed", "function", name, "err", err)
			}
		}
	}
}

// health answers 200 when DynamoDB, S3 and SQS all answer for this stack's resources.
func (s *Stack) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	c := s.App.Clients
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
		s.Emulators.Stop()
	})
}
