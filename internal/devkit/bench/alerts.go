package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithymw "github.com/aws/smithy-go/middleware"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/ferrymeter/ferry/functions"
	apifn "github.com/ferrymeter/ferry/functions/api"
	ingestfn "github.com/ferrymeter/ferry/functions/ingest"
	notifierfn "github.com/ferrymeter/ferry/functions/notifier"
	workerfn "github.com/ferrymeter/ferry/functions/worker"
	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/alerts/drain"
	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	ingestpkg "github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/operator/figures"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Defaults and bounds of the alerts benchmark.
const (
	benchAlertsEvents        = 2_000
	benchAlertsNotifications = 200
	benchAlertsAlone         = 20
	maxAlertsEvents          = 10_000
	maxAlertsNotifications   = 1_000
	benchAlertsTimeout       = 5 * time.Minute
	// benchAlertsDrainDeadline bounds draining one column's queue.
	benchAlertsDrainDeadline = 2 * time.Minute
	// benchAlertsQuietHeadroom is the quiet account's limit over its events: its usage ends at a
	// tenth of the limit, below every default threshold (80%, 100%).
	benchAlertsQuietHeadroom = 10
	// maxNotifierRuns bounds the notifier runs one drain may take before the benchmark gives up.
	maxNotifierRuns = 200
	// benchReceiverBodyBytes bounds what the receiver reads of one delivery.
	benchReceiverBodyBytes = 64 << 10
	// minutesPerMonth prices the notifier's idle runs at one a minute (resources.NotifierEvery).
	minutesPerMonth = 30 * 24 * 60
)

// AlertsOptions shape the alerts benchmark.
type AlertsOptions struct {
	// Events is how many events each worker column sends (each once).
	Events int
	// Notifications is how many notifications each batched notifier column delivers.
	Notifications int
	// Alone is how many notifications are delivered one at a time (each put, then drained, before
	// the next).
	Alone int
}

// DefaultAlerts is the run the docs report.
var DefaultAlerts = AlertsOptions{Events: benchAlertsEvents, Notifications: benchAlertsNotifications, Alone: benchAlertsAlone}

// workerColumn is one way the worker meets the same events.
type workerColumn struct {
	name    string
	account string
	alerts  bool
	// limitTimes is the account's limit of events, as a multiple of the events sent.
	limitTimes int
}

// alertsWorkerColumns: the alerts off, on for an account that crosses no threshold, and on for
// one whose limit is the run's size, so that it crosses 80% and 100% once each.
var alertsWorkerColumns = []workerColumn{
	{name: "alerts off", account: "acct_alerts_off", alerts: false, limitTimes: benchAlertsQuietHeadroom},
	{name: "on, crosses none", account: "acct_alerts_quiet", alerts: true, limitTimes: benchAlertsQuietHeadroom},
	{name: "on, crosses 80%+100%", account: "acct_alerts_cross", alerts: true, limitTimes: 1},
}

// tally is what the DynamoDB client counted up to an instant: per operation, and the index
// writes of the notifications table.
type tally struct {
	ops         map[string]instrument.OpUsage
	indexWrites float64
}

func (t tally) minus(o tally) tally {
	out := tally{ops: map[string]instrument.OpUsage{}, indexWrites: t.indexWrites - o.indexWrites}
	for op, u := range t.ops {
		p := o.ops[op]
		u.Calls -= p.Calls
		u.Errors -= p.Errors
		u.ReadUnits -= p.ReadUnits
		u.WriteUnits -= p.WriteUnits
		u.Reported -= p.Reported
		if u.Calls != 0 {
			out.ops[op] = u
		}
	}
	return out
}

