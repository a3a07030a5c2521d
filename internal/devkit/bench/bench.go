// Package bench holds Ferry's benchmark programs (make bench; ferry bench pipeline, ferry bench
// holds, ferry bench inbox). Each composes Ferry's own functions through their builders on
// emulators or on the endpoints FERRY_*_ENDPOINT names, measures machine-independent counts at
// the clients (round trips, request units per operation) and prints them beside a naive or plain
// alternative run in the same process, so ratios compare like with like.
package bench

import (
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/ferrymeter/ferry/functions"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// benchEndpoints returns the endpoints a benchmark measures against: FERRY_*_ENDPOINT when set,
// otherwise emulators in a child process, so this process's CPU time is Ferry's alone.
func benchEndpoints() (cloud.Endpoints, func(), error) {
	if e := cloud.EndpointsFromEnv(); e.Local() {
		if e.DynamoDB == "" || e.S3 == "" || e.SQS == "" {
			return cloud.Endpoints{}, nil, fmt.Errorf("set all of FERRY_DYNAMODB_ENDPOINT, FERRY_S3_ENDPOINT and FERRY_SQS_ENDPOINT, or none")
		}
		return e, func() {}, nil
	}
	p, err := startEmulatorProcess()
	if err != nil {
		return cloud.Endpoints{}, nil, err
	}
	return p.Endpoints, p.Stop, nil
}

// cpuTime is this process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// On-demand list prices in us-east-1, in dollars, used to turn counts into cost.
const (
	priceAPIGatewayPerMillion      = 1.00   // API Gateway HTTP API requests (first 300 million a month)
	priceDynamoWriteUnitPerMillion = 0.625  // DynamoDB on-demand, per million write request units
	priceDynamoReadUnitPerMillion  = 0.125  // per million read request units
	priceS3PutPerThousand          = 0.005  // S3 Standard PUT, COPY, POST, LIST
	priceS3GetPerThousand          = 0.0004 // S3 Standard GET and others
	priceSQSPerMillion             = 0.40   // SQS standard queue requests (64 KB chunks)
	priceLambdaPerMillion          = 0.20   // Lambda requests
	priceLambdaGBSecondArm         = 0.0000133334
)

// benchOperatorKey is the operator key of the functions a benchmark composes; nothing outside
// the process reaches them.
const benchOperatorKey = "bench"

// composeAll composes every Ferry function on names, by its builder from its entry, for a
// benchmark to drive directly.
func composeAll(names resources.Names, clients cloud.Clients, log *slog.Logger) (map[string]*compose.Function, error) {
	return composeAllWith(compose.DefaultConfig(), names, clients, log)
}

// composeAllWith is composeAll on the catalog of cfg.
func composeAllWith(cfg compose.Config, names resources.Names, clients cloud.Clients, log *slog.Logger) (map[string]*compose.Function, error) {
	cfg.OperatorKey = benchOperatorKey
	built, err := functions.Definitions().BuildAll(compose.Env{
		Names: names, Clients: clients, Config: cfg, Log: log, Metrics: metrics.NewCounter(), Now: time.Now,
	})
	if err != nil {
		return nil, err
	}
	fns := map[string]*compose.Function{}
	for _, fn := range built {
		fns[fn.Entry.Name] = fn
	}
	return fns, nil
}
