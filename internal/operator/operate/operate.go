// Package operate is what Ferry's operators run against a stack, deployed or local: read
// everything Ferry holds about one event, count an account's ledger and archive, and re-drive an UNINSERTABLE event from the archive
// once the cause of its refused row is fixed. It reaches the stack through the same environment
// a function reads (FERRY_TABLE_*, FERRY_QUEUE_*, FERRY_BUCKET_*, AWS credentials or
// FERRY_*_ENDPOINT), every resource of it, as an operator's credentials may.
package operate

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// DevEnvFile is where ferry dev writes the environment operator commands need to reach it.
const DevEnvFile = "_dev.env"

// Stack is a stack as an operator reaches it: every resource.
type Stack struct {
	Names     resources.Names
	Ledger    *ledger.Table
	Archive   *archive.S3
	Analytics *analytics.DynamoWriter
	Queue     *ingest.SQSQueue
	Now       func() time.Time
}

// FromEnv reaches the stack the environment names, after loading envFile if given.
func FromEnv(ctx context.Context, envFile string) (*Stack, error) {
	if envFile != "" {
		if err := LoadEnvFile(envFile); err != nil {
			return nil, err
		}
	}
	names, err := resources.NamesFromEnv(nil)
	if err != nil {
		return nil, err
	}
	c, err := cloud.New(ctx, cloud.EndpointsFromEnv(), cloud.Options{})
	if err != nil {
		return nil, err
	}
	return &Stack{
		Names: names,
		Ledger: &ledger.Table{
			DB: c.DynamoDB, Table: names.Table(resources.TableLedger),
			Usage: usage.Table{DB: c.DynamoDB, Name: names.Table(resources.TableUsage)},
		},
		Archive:   &archive.S3{Client: c.S3, Bucket: names.Bucket(resources.BucketArchive)},
		Analytics: &analytics.DynamoWriter{DB: c.DynamoDB, Table: names.Table(resources.TableAnalytics)},
		Queue:     &ingest.SQSQueue{Client: c.SQS, URL: names.QueueURL(resources.QueueEvents)},
		Now:       time.Now,
	}, nil
}

// Inspection is what Ferry holds about one event.
type Inspection struct {
	Ledger       ledger.Entry `json:"ledger"`
	ArchiveKey   string       `json:"archiveKey"`
	Archived     bool         `json:"archived"`
	AnalyticsRow bool         `json:"analyticsRow"`
}

// Inspect reads one event's ledger entry, whether its payload is archived and whether its
// analytics row exists.
func (s *Stack) Inspect(ctx context.Context, accountID, eventID string) (Inspection, error) {
	e, err := s.Ledger.Get(ctx, accountID, eventID)
	if err != nil {
		return Inspection{}, err
	}
	loc := e.ArchiveLocation()
	_, archErr := s.Archive.Read(ctx, loc)
	row, err := s.Analytics.Exists(ctx, e.RowRef())
	if err != nil {
		return Inspection{}, err
	}
	return Inspection{Ledger: e, ArchiveKey: loc.Key, Archived: archErr == nil, AnalyticsRow: row}, nil
}

// Redrive queues an UNINSERTABLE event again from the archive (worker.Redrive) and returns its
// status before.
func (s *Stack) Redrive(ctx context.Context, accountID, eventID string) (ledger.Status, error) {
	r := &worker.Redrive{Ledger: s.Ledger, Archive: s.Archive, Queue: s.Queue, NowMs: func() int64 { return s.Now().UnixMilli() }}
	return r.Run(ctx, accountID, eventID)
}

// LoadEnvFile sets KEY=VALUE lines (an optional "export " prefix, # comments) that are not
// already set in the environment.
func LoadEnvFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export "))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return fmt.Errorf("%s: not KEY=VALUE: %q", path, line)
		}
		if _, set := os.LookupEnv(k); !set {
			os.Setenv(k, strings.Trim(v, `"'`))
		}
	}
	return sc.Err()
}

// WriteDevEnv writes the environment operator commands need to reach a local stack.
func WriteDevEnv(path string, endpoints cloud.Endpoints, names resources.Names) error {
	env := names.Env()
	env[cloud.EnvDynamoDBEndpoint] = endpoints.DynamoDB
	env[cloud.EnvS3Endpoint] = endpoints.S3
	env[cloud.EnvSQSEndpoint] = endpoints.SQS
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by ferry dev: how operator commands reach this local stack.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%s\n", k, env[k])
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}