func (t tally) plus(o tally) tally {
	out := tally{ops: map[string]instrument.OpUsage{}, indexWrites: t.indexWrites + o.indexWrites}
	for _, m := range []map[string]instrument.OpUsage{t.ops, o.ops} {
		for op, u := range m {
			s := out.ops[op]
			s.Calls += u.Calls
			s.Errors += u.Errors
			s.ReadUnits += u.ReadUnits
			s.WriteUnits += u.WriteUnits
			s.Reported += u.Reported
			out.ops[op] = s
		}
	}
	return out
}

func (t tally) total() instrument.OpUsage {
	var s instrument.OpUsage
	for _, u := range t.ops {
		s.Calls += u.Calls
		s.Errors += u.Errors
		s.ReadUnits += u.ReadUnits
		s.WriteUnits += u.WriteUnits
		s.Reported += u.Reported
	}
	return s
}

// dollarsPerMillion is the DynamoDB on-demand cost of a million of what t counted n of.
func (t tally) dollarsPerMillion(n int, withIndexes bool) float64 {
	u := t.total()
	w := u.WriteUnits
	if withIndexes {
		w += t.indexWrites
	}
	return (u.ReadUnits*priceDynamoReadUnitPerMillion + w*priceDynamoWriteUnitPerMillion) / float64(n)
}

// workerResult is what one worker column did.
type workerResult struct {
	column        workerColumn
	limit         int64
	events        int
	invocations   int
	notifications int
	work          tally
}

// notifierResult is what one notifier column did.
type notifierResult struct {
	name          string
	notifications int
	endpoints     int
	runs          int
	requests      int
	work          tally
	idle          tally
}

// alertsStack is the stack the benchmark runs on: the functions, composed by their builders.
type alertsStack struct {
	clients cloud.Clients
	names   resources.Names
	meter   *instrument.RequestMeter
	index   *indexWrites
	api     *apifn.Parts
	ingest  *ingestpkg.Service
	worker  *workerfn.Parts
	drainer *drain.Drainer
	catalog plans.Catalog
	log     *slog.Logger
}

func (s *alertsStack) take() tally {
	return tally{ops: s.meter.Snapshot(), indexWrites: s.index.count()}
}

