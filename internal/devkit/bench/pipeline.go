package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithymw "github.com/aws/smithy-go/middleware"

	apifn "github.com/ferrymeter/ferry/functions/api"
	ingestfn "github.com/ferrymeter/ferry/functions/ingest"
	workerfn "github.com/ferrymeter/ferry/functions/worker"
	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/event"
	ingestpkg "github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/operator/figures"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Pipeline benchmark limits: bounded in count and time, as every load on this machine must be.
const (
	maxBenchEvents     = 50_000
	benchIngestBatch   = 100
	benchDrainDeadline = 10 * time.Minute
	benchLambdaMemGB   = 0.5 // the worker's memory size, for the compute lower bound
	benchAccountID     = "acct_bench"
	// benchWindow bounds how long the event source gathers one invocation's messages (the CDK
	// app's batching window is 1 s; the queue is full here, so a receive rarely comes back empty).
	benchWindow = time.Second
	// benchLongPollSeconds is the receive wait of an idle poller.
	benchLongPollSeconds = 1
)

// phase is one way of running the same events: the route they are sent on (events per ingest
// request; 1 is the single-event route), how many messages the event source hands one worker
// invocation, and which worker drains them.
type phase struct {
	name    string
	request int
	naive   bool
	// invocation is how many messages the event source hands one worker invocation at most.
	invocation int
	// once: no event is sent twice in this column, whatever the run's share of duplicates.
	once bool
	// meters: the events are LLM calls that move three meters (events, and two token sums with
	// two dimensions each) on the bench's meters catalog, instead of the events count alone.
	meters bool
}

// benchInvocation is the event source's batch, as the CDK app configures it
// (resources.EventSourceBatchSize).
const benchInvocation = resources.EventSourceBatchSize

// pipelinePhases are the run's columns, side by side on the same emulators: the batch route (100
// events a request, the default column) and 10 events a request (the figure the hot-account
// ceiling is measured at), the batch route again with events that move three meters (the cost of
// meters beside the events count), the single-event route, again with every event sent once (API
// Gateway, Lambda and SQS bill every resend, so the route's floor depends on how often clients
// retry), the single-event route in sparse traffic (one message an invocation: each event a unit
// of its own), and the naive worker.
var pipelinePhases = []phase{
	{name: "batch", request: benchIngestBatch, invocation: benchInvocation},
	{name: "batch/10", request: 10, invocation: benchInvocation},
	{name: "batch/meters", request: benchIngestBatch, invocation: benchInvocation, meters: true},
	{name: "single", request: 1, invocation: benchInvocation},
	{name: "single/once", request: 1, invocation: benchInvocation, once: true},
	{name: "sparse", request: 1, invocation: 1},
	{name: "naive", request: benchIngestBatch, naive: true, invocation: devstack.DefaultBatchSize},
}

// phaseResult is what one worker did to the same deliveries.
type phaseResult struct {
	phase      phase
	name       string
	requests   int // ingest requests (API Gateway requests, ingest invocations)
	messages   int // queue messages
	invoked    int // worker invocations
	budgetTx   int // transactions that moved the budget row
	delivered  int
	meter      int64
	archived   int
	rows       int // analytics rows: rows of their own and rows in units' rows items
	rowsItems  int // units' rows items
	ledger     map[ledger.Status]int
	calls      map[string]int
	units      map[string]instrument.OpUsage
	ingestCPU  time.Duration
	workerCPU  time.Duration
	workerWall time.Duration
	maxItem    int // the largest item, units' rows items aside
	maxRows    int // the largest unit's rows item
}

// PipelineOptions shape the pipeline benchmark.
type PipelineOptions struct {
	// Events is how many distinct events are sent (at most MaxEvents).
	Events int
	// Duplicates is the share of events delivered a second time (0–1).
	Duplicates float64
	// Plan is the account's plan: free (capped transaction), plus (sharded counter) or internal.
	Plan string
	// Pollers is how many queue pollers run at once (Lambda's concurrent batches).
	Pollers int
	// Seed picks which events are duplicated.
	Seed uint64
	// Columns names the columns to run (all when empty); the naive worker always runs, since
	// every throughput figure is a ratio to it.
	Columns []string
}

