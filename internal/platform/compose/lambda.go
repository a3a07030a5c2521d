package compose

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/ferrymeter/ferry/internal/platform/cloud"
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
// its settings from the environment, secrets from Secrets Manager, clients built once for the
// container, JSON logs and EMF metrics on stdout, the wall clock.
func FromEnv(ctx context.Context, b Builder) (*Function, error) {
	d := NewDefinitions([]Builder{b})
	entry, ok := d.Function(b.Function)
	if !ok {
		return nil, fmt.Errorf("no function %q in resources.Functions", b.Function)
	}
	grant, err := resources.GrantFromEnv(entry, nil)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	settings := SettingsFromEnv()
	cfg, err := ConfigFromSettings(ctx, settings, readSecret, resources.NeedsOperatorKey(d.Routes, entry.Name))
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	clients, err := cloud.New(ctx, cloud.EndpointsFromEnv(), cloud.Options{})
	if err != nil {
		return nil, fmt.Errorf("clients: %w", err)
	}
	log := NewLogger(os.Stdout)
	return d.build(b, entry, grant, cfg, settings, readSecret, clients, log, metrics.NewEMF(os.Stdout, time.Now), time.Now)
}

// LambdaHandler is the handler the Lambda runtime invokes, by the function's kind: an HTTP
// function takes API Gateway's payload v2 events, a consumer SQS batches (answering partial batch
// failures), a scheduled function the schedule's payload, which carries nothing it needs.
func (f *Function) LambdaHandler() (any, error) {
	switch f.Kind() {
	case HTTP:
		return f.HTTP.LambdaHandler()
	case Consumer:
		return f.Consume, nil
	case Scheduled:
		return func(ctx context.Context, _ json.RawMessage) error { return f.Run(ctx) }, nil
	}
	return nil, fmt.Errorf("function %s has no handler", f.Entry.Name)
}

// readSecret reads a secret from Secrets Manager with the function's own credentials.
func readSecret(ctx context.Context, arn string) (string, error) {
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return "", fmt.Errorf("load AWS configuration: %w", err)
	}
	out, err := secretsmanager.NewFromConfig(awsCfg).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return "", fmt.Errorf("read the secret %s: %w", arn, err)
	}
	return strings.TrimSpace(aws.ToString(out.SecretString)), nil
}