// Alerts measures what alerts cost: the worker's DynamoDB calls and units per event with the
// alerts off, on for an account that crosses no threshold, and on for one that crosses two; and
// the notifier's per notification delivered to one endpoint and to three, batched and one at a
// time, to a local receiver that checks every signature. Everything is counted at the DynamoDB
// client; the notifications table's index writes, which the emulators do not report, are
// counted by DynamoDB's rules for global secondary indexes.
func Alerts(ctx context.Context, o AlertsOptions, stdout, stderr io.Writer) error {
	if o.Events < 1 || o.Events > maxAlertsEvents || o.Notifications < 1 || o.Notifications > maxAlertsNotifications ||
		o.Alone < 1 || o.Alone > maxAlertsNotifications {
		return fmt.Errorf("--events must be 1–%d, --notifications and --alone 1–%d", maxAlertsEvents, maxAlertsNotifications)
	}
	ctx, cancel := context.WithTimeout(ctx, benchAlertsTimeout)
	defer cancel()
	fmt.Fprintln(stderr, "starting the local stack…")
	endpointsAt, stop, err := benchEndpoints()
	if err != nil {
		return err
	}
	defer stop()
	ntfTable, ok := resources.TableByLogical(resources.TableNotifications)
	if !ok {
		return fmt.Errorf("no %s table among the definitions", resources.TableNotifications)
	}
	s := &alertsStack{meter: instrument.NewRequestMeter(), index: newIndexWrites(ntfTable), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if s.clients, err = cloud.New(ctx, endpointsAt, cloud.Options{DynamoDB: []func(*dynamodb.Options){s.meter.Option, s.index.option}}); err != nil {
		return err
	}
	s.names, err = devstack.Provision(ctx, s.clients, "bench-alerts-"+testenv.UniquePrefix(), devstack.ProvisionOptions{VisibilityTimeout: 30 * time.Second})
	defer func() {
		tctx, tcancel := context.WithTimeout(context.Background(), time.Minute)
		defer tcancel()
		_ = devstack.Teardown(tctx, s.clients, s.names)
	}()
	if err != nil {
		return err
	}
	s.index.setTable(s.names.Table(resources.TableNotifications))
	cfg := compose.DefaultConfig()
	cfg.OperatorKey = benchOperatorKey
	s.catalog = cfg.Catalog
	// Deliveries go to a receiver on this machine, as under ferry dev.
	built, err := functions.Definitions().BuildAll(compose.Env{
		Names: s.names, Clients: s.clients, Config: cfg, Settings: compose.Settings{resources.EnvAlertsAllowLoopback: "true"},
		Log: s.log, Metrics: metrics.NewCounter(), Now: time.Now,
	})
	if err != nil {
		return err
	}
	fns := map[string]*compose.Function{}
	for _, fn := range built {
		fns[fn.Entry.Name] = fn
	}
	s.api, s.ingest = apifn.PartsOf(fns[resources.FunctionAPI]), ingestfn.PartsOf(fns[resources.FunctionIngest]).Ingest
	s.worker, s.drainer = workerfn.PartsOf(fns[resources.FunctionWorker]), notifierfn.PartsOf(fns[resources.FunctionNotifier]).Drainer

	var workers []workerResult
	for _, col := range alertsWorkerColumns {
		fmt.Fprintf(stderr, "worker, %s: %d events…\n", col.name, o.Events)
		r, err := runWorkerColumn(ctx, s, col, o.Events)
		if err != nil {
			return fmt.Errorf("worker, %s: %w", col.name, err)
		}
		workers = append(workers, r)
	}

	rcv := newAlertsReceiver()
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	register := func(n int) error {
		for range n {
			path := fmt.Sprintf("/hooks/%d", rcv.endpoints()+1)
			_, secret, err := s.api.Endpoints.Store.Create(ctx, endpoints.Registration{
				URL: srv.URL + path, Kinds: []string{string(notify.ThresholdCrossed)}, Description: "bench",
			}, s.api.Endpoints.Policy, time.Now().UnixMilli())
			if err != nil {
				return fmt.Errorf("register an endpoint: %w", err)
			}
			if err := rcv.add(path, secret); err != nil {
				return err
			}
		}
		return nil
	}
	var notifiers []notifierResult
	if err := register(1); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "notifier, 1 endpoint: %d notifications…\n", o.Notifications)
	r, err := runNotifierColumn(ctx, s, rcv, "1 endpoint", "one", o.Notifications, 1, false)
	if err != nil {
		return err
	}
	notifiers = append(notifiers, r)
	fmt.Fprintf(stderr, "notifier, 1 endpoint, one at a time: %d notifications…\n", o.Alone)
	if r, err = runNotifierColumn(ctx, s, rcv, "1 endpoint, alone", "alone", o.Alone, 1, true); err != nil {
		return err
	}
	notifiers = append(notifiers, r)
	if err := register(2); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "notifier, 3 endpoints: %d notifications…\n", o.Notifications)
	if r, err = runNotifierColumn(ctx, s, rcv, "3 endpoints", "three", o.Notifications, 3, false); err != nil {
		return err
	}
	notifiers = append(notifiers, r)

	printAlerts(stdout, o, workers, notifiers, s.index.unknownWrites())
	return nil
}