// DefaultPipeline is the run the README reports: 2,000 events, 20% delivered twice, free plan.
var DefaultPipeline = PipelineOptions{Events: 2000, Duplicates: 0.2, Plan: "free", Pollers: 4, Seed: 1}

// MaxEvents bounds one pipeline run, in distinct events.
const MaxEvents = maxBenchEvents

// Pipeline sends events, a share of them twice, through ingest, then drains the queue with
// Ferry's worker and again with a naive apply-on-arrival worker on the same emulators, and prints
// what each cost per delivery.
func Pipeline(ctx context.Context, o PipelineOptions, stdout, stderr io.Writer) error {
	n, dupShare, plan, pollers, seed := &o.Events, &o.Duplicates, &o.Plan, &o.Pollers, &o.Seed
	if *n < 1 || *n > maxBenchEvents || *dupShare < 0 || *dupShare > 1 {
		return fmt.Errorf("events must be 1–%d and duplicates 0–1", maxBenchEvents)
	}
	endpoints, stop, err := benchEndpoints()
	if err != nil {
		return err
	}
	defer stop()

	dups := int(float64(*n) * *dupShare)
	fmt.Fprintf(stdout, "Pipeline benchmark: %s distinct events, %s delivered twice (%.0f%%), plan %s, %d pollers.\n",
		figures.Thousands(int64(*n)), figures.Thousands(int64(dups)), *dupShare*100, *plan, *pollers)
	fmt.Fprintf(stdout, "Both workers run on the same emulators in this run; the emulators run in a child process, so CPU below is Ferry's own.\n\n")

	var results []phaseResult
	for _, ph := range pipelinePhases {
		if len(o.Columns) > 0 && !ph.naive && !slices.Contains(o.Columns, ph.name) {
			continue
		}
		fmt.Fprintf(stderr, "running %s…\n", ph.name)
		r, err := runPipelinePhase(ctx, endpoints, ph, *plan, *n, dups, *pollers, *seed)
		if err != nil {
			return fmt.Errorf("%s: %w", ph.name, err)
		}
		results = append(results, r)
	}
	printPipeline(stdout, results, *n, dups)
	return nil
}

