package app

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Run is a Lambda function's whole main: compose the function b builds from the environment the
// CDK app gives it, and hand its handler to the Lambda runtime. A function that cannot be
// composed exits at once, naming what is missing, so a misconfigured deployment fails at its
// first cold start rather than on a customer's request.
func Run(b Builder) {
	fn, err := FromEnv(context.Background(), b)
	if err == nil {
		var handler any
		if handler, err = fn.LambdaHandler(); err == nil {
			lambda.Start(handler)
			return
		}
	}
	fmt.Fprintln(os.Stderr, "ferry:", err)
	os.Exit(1)
}

// FromEnv composes the function b builds the way Lambda runs it: its granted resource names and
// its settings from the environment, clients built once for the container, JSON logs and EMF
// metrics on stdout, the wall clock.
func FromEnv(ctx context.Context, b Builder) (*Function, error) {
	d := DefaultDefinitions()
	entry, ok := d.Function(b.Function)
	if !ok {
		return nil, fmt.Errorf("no function %q in resources.Functions", b.Function)
	}
	grant, err := resources.GrantFromEnv(entry, nil)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	cfg, err := ConfigFromEnv(ctx, httpapi.NeedsOperatorKey(d.Routes, entry.Name), entry.ReadsLimits)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	if entry.ReportsUsage {
		if cfg.Meters, err = MetersConfigFromEnv(ctx); err != nil {
			return nil, fmt.Errorf("configuration: %w", err)
		}
	}
	clients, err := cloud.New(ctx, cloud.EndpointsFromEnv(), cloud.Options{})
	if err != nil {
		return nil, fmt.Errorf("clients: %w", err)
	}
	log := NewLogger(os.Stdout)
	return d.build(b, entry, grant, cfg, clients, log, metrics.NewEMF(os.Stdout, time.Now), time.Now)
}

// LambdaHandler is the handler the Lambda runtime invokes, by the function's kind: an HTTP
// function takes API Gateway's payload v2 events, a consumer SQS batches (answering partial batch
// failures), a scheduled function the schedule's payload, which carries nothing it needs.
func (f *Function) LambdaHandler() (any, error) {
	switch f.Kind() {
	case HTTP:
		h, err := f.HTTP.Handler()
		if err != nil {
			return nil, err
		}
		return httpapi.NewLambdaHandler(h), nil
	case Consumer:
		return f.Consume, nil
	case Scheduled:
		return func(ctx context.Context, _ json.RawMessage) error { return f.Run(ctx) }, nil
	}
	return nil, fmt.Errorf("function %s has no handler", f.Entry.Name)
}