// runWorkerColumn sends events once each, 100 a request, through ingest, and drains the queue with
// the worker (its Alerts as the column says) under one poller, so that no unit races another and
// the columns differ only by the alerts. It counts the drain alone.
func runWorkerColumn(ctx context.Context, s *alertsStack, col workerColumn, n int) (workerResult, error) {
	res := workerResult{column: col, events: n, limit: int64(n * col.limitTimes)}
	if _, _, err := s.api.Accounts.Create(ctx, accounts.CreateInput{
		ID: col.account, Plan: "free", Limits: map[string]plans.Limit{plans.FeatureEvents: plans.Max(res.limit)},
	}); err != nil {
		return res, err
	}
	acct, err := s.api.Accounts.Get(ctx, col.account)
	if err != nil {
		return res, err
	}
	// The account's first usage is recorded once; count only what every event costs.
	if _, err := s.api.Accounts.EnsureUsageStarted(ctx, acct, time.Now()); err != nil {
		return res, err
	}
	if acct, err = s.api.Accounts.Get(ctx, col.account); err != nil {
		return res, err
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_%06d", i)
	}
	messages := 0
	for start := 0; start < n; start += benchIngestBatch {
		batch := ids[start:min(start+benchIngestBatch, n)]
		body, err := json.Marshal(benchEvents(batch, false))
		if err != nil {
			return res, err
		}
		results, err := s.ingest.AcceptBatch(ctx, acct, body)
		if err != nil {
			return res, fmt.Errorf("ingest: %w", err)
		}
		for _, r := range results {
			if r.Status != ingestpkg.ItemQueued {
				return res, fmt.Errorf("ingest: %s %s (%s)", r.ID, r.Status, r.Detail)
			}
		}
		messages += len(ingestpkg.Packs(benchEnvelopes(acct.ID, batch, false), ingestpkg.PackReadings(s.catalog.Meters)))
	}

	s.worker.Worker.Alerts = col.alerts
	queue := s.names.QueueURL(resources.QueueEvents)
	arn, err := devstack.QueueARN(ctx, s.clients.SQS, queue)
	if err != nil {
		return res, err
	}
	var handled, invoked atomic.Int64
	source := &devstack.EventSource{SQS: s.clients.SQS, QueueURL: queue, QueueARN: arn, Log: s.log,
		BatchSize: benchInvocation, Window: benchWindow,
		Handler: func(ctx context.Context, b events.SQSEvent) (events.SQSEventResponse, error) {
			invoked.Add(1)
			resp, err := s.worker.Worker.HandleSQS(ctx, b)
			handled.Add(int64(len(b.Records) - len(resp.BatchItemFailures)))
			return resp, err
		}}
	before := s.take()
	drainCtx, cancel := context.WithTimeout(ctx, benchAlertsDrainDeadline)
	defer cancel()
	for drainCtx.Err() == nil && handled.Load() < int64(messages) {
		if _, err := source.PollOnce(drainCtx, benchLongPollSeconds); err != nil && drainCtx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if handled.Load() < int64(messages) {
		return res, fmt.Errorf("the queue did not drain within %s (%d of %d messages handled)", benchAlertsDrainDeadline, handled.Load(), messages)
	}
	res.work, res.invocations = s.take().minus(before), int(invoked.Load())

	// What the column left, read after counting: the usage, and the notifications it wrote,
	// which the notifier fans out here to no endpoint (none is registered yet).
	got, err := s.api.Usage.Read(ctx, col.account, plans.FeatureEvents, acct.CycleAt(time.Now()).Label())
	if err != nil {
		return res, err
	}
	if got.Used != int64(n) {
		return res, fmt.Errorf("the account's usage is %d after %d events", got.Used, n)
	}
	ran, err := s.drainer.Run(ctx)
	if err != nil {
		return res, fmt.Errorf("fan out the column's notifications: %w", err)
	}
	res.notifications = ran.Fanned
	return res, nil
}

// runNotifierColumn puts n threshold.crossed notifications (as the worker's claim writes them,
// each for an account of its own) and runs the notifier until nothing is due, all at once or, when
// alone, each notification drained before the next is put. It counts the runs that found work;
// the last run of each drain, which found nothing, is counted apart as an idle run.
func runNotifierColumn(ctx context.Context, s *alertsStack, rcv *alertsReceiver, name, tag string, n, eps int, alone bool) (notifierResult, error) {
	res := notifierResult{name: name, notifications: n, endpoints: eps, work: tally{ops: map[string]instrument.OpUsage{}}}
	table := s.names.Table(resources.TableNotifications)
	nowMs := time.Now().UnixMilli()
	put := func(i int) error {
		told, err := notify.Tell(ctx, s.clients.DynamoDB, table, notify.Notification{
			Kind: notify.ThresholdCrossed, Account: fmt.Sprintf("acct_%s_%04d", tag, i), Feature: plans.FeatureEvents,
			Cycle: time.UnixMilli(nowMs).UTC().Format("2006-01"), Threshold: 800, Percent: 80, Limit: 1_000, Used: 800, AtMs: nowMs + int64(i),
		})
		if err == nil && !told {
			err = errors.New("the notification was there already")
		}
		return err
	}
	requests0 := rcv.count()
	var delivered int
	drainAll := func() error {
		for runs := 0; ; runs++ {
			if runs == maxNotifierRuns {
				return fmt.Errorf("still work after %d notifier runs", maxNotifierRuns)
			}
			pre := s.take()
			r, err := s.drainer.Run(ctx)
			if err != nil {
				return err
			}
			if r.Dead > 0 || r.Retrying > 0 || r.Failed > 0 || r.Lapsed > 0 {
				return fmt.Errorf("a run left %d dead, %d retrying, %d failed, %d lapsed", r.Dead, r.Retrying, r.Failed, r.Lapsed)
			}
			if r.Fanned == 0 && r.Due == 0 && r.Created == 0 && r.Deferred == 0 {
				res.idle = s.take().minus(pre)
				return nil
			}
			res.runs++
			delivered += r.Delivered
			res.work = res.work.plus(s.take().minus(pre))
		}
	}
	if alone {
		for i := range n {
			if err := put(i); err != nil {
				return res, err
			}
			if err := drainAll(); err != nil {
				return res, fmt.Errorf("%s: %w", name, err)
			}
		}
	} else {
		for i := range n {
			if err := put(i); err != nil {
				return res, err
			}
		}
		if err := drainAll(); err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
	}
	res.requests = rcv.count() - requests0
	if want := n * eps; delivered != want || res.requests != want {
		return res, fmt.Errorf("%s: %d delivered in %d requests; want %d of each", name, delivered, res.requests, want)
	}
	if bad, repeats := rcv.problems(); bad > 0 || repeats > 0 {
		return res, fmt.Errorf("%s: the receiver refused %d requests and saw %d sent twice", name, bad, repeats)
	}
	return res, nil
}

// alertsReceiver is the endpoints' receiver: it verifies each delivery's signature with its
// endpoint's secret (Standard Webhooks) and counts the requests and any message sent twice.
type alertsReceiver struct {
	mu       sync.Mutex
	hooks    map[string]*standardwebhooks.Webhook // by path
	seen     map[string]bool                      // path and webhook-id
	requests int
	refused  int
	repeats  int
}

func newAlertsReceiver() *alertsReceiver {
	return &alertsReceiver{hooks: map[string]*standardwebhooks.Webhook{}, seen: map[string]bool{}}
}

func (r *alertsReceiver) add(path, secret string) error {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return fmt.Errorf("the endpoint's secret: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks[path] = wh
	return nil
}

// endpoints is how many endpoints the receiver serves.
func (r *alertsReceiver) endpoints() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.hooks)
}