func runPipelinePhase(ctx context.Context, endpoints cloud.Endpoints, ph phase, plan string, distinct, dups, pollers int, seed uint64) (phaseResult, error) {
	res := phaseResult{phase: ph, name: ph.name, ledger: map[ledger.Status]int{}}
	calls, units := instrument.NewCallCounter(), instrument.NewRequestMeter()
	var budgetTx atomic.Int64
	opts := calls.Options().Merge(cloud.Options{DynamoDB: []func(*dynamodb.Options){units.Option, budgetTransactions(&budgetTx)}})
	clients, err := cloud.New(ctx, endpoints, opts)
	if err != nil {
		return res, err
	}
	prefix := "bench-" + strings.ReplaceAll(ph.name, "/", "-") + "-" + testenv.UniquePrefix()
	names, err := devstack.Provision(ctx, clients, prefix, devstack.ProvisionOptions{VisibilityTimeout: 30 * time.Second})
	if err != nil {
		return res, err
	}
	defer func() { _ = devstack.Teardown(context.Background(), clients, names) }()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := compose.DefaultConfig()
	if ph.meters {
		if cfg.Catalog, err = plans.Parse([]byte(benchMetersCatalog)); err != nil {
			return res, fmt.Errorf("the bench's meters catalog: %w", err)
		}
	}
	fns, err := composeAllWith(cfg, names, clients, log)
	if err != nil {
		return res, err
	}
	// The operator's accounts (the api function's), the ingest function and the worker.
	api, ingest, ferry := apifn.PartsOf(fns[resources.FunctionAPI]), ingestfn.PartsOf(fns[resources.FunctionIngest]).Ingest, workerfn.PartsOf(fns[resources.FunctionWorker]).Worker
	limits := map[string]plans.Limit{plans.FeatureEvents: plans.Max(int64(distinct))}
	if ph.meters {
		// Capped, as the events count is, so the token meters' writes are the capped ones.
		limits[benchTokensIn], limits[benchTokensOut] = plans.Max(benchTokenLimit), plans.Max(benchTokenLimit)
	}
	if _, _, err := api.Accounts.Create(ctx, accounts.CreateInput{ID: benchAccountID, Plan: plan, Limits: limits}); err != nil {
		return res, err
	}
	acct, err := api.Accounts.Get(ctx, benchAccountID)
	if err != nil {
		return res, err
	}
	// The account's first usage is recorded once; count only what every event costs.
	if _, err := api.Accounts.EnsureUsageStarted(ctx, acct, time.Now()); err != nil {
		return res, err
	}
	if acct, err = api.Accounts.Get(ctx, benchAccountID); err != nil {
		return res, err
	}
	calls.Reset()
	units.Reset()
	budgetTx.Store(0)

	// Ingest: every event once in requests of ph.request, then the duplicates, as a client
	// retrying.
	ids := make([]string, distinct)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_%06d", i)
	}
	if ph.once {
		dups = 0
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	resend := rng.Perm(distinct)[:dups]
	sends := append([]string(nil), ids...)
	for _, i := range resend {
		sends = append(sends, ids[i])
	}
	cpu0 := cpuTime()
	for start := 0; start < len(sends); start += ph.request {
		batch := sends[start:min(start+ph.request, len(sends))]
		res.requests++
		if ph.request == 1 {
			body, _ := json.Marshal(benchEvents(batch, ph.meters)[0])
			if _, err := ingest.Accept(ctx, acct, body); err != nil {
				return res, fmt.Errorf("ingest: %w", err)
			}
			res.messages++
			continue
		}
		body, _ := json.Marshal(benchEvents(batch, ph.meters))
		if _, err := ingest.AcceptBatch(ctx, acct, body); err != nil {
			return res, fmt.Errorf("ingest: %w", err)
		}
		res.messages += len(ingestpkg.Packs(benchEnvelopes(acct.ID, batch, ph.meters), ingestpkg.PackReadings(cfg.Catalog.Meters)))
	}
	res.ingestCPU = cpuTime() - cpu0
	res.delivered = len(sends)

	handler := ferry.HandleSQS
	if ph.naive {
		handler = (&naiveWorker{clients: clients, names: names}).handle
	}
	arn, err := devstack.QueueARN(ctx, clients.SQS, names.QueueURL(resources.QueueEvents))
	if err != nil {
		return res, err
	}
	var handled, invoked atomic.Int64
	source := &devstack.EventSource{SQS: clients.SQS, QueueURL: names.QueueURL(resources.QueueEvents), QueueARN: arn, Log: log,
		BatchSize: ph.invocation, Window: benchWindow,
		Handler: func(ctx context.Context, b events.SQSEvent) (events.SQSEventResponse, error) {
			invoked.Add(1)
			resp, err := handler(ctx, b)
			handled.Add(int64(len(b.Records) - len(resp.BatchItemFailures)))
			return resp, err
		}}
	cpu0, wall0 := cpuTime(), time.Now()
	drainCtx, cancel := context.WithTimeout(ctx, benchDrainDeadline)
	defer cancel()
	var wg sync.WaitGroup
	for range max(1, pollers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for drainCtx.Err() == nil && handled.Load() < int64(res.messages) {
				// A long poll, as Lambda's pollers make: an idle poller waits for messages
				// instead of spinning on empty receives, which SQS would bill.
				if _, err := source.PollOnce(drainCtx, benchLongPollSeconds); err != nil && drainCtx.Err() == nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	res.workerWall, res.workerCPU = time.Since(wall0), cpuTime()-cpu0
	if handled.Load() < int64(res.messages) {
		return res, fmt.Errorf("the queue did not drain within %s (%d of %d handled)", benchDrainDeadline, handled.Load(), res.messages)
	}
	// What the pipeline did; the read-back below is the benchmark's own and is not counted.
	res.calls, res.units, res.budgetTx, res.invoked = calls.Snapshot(), units.Snapshot(), int(budgetTx.Load()), int(invoked.Load())
	if err := measureOutcome(ctx, &res, api, clients, names, ids); err != nil {
		return res, err
	}
	if ph.meters {
		return res, checkTokens(ctx, api, distinct)
	}
	return res, nil
}

// checkTokens holds the meters column to its events: each token meter must be the sum of the
// distinct events' values, every resend moving nothing, or its figures measure a wrong pipeline.
func checkTokens(ctx context.Context, api *apifn.Parts, distinct int) error {
	want := map[string]int64{}
	ids := make([]string, distinct)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_%06d", i)
	}
	for _, ev := range benchEvents(ids, true) {
		usage := ev["data"].(map[string]any)["usage"].(map[string]any)
		want[benchTokensIn] += int64(usage["input_tokens"].(int))
		want[benchTokensOut] += int64(usage["output_tokens"].(int))
	}
	for feature, w := range want {
		tot, err := api.Usage.Read(ctx, benchAccountID, feature, time.Now().UTC().Format("2006-01"))
		if err != nil {
			return err
		}
		if tot.Used != w {
			return fmt.Errorf("%s after the run is %d; the distinct events carry %d", feature, tot.Used, w)
		}
	}
	return nil
}

// measureOutcome reads back what the phase left: the meter, ledger statuses, archive objects,
// analytics rows, and the largest stored item (which checks the request-unit estimate).
func measureOutcome(ctx context.Context, res *phaseResult, api *apifn.Parts, clients cloud.Clients, names resources.Names, ids []string) error {
	tot, err := api.Usage.Read(ctx, benchAccountID, plans.FeatureEvents, time.Now().UTC().Format("2006-01"))
	if err != nil {
		return err
	}
	res.meter = tot.Used
	for _, id := range ids {
		e, err := api.Ledger.Get(ctx, benchAccountID, id)
		if err == nil {
			res.ledger[e.Status]++
		}
	}
	p := s3.NewListObjectsV2Paginator(clients.S3, &s3.ListObjectsV2Input{Bucket: aws.String(names.Bucket(resources.BucketArchive))})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		res.archived += len(page.Contents)
	}
	for _, table := range []string{resources.TableLedger, resources.TableUsage, resources.TableAnalytics, resources.TableAccounts} {
		sp := dynamodb.NewScanPaginator(clients.DynamoDB, &dynamodb.ScanInput{TableName: aws.String(names.Table(table))})
		for sp.HasMorePages() {
			page, err := sp.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, item := range page.Items {
				switch {
				case table != resources.TableAnalytics:
				case analytics.IsUnitItem(item):
					rows, err := analytics.RowsOf(item)
					if err != nil {
						return err
					}
					res.rows += len(rows)
					res.rowsItems++
					res.maxRows = max(res.maxRows, instrument.ItemSize(item))
					continue
				default:
					res.rows++
				}
				res.maxItem = max(res.maxItem, instrument.ItemSize(item))
			}
		}
	}
	return nil
}