func (r *alertsReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

func (r *alertsReceiver) problems() (refused, repeats int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused, r.repeats
}

func (r *alertsReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, benchReceiverBodyBytes))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	wh := r.hooks[req.URL.Path]
	if err != nil || wh == nil || wh.Verify(body, req.Header) != nil {
		r.refused++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	key := req.URL.Path + " " + req.Header.Get(standardwebhooks.HeaderWebhookID)
	if r.seen[key] {
		r.repeats++
	}
	r.seen[key] = true
	w.WriteHeader(http.StatusNoContent)
}

// indexWrites counts the writes DynamoDB makes to one table's global secondary indexes, which
// on-demand bills as write units and the emulators do not report. It follows every item the
// client writes to the table, and counts by DynamoDB's rules: an item entering or leaving an index
// is one write, one whose index key changes is two (a delete and a put), and one whose index key
// stays is none for a keys-only index (one for an index that projects every attribute, if the
// item changed). Each index item here is far under 1 KB, so one write is one unit.
type indexWrites struct {
	def resources.Table

	mu      sync.Mutex
	table   string
	items   map[string]map[string]types.AttributeValue // the last item written, by key
	writes  float64
	unknown int // writes whose resulting item cannot be known from the request (updates)
}

func newIndexWrites(def resources.Table) *indexWrites {
	return &indexWrites{def: def, items: map[string]map[string]types.AttributeValue{}}
}