// budgetTransactions counts the transactions that move a budget row: the hot-account ceiling is
// one budget row's write rate.
func budgetTransactions(n *atomic.Int64) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
			return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("bench.BudgetTransactions",
				func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
					if tx, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput); ok {
						for _, item := range tx.TransactItems {
							if item.Update != nil && dynamo.Str(item.Update.Key, "sk") == usage.BudgetSK {
								n.Add(1)
								break
							}
						}
					}
					return next.HandleInitialize(ctx, in)
				}), smithymw.After)
		})
	}
}

// benchEnvelopes are the envelopes ingest queues for the events ids (their bodies as ingest
// canonicalizes them are not needed to count the messages they pack into).
func benchEnvelopes(accountID string, ids []string, meters bool) []event.Envelope {
	out := make([]event.Envelope, len(ids))
	for i, id := range ids {
		raw, _ := json.Marshal(benchEvents([]string{id}, meters)[0])
		out[i] = event.Envelope{AccountID: accountID, EventID: id, Event: raw}
	}
	return out
}

// benchEvents are the events of ids: plain API calls, or, for the meters column, LLM calls whose
// token counts and model vary with the event (derived from its id, so a resend carries the same).
func benchEvents(ids []string, meters bool) []map[string]any {
	out := make([]map[string]any, len(ids))
	for i, id := range ids {
		out[i] = map[string]any{
			"specversion": "1.0", "id": id, "source": "/bench", "type": "api.call", "time": "2026-11-30T12:00:00Z",
			"data": map[string]any{"route": "/v1/things", "status": 200, "region": "eu-west-1"},
		}
		if meters {
			n := benchEventNumber(id)
			out[i]["type"], out[i]["source"] = "llm.call", "/api/chat"
			out[i]["data"] = map[string]any{"model": benchModels[n%len(benchModels)], "region": "eu-west-1",
				"usage": map[string]any{"input_tokens": 1000 + n%997, "output_tokens": 200 + n%97}}
		}
	}
	return out
}