func (x *indexWrites) setTable(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.table = name
}

func (x *indexWrites) count() float64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.writes
}

func (x *indexWrites) unknownWrites() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.unknown
}

func (x *indexWrites) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("bench.IndexWrites",
			func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				if err == nil {
					x.record(in.Parameters)
				}
				return out, md, err
			}), smithymw.After)
	})
}

// record follows a write that succeeded.
func (x *indexWrites) record(params any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.table == "" {
		return
	}
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		if aws.ToString(in.TableName) == x.table {
			x.put(in.Item)
		}
	case *dynamodb.DeleteItemInput:
		if aws.ToString(in.TableName) == x.table {
			x.remove(in.Key)
		}
	case *dynamodb.UpdateItemInput:
		if aws.ToString(in.TableName) == x.table {
			x.unknown++
		}
	case *dynamodb.BatchWriteItemInput:
		for _, r := range in.RequestItems[x.table] {
			switch {
			case r.PutRequest != nil:
				x.put(r.PutRequest.Item)
			case r.DeleteRequest != nil:
				x.remove(r.DeleteRequest.Key)
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		for _, t := range in.TransactItems {
			switch {
			case t.Put != nil && aws.ToString(t.Put.TableName) == x.table:
				x.put(t.Put.Item)
			case t.Delete != nil && aws.ToString(t.Delete.TableName) == x.table:
				x.remove(t.Delete.Key)
			case t.Update != nil && aws.ToString(t.Update.TableName) == x.table:
				x.unknown++
			}
		}
	}
}

func (x *indexWrites) key(item map[string]types.AttributeValue) string {
	k := dynamo.Str(item, x.def.PartitionKey.Name)
	if x.def.SortKey != nil {
		k += "\x00" + dynamo.Str(item, x.def.SortKey.Name)
	}
	return k
}

func (x *indexWrites) put(item map[string]types.AttributeValue) {
	k := x.key(item)
	x.writes += x.cost(x.items[k], item)
	x.items[k] = item
}

func (x *indexWrites) remove(key map[string]types.AttributeValue) {
	k := x.key(key)
	x.writes += x.cost(x.items[k], nil)
	delete(x.items, k)
}

// cost is the index writes of replacing old with next (nil: no item).
func (x *indexWrites) cost(old, next map[string]types.AttributeValue) float64 {
	var w float64
	for _, ix := range x.def.Indexes {
		ok, kOld := indexKey(ix, old)
		nk, kNew := indexKey(ix, next)
		switch {
		case ok && nk && kOld != kNew:
			w += 2
		case ok && nk:
			if ix.ProjectAll && !itemsEqual(old, next) {
				w++
			}
		case ok || nk:
			w++
		}
	}
	return w
}

// indexKey reports whether item is in ix (it carries the index's key attributes) and its key there.
func indexKey(ix resources.Index, item map[string]types.AttributeValue) (bool, string) {
	if item == nil {
		return false, ""
	}
	attrs := []string{ix.PartitionKey.Name}
	if ix.SortKey != nil {
		attrs = append(attrs, ix.SortKey.Name)
	}
	var parts []string
	for _, a := range attrs {
		v, ok := item[a]
		if !ok {
			return false, ""
		}
		parts = append(parts, attrText(v))
	}
	return true, strings.Join(parts, "\x00")
}

func attrText(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return "S" + v.Value
	case *types.AttributeValueMemberN:
		return "N" + v.Value
	case *types.AttributeValueMemberB:
		return "B" + string(v.Value)
	}
	return fmt.Sprintf("%T%v", v, v)
}