// The meters column's catalog: the events count, and input and output tokens summed by model and
// region, on a capped plan.
const (
	benchTokensIn      = "tokens_in"
	benchTokensOut     = "tokens_out"
	benchTokenLimit    = 1 << 40
	benchMetersCatalog = `{
  "default": "free",
  "features": { "events": {}, "tokens_in": {}, "tokens_out": {} },
  "meters": {
    "events": { "feature": "events", "aggregation": "COUNT" },
    "tokens_in": { "match": { "type": "llm.call" }, "feature": "tokens_in", "value": "/usage/input_tokens",
      "aggregation": "SUM", "dimensions": { "model": "/model", "region": "/region" } },
    "tokens_out": { "match": { "type": "llm.call" }, "feature": "tokens_out", "value": "/usage/output_tokens",
      "aggregation": "SUM", "dimensions": { "model": "/model", "region": "/region" } }
  },
  "plans": {
    "free": { "tier": "capped", "monthlyMicros": 0,
      "features": { "events": { "limit": 1000 }, "tokens_in": { "limit": 100000 }, "tokens_out": { "limit": 100000 } } }
  }
}`
)

// benchEventNumber is the number in a bench event's id (evt_000042 → 42).
func benchEventNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "evt_"))
	return n
}

// benchModels are the model names the meters column's events carry.
var benchModels = []string{"gpt-4", "small", "large"}

// naiveWorker applies each delivered event as it arrives (every event of a packed message, one
// after another): it moves the meter, archives and writes the row, with no claim and no
// checkpoint. It is what Ferry is measured against: cheaper per delivery, and wrong on every
// duplicate.
type naiveWorker struct {
	clients cloud.Clients
	names   resources.Names
}

func (w *naiveWorker) handle(ctx context.Context, batch events.SQSEvent) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	for _, msg := range batch.Records {
		if err := w.apply(ctx, msg.Body); err != nil {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
		}
	}
	return resp, nil
}

func (w *naiveWorker) apply(ctx context.Context, body string) error {
	m, err := event.DecodeMessage(body)
	if err != nil {
		return err
	}
	for i, env := range m.Envelopes {
		if err := w.applyOne(ctx, env, m.Events[i]); err != nil {
			return err
		}
	}
	return nil
}

func (w *naiveWorker) applyOne(ctx context.Context, env event.Envelope, ev event.Event) error {
	now := time.Now().UnixMilli()
	label := time.UnixMilli(env.ReceivedAtMs).UTC().Format("2006-01")
	_, err := w.clients.DynamoDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(w.names.Table(resources.TableUsage)),
		Key:                       usage.BudgetKey(env.AccountID, plans.FeatureEvents, label),
		UpdateExpression:          aws.String("ADD #used :one"),
		ExpressionAttributeNames:  dynamo.Names("#used"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": dynamo.N(1)},
	})
	if err != nil {
		return err
	}
	key := archive.Key(env.AccountID, env.EventID, now)
	if _, err := w.clients.S3.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(w.names.Bucket(resources.BucketArchive)), Key: aws.String(key), Body: bytes.NewReader(env.Event),
	}); err != nil {
		return err
	}
	row, err := analytics.RowFor(analytics.DefaultSchema, ev, env.AccountID, env.ReceivedAtMs, now, label, key)
	if err != nil {
		return err
	}
	return (&analytics.DynamoWriter{DB: w.clients.DynamoDB, Table: w.names.Table(resources.TableAnalytics)}).Write(ctx, row)
}