func itemsEqual(a, b map[string]types.AttributeValue) bool { return reflect.DeepEqual(a, b) }

// printAlerts prints the benchmark's two tables.
func printAlerts(w io.Writer, o AlertsOptions, workers []workerResult, notifiers []notifierResult, unknown int) {
	fmt.Fprintf(w, "ferry bench alerts: what alerts cost, counted at the DynamoDB client on the emulators (a child process).\n\n")
	fmt.Fprintf(w, "The worker: %s events an account, %d a request, each sent once, drained by one poller (%d messages an invocation at most).\n\n",
		figures.Thousands(int64(o.Events)), benchIngestBatch, benchInvocation)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(label string, f func(r workerResult) string) {
		fmt.Fprint(tw, label, "\t")
		for _, r := range workers {
			fmt.Fprint(tw, f(r), "\t")
		}
		fmt.Fprintln(tw)
	}
	per := func(r workerResult, v float64) string { return fmt.Sprintf("%.3f", v/float64(r.events)) }
	row("", func(r workerResult) string { return r.column.name })
	row("account's limit of events", func(r workerResult) string { return figures.Thousands(r.limit) })
	row("worker invocations", func(r workerResult) string { return fmt.Sprint(r.invocations) })
	row("notifications written", func(r workerResult) string { return fmt.Sprint(r.notifications) })
	row("per event:", func(workerResult) string { return "" })
	row("  DynamoDB round trips", func(r workerResult) string { return per(r, float64(r.work.total().Calls)) })
	row("  read request units", func(r workerResult) string { return per(r, r.work.total().ReadUnits) })
	row("  write request units", func(r workerResult) string { return per(r, r.work.total().WriteUnits) })
	row("  notifications' index write units", func(r workerResult) string { return per(r, r.work.indexWrites) })
	for _, op := range opNames(workerTallies(workers)...) {
		row("  "+op+" calls", func(r workerResult) string { return per(r, float64(r.work.ops[op].Calls)) })
	}
	row("DynamoDB $ per million events", func(r workerResult) string {
		return fmt.Sprintf("%.4f", r.work.dollarsPerMillion(r.events, true))
	})
	_ = tw.Flush()
	if len(workers) >= 2 {
		off, on := workers[0], workers[1]
		d := func(f func(instrument.OpUsage) float64) float64 {
			return (f(on.work.total()) - f(off.work.total())) / float64(on.events)
		}
		fmt.Fprintf(w, "\n%s against %s, per event: %+.3f write units, %+.3f read units, %+.3f round trips.\n", on.column.name, off.column.name,
			d(func(u instrument.OpUsage) float64 { return u.WriteUnits }), d(func(u instrument.OpUsage) float64 { return u.ReadUnits }),
			d(func(u instrument.OpUsage) float64 { return float64(u.Calls) }))
	}
	if len(workers) >= 3 {
		off, cross := workers[0], workers[2]
		fmt.Fprintf(w, "%s against %s, over the whole run: %+.0f write units, %+.0f index write units, for %d notifications.\n",
			cross.column.name, off.column.name, cross.work.total().WriteUnits-off.work.total().WriteUnits,
			cross.work.indexWrites-off.work.indexWrites, cross.notifications)
	}

	fmt.Fprintf(w, "\nThe notifier: threshold.crossed notifications, each for an account of its own, delivered to endpoints on a local\n")
	fmt.Fprintf(w, "receiver that checks every signature; the notifier runs until nothing is due. Per notification:\n\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	nrow := func(label string, f func(r notifierResult) string) {
		fmt.Fprint(tw, label, "\t")
		for _, r := range notifiers {
			fmt.Fprint(tw, f(r), "\t")
		}
		fmt.Fprintln(tw)
	}
	nper := func(r notifierResult, v float64) string { return fmt.Sprintf("%.2f", v/float64(r.notifications)) }
	nrow("", func(r notifierResult) string { return r.name })
	nrow("notifications", func(r notifierResult) string { return figures.Thousands(int64(r.notifications)) })
	nrow("notifier runs with work", func(r notifierResult) string { return fmt.Sprint(r.runs) })
	nrow("HTTP requests (all 2xx)", func(r notifierResult) string { return figures.Thousands(int64(r.requests)) })
	nrow("per notification:", func(notifierResult) string { return "" })
	nrow("  HTTP requests", func(r notifierResult) string { return nper(r, float64(r.requests)) })
	nrow("  DynamoDB round trips", func(r notifierResult) string { return nper(r, float64(r.work.total().Calls)) })
	for _, op := range opNames(notifierTallies(notifiers)...) {
		nrow("    "+op, func(r notifierResult) string { return nper(r, float64(r.work.ops[op].Calls)) })
	}
	nrow("  read request units", func(r notifierResult) string { return nper(r, r.work.total().ReadUnits) })
	nrow("  write request units (the table)", func(r notifierResult) string { return nper(r, r.work.total().WriteUnits) })
	nrow("  index write units", func(r notifierResult) string { return nper(r, r.work.indexWrites) })
	nrow("DynamoDB $ per million notifications", func(r notifierResult) string {
		return fmt.Sprintf("%.2f", r.work.dollarsPerMillion(r.notifications, true))
	})
	nrow("  … the table's units alone", func(r notifierResult) string {
		return fmt.Sprintf("%.2f", r.work.dollarsPerMillion(r.notifications, false))
	})
	_ = tw.Flush()
	if len(notifiers) > 0 {
		idle := notifiers[0].idle.total()
		fmt.Fprintf(w, "\nAn idle run (nothing due): %d round trips, %.1f read units; at one run a minute, $%.4f a month.\n",
			idle.Calls, idle.ReadUnits, idle.ReadUnits*minutesPerMonth*priceDynamoReadUnitPerMillion/1e6)
	}
	fmt.Fprintf(w, "Prices: us-east-1 on-demand, $%.3f per million write units and $%.3f per million read units; index writes are\n",
		priceDynamoWriteUnitPerMillion, priceDynamoReadUnitPerMillion)
	fmt.Fprintf(w, "billed as write units. Units come from DynamoDB's sizing rules (the emulators report no consumed capacity);\n")
	fmt.Fprintf(w, "the notifications table's index writes are counted by DynamoDB's rules for its keys-only indexes.\n")
	if unknown > 0 {
		fmt.Fprintf(w, "(%d updates of the notifications table could not be followed: its index writes are undercounted.)\n", unknown)
	}
}

func workerTallies(rs []workerResult) []tally {
	out := make([]tally, len(rs))
	for i, r := range rs {
		out[i] = r.work
	}
	return out
}

func notifierTallies(rs []notifierResult) []tally {
	out := make([]tally, len(rs))
	for i, r := range rs {
		out[i] = r.work
	}
	return out
}

// opNames are the operations any of ts counted, sorted.
func opNames(ts ...tally) []string {
	var names []string
	for _, t := range ts {
		for op := range t.ops {
			if !slices.Contains(names, op) {
				names = append(names, op)
			}
		}
	}
	sort.Strings(names)
	return names
}
