// Package resources is the one definition of every table, queue and bucket Ferry uses: their
// logical names, keys, indexes, TTL attributes and queue settings. The CDK app (infra/) and the
// local stack bootstrap (internal/devkit/devstack) both read it, so tests run against the same keys,
// indexes and TTL attributes that production gets.
package resources

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// AttributeType is a DynamoDB key attribute type.
type AttributeType string

// Key attribute types Ferry uses.
const (
	String AttributeType = "S"
	Number AttributeType = "N"
)

// Attribute names one key attribute.
type Attribute struct {
	Name string
	Type AttributeType
}

// Index is a global secondary index. Ferry's indexes are sparse: only items that carry the
// index's partition key attribute appear in them.
type Index struct {
	Name         string
	PartitionKey Attribute
	SortKey      *Attribute
	// ProjectAll projects every attribute; otherwise only keys are projected.
	ProjectAll bool
}

// Table describes one DynamoDB table.
type Table struct {
	// Logical is the table's logical name ("ledger"); the physical name is derived per stage.
	Logical      string
	Purpose      string
	PartitionKey Attribute
	SortKey      *Attribute
	// TTLAttribute names the epoch-seconds attribute DynamoDB expires items by, if any.
	TTLAttribute string
	Indexes      []Index
}

// Queue describes one SQS queue and its dead-letter queue.
type Queue struct {
	Logical string
	Purpose string
	// VisibilityTimeout is how long a received message stays invisible before redelivery. AWS
	// recommends at least six times the consuming function's timeout.
	VisibilityTimeout time.Duration
	Retention         time.Duration
	// MaxReceiveCount is how many receives a message gets before SQS moves it to the DLQ.
	MaxReceiveCount int
	DLQRetention    time.Duration
}

// DLQLogical is the logical name of the queue's dead-letter queue.
func (q Queue) DLQLogical() string { return q.Logical + "-dlq" }

// Bucket describes one S3 bucket.
type Bucket struct {
	Logical string
	Purpose string
}

// Logical names. Code refers to resources by these; Names maps them to physical names.
const (
	TableAccounts = "accounts"
	TableAPIKeys  = "apikeys"
	// TableAccountLinks maps each linked provider id to its account.
	TableAccountLinks = "accountlinks"
	TableLedger       = "ledger"
	TableUsage        = "usage"
	TableAnalytics    = "analytics"
	// TableRollups holds each meter's usage per minute and per hour, written in the claim
	// transaction that bills it: what the usage query reads.
	TableRollups  = "rollups"
	QueueEvents   = "events"
	BucketArchive = "archive"
)

// Logical names of the usage holds' tables.
const (
	TableHolds      = "holds"
	TableRateLimits = "ratelimits"
)

// The holds table's sparse lease index: only RUNNING holds carry IndexHoldsLeaseShard, so the
// sweeper reads exactly the holds it may have to expire, oldest lease first, and never scans.
// The partition key is spread over HoldsLeaseShards values so that no index partition takes
// every running hold's lease renewals.
const (
	IndexHoldsByLease        = "byLeaseExpiry"
	IndexHoldsLeaseShard     = "leaseShard"
	IndexHoldsLeaseExpiresAt = "leaseExpiresAtMs"
	HoldsLeaseShards         = 16
)

// Logical names of meter reporting and reconciliation's tables.
const (
	// TableMeters is the reporter's state per (account, feature, cycle): what was last sent to
	// each provider, and the lease that keeps two reporters off one cycle.
	TableMeters = "meters"
	// TableOutbox is the Stripe outbox: one row per meter event Ferry owes Stripe.
	TableOutbox = "outbox"
	// TableEvidence is the reconciler's evidence: one row per distinct set of numbers.
	TableEvidence = "evidence"
	// TableReview is the review list: what only a person can settle (closed cycles, over-billing
	// Stripe no longer lets Ferry cancel).
	TableReview = "review"
)

// The usage table's sparse report index: a usage row that changed since its cycle was last
// reported carries IndexUsageReportBucket (and the time it was first marked), which puts it in
// the index. A row that is already marked is written with the same two values, so its index entry
// does not change and the write costs the index nothing. The partition key is spread over
// UsageReportBuckets values by the usage partition, so every row of one cycle shares a bucket.
const (
	IndexUsageReportDue    = "byReportDue"
	IndexUsageReportBucket = "reportBucket"
	IndexUsageReportDueAt  = "reportDueAtMs"
	UsageReportBuckets     = 16
)

// The accounts table's list index: every account carries IndexAccountsListKey =
// AccountsListValue from its creation, so the nightly reconciler pages through every account, in
// id order, with Query (no function may Scan a table).
const (
	IndexAccountsList    = "byList"
	IndexAccountsListKey = "listKey"
	AccountsListValue    = "accounts"
)

// The ledger's sparse meter index: an event billed against a usage row carries that row's
// identity (IndexLedgerMeterRow = "<usage partition>#<usage sort key>"), stamped by the billing
// transaction itself, so the reconciler can count the events behind every counter row, paged,
// without scanning the ledger. Keys only: later writes to the entry (the INSERTED mark) change
// no indexed attribute and cost the index nothing.
const (
	IndexLedgerByMeterRow = "byMeterRow"
	IndexLedgerMeterRow   = "meterRow"
	IndexLedgerEventID    = "eventId"
)

// The holds table's sparse settled index: a settled (or expired) hold carries its usage
// partition (IndexHoldsSettledPartition), so the reconciler sums what the settled holds of one
// (account, feature, cycle) charged. A final hold is never written again.
const (
	IndexHoldsBySettled        = "bySettledPartition"
	IndexHoldsSettledPartition = "settledPartition"
	IndexHoldsSettledAt        = "settledAtMs"
)

// The outbox's sparse due index: a row that still has to be sent (PENDING, or SENDING under a
// claim) carries IndexOutboxDueShard and the instant it next needs a drainer (IndexOutboxDueAt:
// its next attempt, or its claim's deadline). A SENT or DEAD row carries neither.
const (
	IndexOutboxByDue    = "byDue"
	IndexOutboxDueShard = "dueShard"
	IndexOutboxDueAt    = "dueAtMs"
	OutboxDueShards     = 8
)

// EventSourceBatchSize is how many messages one invocation of a queue's consumer gets, and
// EventSourceBatchingWindow how long Lambda gathers them first (SQS allows more than 10 only with
// a window): the deployment's event sources and `ferry dev`'s read both. The worker groups an
// invocation's messages by account into units of at most 97 events (event.MaxPackedEvents: one
// transaction holds 97 entries, the meter row, its mark and the unit's analytics rows item), so
// 97 single-event messages of one account are one transaction and one archive object; a bigger
// batch would leave a remainder unit, a smaller one pays the per-unit writes more often. Failed
// messages are reported one by one (ReportBatchItemFailures), so a bigger batch costs no
// redelivered work; the second of gathering is the latency a single event pays for it. Lambda
// also ends a batch at 6 MB of payload, whichever comes first.
const (
	EventSourceBatchSize      = 97
	EventSourceBatchingWindow = time.Second
)

// WorkerTimeout is the event worker's function timeout; the events queue's visibility timeout is
// six times it, as AWS recommends for SQS event sources.
const WorkerTimeout = 30 * time.Second

// Tables lists every table Ferry uses. Capabilities add theirs here.
var Tables = []Table{
	{
		Logical:      TableAccounts,
		Purpose:      "accounts: plan, status, limit overrides, agreement start",
		PartitionKey: Attribute{"id", String},
		Indexes: []Index{{
			Name:         IndexAccountsList,
			PartitionKey: Attribute{IndexAccountsListKey, String},
			SortKey:      &Attribute{"id", String},
		}},
	},
	{
		Logical:      TableAPIKeys,
		Purpose:      "account API keys, stored as SHA-256 hashes only",
		PartitionKey: Attribute{"keyHash", String},
	},
	{
		Logical:      TableAccountLinks,
		Purpose:      "billing-provider ids linked to accounts (Kinde and Stripe customers, Kinde agreements): one item per id, so each names at most one account",
		PartitionKey: Attribute{"link", String},
	},
	{
		Logical:      TableLedger,
		Purpose:      "the event ledger: one item per (account, event id); the claim and the billing checkpoint",
		PartitionKey: Attribute{"pk", String},
		Indexes: []Index{{
			Name:         IndexLedgerByFailure,
			PartitionKey: Attribute{IndexLedgerFailureKey, String},
			SortKey:      &Attribute{IndexLedgerFailedAt, Number},
		}, {
			Name:         IndexLedgerByMeterRow,
			PartitionKey: Attribute{IndexLedgerMeterRow, String},
			SortKey:      &Attribute{IndexLedgerEventID, String},
		}},
	},
	{
		Logical:      TableUsage,
		Purpose:      "usage per (account, feature, cycle): the budget row, the counter shards and the corrections",
		PartitionKey: Attribute{"pk", String},
		SortKey:      &Attribute{"sk", String},
		Indexes: []Index{{
			Name:         IndexUsageReportDue,
			PartitionKey: Attribute{IndexUsageReportBucket, String},
			SortKey:      &Attribute{IndexUsageReportDueAt, Number},
		}},
	},
	{
		Logical:      TableAnalytics,
		Purpose:      "analytics rows, keyed for per-account, per-time-range queries",
		PartitionKey: Attribute{"pk", String},
		SortKey:      &Attribute{"sk", String},
	},
	{
		Logical:      TableRollups,
		Purpose:      "usage per (account, meter) and minute or hour, one attribute per group of dimension values, written with the claim that bills it; what the usage query reads",
		PartitionKey: Attribute{"pk", String},
		SortKey:      &Attribute{"sk", String},
		// Minute items expire RollupMinuteRetention after their minute; hour items carry no
		// expiry and are kept.
		TTLAttribute: RollupTTLAttribute,
	},
	{
		Logical:      TableIdempotency,
		Purpose:      "Idempotency-Key claims and stored answers, one item per (caller, route, key)",
		PartitionKey: Attribute{"pk", String},
		TTLAttribute: IdempotencyTTLAttribute,
	},
	{
		Logical:      TableHolds,
		Purpose:      "usage holds (one item per (account, job key)) and their charge steps (one item per step key)",
		PartitionKey: Attribute{"pk", String},
		SortKey:      &Attribute{"sk", String},
		// Settled holds and steps expire after their retention; running holds carry no TTL.
		TTLAttribute: "expiresAt",
		Indexes: []Index{{
			Name:         IndexHoldsByLease,
			PartitionKey: Attribute{IndexHoldsLeaseShard, String},
			SortKey:      &Attribute{IndexHoldsLeaseExpiresAt, Number},
		}, {
			Name:         IndexHoldsByAccount,
			PartitionKey: Attribute{IndexHoldsAccountStatus, String},
			SortKey:      &Attribute{IndexHoldsCreatedAt, Number},
		}, {
			Name:         IndexHoldsBySettled,
			PartitionKey: Attribute{IndexHoldsSettledPartition, String},
			SortKey:      &Attribute{IndexHoldsSettledAt, Number},
			// The reconciler sums what each settled hold charged; a final hold is written once.
			ProjectAll: true,
		}},
	},
	{
		Logical:      TableMeters,
		Purpose:      "meter reporting state per (account, feature, cycle): the last total sent to each provider and the reporter's lease",
		PartitionKey: Attribute{"pk", String},
	},
	{
		Logical:      TableOutbox,
		Purpose:      "the Stripe outbox: one row per meter event owed, keyed by (account, feature, cycle) and the total it brings the meter to; its key is the identifier Stripe sees",
		PartitionKey: Attribute{"pk", String},
		SortKey:      &Attribute{"sk", String},
		Indexes: []Index{{
			Name:         IndexOutboxByDue,
			PartitionKey: Attribute{IndexOutboxDueShard, String},
			SortKey:      &Attribute{IndexOutboxDueAt, Number},
		}},
	},
	{
		Logical:      TableEvidence,
		Purpose:      "reconciliation evidence: one row per (account, cycle, feature, provider) and distinct set of numbers (ledger, sent, provider, verdict)",
		PartitionKey: Attribute{"pk", String},
		SortKey:      &Attribute{"sk", String},
	},
	{
		Logical:      TableReview,
		Purpose:      "the review list: closed cycles that drifted, and over-billing that can no longer be cancelled",
		PartitionKey: Attribute{"pk", String},
		SortKey:      &Attribute{"sk", String},
	},
	{
		Logical:      TableRateLimits,
		Purpose:      "fixed-window rate-limit counters (one small item per account and minute), kept off the budget rows",
		PartitionKey: Attribute{"pk", String},
		TTLAttribute: "expiresAt",
	},
	{
		Logical:      TableInbox,
		Purpose:      "the webhook inbox: one partition per stored billing event (the event, its verified payload, a receipt per delivery), and the provider meter marks",
		PartitionKey: Attribute{"pk", String},
		SortKey:      &Attribute{"sk", String},
		// Events, payloads and receipts expire long after every provider's retry horizon
		// (Kinde about 36 hours, Stripe 3 days, events listable for 30 days).
		TTLAttribute: InboxTTLAttribute,
		Indexes: []Index{
			{Name: IndexInboxAll, PartitionKey: Attribute{InboxAttrListAll, String}, SortKey: &Attribute{InboxAttrListOrder, String}},
			{Name: IndexInboxStatus, PartitionKey: Attribute{InboxAttrListStatus, String}, SortKey: &Attribute{InboxAttrListOrder, String}},
			{Name: IndexInboxAccount, PartitionKey: Attribute{InboxAttrListAccount, String}, SortKey: &Attribute{InboxAttrListOrder, String}},
			{Name: IndexInboxAccountStatus, PartitionKey: Attribute{InboxAttrListAccountStatus, String}, SortKey: &Attribute{InboxAttrListOrder, String}},
			{Name: IndexInboxDue, PartitionKey: Attribute{InboxAttrDueShard, String}, SortKey: &Attribute{InboxAttrDueAtMs, Number}},
		},
	},
	{
		Logical:      TableConsole,
		Purpose:      "the operator console: one item per signed-in session (keyed by its token's hash) and one per lab slot, each expiring",
		PartitionKey: Attribute{"pk", String},
		TTLAttribute: ConsoleTTLAttribute,
	},
	{
		Logical:      TableNotifications,
		Purpose:      "the notifications outbox: per notification (keyed by what it is about, so it exists once) its item and one delivery item per endpoint, with the delivery's tries and answer",
		PartitionKey: Attribute{"pk", String},
		SortKey:      &Attribute{"sk", String},
		TTLAttribute: NotificationsTTLAttribute,
		Indexes: []Index{
			{Name: IndexNotificationsDue, PartitionKey: Attribute{NotificationsAttrDueShard, String}, SortKey: &Attribute{NotificationsAttrDueAtMs, Number}},
			{Name: IndexNotificationsByEndpoint, PartitionKey: Attribute{NotificationsAttrEndpoint, String}, SortKey: &Attribute{NotificationsAttrLogOrder, String}},
			{Name: IndexNotificationsByAccount, PartitionKey: Attribute{NotificationsAttrAccount, String}, SortKey: &Attribute{NotificationsAttrListOrder, String}},
		},
	},
	{
		Logical:      TableWebhookEndpoints,
		Purpose:      "the webhook endpoints the operator registered: URL, the notification kinds and accounts each wants, its signing secrets",
		PartitionKey: Attribute{"pk", String},
		Indexes:      []Index{{Name: IndexWebhookEndpointsList, PartitionKey: Attribute{IndexWebhookEndpointsListKey, String}, SortKey: &Attribute{"pk", String}}},
	},
	{
		Logical:      TableGrants,
		Purpose:      "allowance grant rows, one per (account, feature, cycle, plan), and per (account, feature, cycle) the head item that versions them; a cycle's allowance limit is the sum of its rows",
		PartitionKey: Attribute{"pk", String},
		SortKey:      &Attribute{"sk", String},
	},
}

// RollupTTLAttribute is the epoch-seconds attribute DynamoDB expires minute rollup items by;
// RollupMinuteRetention is how long after its minute a minute item is kept (an hour item is
// kept for good). A query that needs minute detail older than that is refused, not answered
// from what is left.
const (
	RollupTTLAttribute    = "expiresAt"
	RollupMinuteRetention = 40 * 24 * time.Hour
)

// TableIdempotency is the logical name of the table the idempotency middleware claims keys in.
// Every function that serves a mutating route needs read-write access to it.
const TableIdempotency = "idempotency"

// IdempotencyTTLAttribute is the epoch-seconds attribute DynamoDB expires idempotency records by,
// once their retention has passed.
const IdempotencyTTLAttribute = "expiresAt"

// Queues lists every queue Ferry uses.
var Queues = []Queue{
	{
		Logical:           QueueEvents,
		Purpose:           "accepted usage events on their way to the worker",
		VisibilityTimeout: 6 * WorkerTimeout,
		Retention:         4 * 24 * time.Hour,
		MaxReceiveCount:   5,
		DLQRetention:      14 * 24 * time.Hour,
	},
	{
		Logical:           QueueInbox,
		Purpose:           "nudges that start the inbox worker on a stored billing event (the sweep finds any nudge that is lost)",
		VisibilityTimeout: 6 * InboxWorkerTimeout,
		Retention:         4 * 24 * time.Hour,
		MaxReceiveCount:   5,
		DLQRetention:      14 * 24 * time.Hour,
	},
}

// Buckets lists every bucket Ferry uses.
var Buckets = []Bucket{
	{Logical: BucketArchive, Purpose: "the event archive: every accepted payload, partitioned by date"},
}

// TableByLogical returns the definition of a table.
func TableByLogical(logical string) (Table, bool) {
	for _, t := range Tables {
		if t.Logical == logical {
			return t, true
		}
	}
	return Table{}, false
}

// QueueByLogical returns the definition of a queue.
func QueueByLogical(logical string) (Queue, bool) {
	for _, q := range Queues {
		if q.Logical == logical {
			return q, true
		}
	}
	return Queue{}, false
}

// Names maps logical resource names to physical ones (table names, queue URLs, bucket names):
// every resource, as an operator's tools and the local stack see them. A function sees only its
// Grant.
type Names struct {
	Tables  map[string]string
	Queues  map[string]string // logical → queue URL, including DLQs
	Buckets map[string]string
}

// Table returns the physical name of a table; an unknown logical name is a programmer error.
func (n Names) Table(logical string) string {
	name, ok := n.Tables[logical]
	if !ok {
		panic(fmt.Sprintf("resources: no physical name for table %q", logical))
	}
	return name
}

// QueueURL returns the URL of a queue.
func (n Names) QueueURL(logical string) string {
	url, ok := n.Queues[logical]
	if !ok {
		panic(fmt.Sprintf("resources: no URL for queue %q", logical))
	}
	return url
}

// Bucket returns the physical name of a bucket.
func (n Names) Bucket(logical string) string {
	name, ok := n.Buckets[logical]
	if !ok {
		panic(fmt.Sprintf("resources: no physical name for bucket %q", logical))
	}
	return name
}

// PhysicalName is the physical name of a resource under a prefix ("ferry-dev" + "ledger").
func PhysicalName(prefix, logical string) string {
	if prefix == "" {
		return logical
	}
	return prefix + "-" + logical
}

var envUnsafe = regexp.MustCompile(`[^A-Z0-9]`)

// lookupEnv reads the process's environment.
var lookupEnv = os.LookupEnv

// EnvVar is the environment variable that carries a resource's physical name (or queue URL) to a
// function: FERRY_TABLE_LEDGER, FERRY_QUEUE_EVENTS_DLQ, FERRY_BUCKET_ARCHIVE.
func EnvVar(kind, logical string) string {
	return "FERRY_" + kind + "_" + envUnsafe.ReplaceAllString(strings.ToUpper(logical), "_")
}

// Environment variables a function reads besides the resource names. The CDK app sets them;
// internal/app reads them.
const (
	EnvAdminKey          = "FERRY_ADMIN_KEY"            // the operator key itself (local use)
	EnvAdminKeySecretARN = "FERRY_ADMIN_KEY_SECRET_ARN" // the Secrets Manager secret holding it (AWS)
	EnvPlans             = "FERRY_PLANS"                // JSON plan catalog replacing the built-in one
	EnvLogLevel          = "FERRY_LOG_LEVEL"            // debug, info, warn or error

	// Where usage holds read limits: "plan" (default) or "kinde", and the Kinde client.
	EnvLimitsSource         = "FERRY_LIMITS_SOURCE"
	EnvKindeDomain          = "FERRY_KINDE_DOMAIN"
	EnvKindeClientID        = "FERRY_KINDE_CLIENT_ID"
	EnvKindeClientSecret    = "FERRY_KINDE_CLIENT_SECRET"     // the secret itself (local use)
	EnvKindeClientSecretARN = "FERRY_KINDE_CLIENT_SECRET_ARN" // the Secrets Manager secret (AWS)

	// Meter reporting: whether usage is reported to Kinde (the Kinde client above). Reporting
	// to Stripe uses the Stripe API settings of inbox.go (EnvStripeAPIKey,
	// EnvStripeAPIKeySecretARN, EnvStripeAPIBase).
	EnvReportKinde = "FERRY_REPORT_KINDE" // "true": report usage to Kinde's meters

	// EnvRetiredBatchMode is a setting earlier releases read on the ingest and worker functions
	// to choose between two worker designs: "true" the design every deployment now runs, anything
	// else the per-event worker, which was retired. This release uses it for nothing; those two
	// functions only check it at start (RetiredBatchModeWhy).
	EnvRetiredBatchMode = "FERRY_BATCH_MODE"
)

// RetiredBatchModeWhy is what replaced EnvRetiredBatchMode: the ingest and worker functions start
// with it set to true, the design they run anyway, logging that it is ignored, and refuse to start
// with any other value, which asks for a worker this release does not have.
const RetiredBatchModeWhy = "the per-event worker was retired: every deployment runs the one worker design " +
	"(units of one account's events, claimed and metered in one transaction; docs/performance.md)"

// Environment kinds for EnvVar.
const (
	KindTable  = "TABLE"
	KindQueue  = "QUEUE"
	KindBucket = "BUCKET"
)

// Env returns the environment variables that carry these names to a function.
func (n Names) Env() map[string]string {
	env := map[string]string{}
	for l, v := range n.Tables {
		env[EnvVar(KindTable, l)] = v
	}
	for l, v := range n.Queues {
		env[EnvVar(KindQueue, l)] = v
	}
	for l, v := range n.Buckets {
		env[EnvVar(KindBucket, l)] = v
	}
	return env
}

// NamesFromEnv reads every resource's physical name from the environment. A missing variable is
// an error naming it, so a misconfigured function fails at start, not on its first request.
func NamesFromEnv(lookup func(string) (string, bool)) (Names, error) {
	if lookup == nil {
		lookup = lookupEnv
	}
	n := Names{Tables: map[string]string{}, Queues: map[string]string{}, Buckets: map[string]string{}}
	var missing []string
	get := func(kind, logical string, into map[string]string) {
		v, ok := lookup(EnvVar(kind, logical))
		if !ok || v == "" {
			missing = append(missing, EnvVar(kind, logical))
			return
		}
		into[logical] = v
	}
	for _, t := range Tables {
		get(KindTable, t.Logical, n.Tables)
	}
	for _, q := range Queues {
		get(KindQueue, q.Logical, n.Queues)
		get(KindQueue, q.DLQLogical(), n.Queues)
	}
	for _, b := range Buckets {
		get(KindBucket, b.Logical, n.Buckets)
	}
	if len(missing) > 0 {
		return Names{}, fmt.Errorf("missing environment: %s", strings.Join(missing, ", "))
	}
	return n, nil
}

// Access is what a function may do to one resource.
type Access string

// Access levels. Each function is granted exactly the access its entry lists, no more.
const (
	Read      Access = "read"       // GetItem, Query, BatchGetItem, ConditionCheck / GetObject
	ReadWrite Access = "read-write" // Read plus PutItem, UpdateItem, DeleteItem, BatchWriteItem / PutObject
	Send      Access = "send"       // SendMessage
	Consume   Access = "consume"    // ReceiveMessage, DeleteMessage, ChangeMessageVisibility
	// ConsumeAndSend consumes a queue and may also send to it (a worker that puts a message
	// back with a delay).
	ConsumeAndSend Access = "consume-send"
)

// Consumes reports whether the access consumes a queue (through an event source).
func (a Access) Consumes() bool { return a == Consume || a == ConsumeAndSend }

// Sends reports whether the access may send to a queue.
func (a Access) Sends() bool { return a == Send || a == ConsumeAndSend }

// Function describes one Lambda function: its code lives in functions/<Name>.
type Function struct {
	Name     string
	Purpose  string
	Timeout  time.Duration
	MemoryMB int
	// ReservedConcurrency caps concurrent executions where that protects a hot row or a
	// provider's rate limit; 0 = none.
	ReservedConcurrency int
	// Tables, Queues and Buckets map logical names to the access the function needs.
	Tables  map[string]Access
	Queues  map[string]Access
	Buckets map[string]Access
	// Every runs the function on a schedule (EventBridge Scheduler; a ticker in ferry dev).
	Every time.Duration
	// LocalEvery, when set, is how often ferry dev and the test stacks run a scheduled function
	// instead: a local stack has no provider rate or cost to spare, and a developer watching a
	// notification arrive should not wait a minute for it.
	LocalEvery time.Duration
	// Secrets names the environment variables through which the function receives the ARNs of
	// the Secrets Manager secrets it may read (EnvAdminKeySecretARN, EnvKindeClientSecretARN).
	// The CDK app sets each one the deployment provides and grants read on that secret alone;
	// a function that lists no secret can read none.
	Secrets []string
	// ReadsLimits marks a function that admits usage holds, and so reads limits from the
	// deployment's limit source: it gets EnvLimitsSource and, for Kinde, the Kinde domain and
	// client id. It must also list EnvKindeClientSecretARN in Secrets.
	ReadsLimits bool
	// ReportsUsage marks a function that talks to the providers' meters (reporting, draining,
	// reconciling): it gets the Kinde domain and client id when usage is reported to Kinde, and
	// must list EnvKindeClientSecretARN and EnvStripeAPIKeySecretARN in Secrets.
	ReportsUsage bool
	// Settings names the deployment settings the function receives as environment variables
	// (EnvKindeWebhookJWKSURL, EnvStripeRefetch, EnvStripeAPIBase); the CDK app sets each one
	// the deployment configures.
	Settings []string
}

// Function names.
const (
	FunctionIngest = "ingest"
	FunctionAPI    = "api"
	FunctionWorker = "worker"
)

// Functions of the usage holds.
const (
	FunctionHolds   = "holds"
	FunctionSweeper = "sweeper"
)

// Functions of meter reporting and reconciliation.
const (
	FunctionReporter   = "reporter"
	FunctionDrainer    = "drainer"
	FunctionReconciler = "reconciler"
	// FunctionMeterAPI serves the operator routes of reporting and reconciliation.
	FunctionMeterAPI = "meterapi"
)

// Timeouts of the reporting functions. The reporter and the drainer run every minute and stop
// well inside it; the reconciler runs nightly over every account, in pages, and stops cleanly
// before its timeout.
const (
	ReporterTimeout   = 50 * time.Second
	DrainerTimeout    = 50 * time.Second
	ReconcilerTimeout = 15 * time.Minute
	ReconcileEvery    = 24 * time.Hour
)

// ProviderFacingConcurrency is the reserved concurrency of the scheduled functions that call the
// providers' meter APIs (reporter, drainer, reconciler): one run at a time keeps Ferry's request
// rate to Stripe and Kinde what one run makes, whatever the scheduler delivers.
const ProviderFacingConcurrency = 1

// SweeperTimeout is the sweeper's function timeout: well inside its one-minute schedule, so two
// runs overlap only when one is stuck.
const SweeperTimeout = 50 * time.Second

// Functions lists every function. Capabilities add theirs here.
var Functions = []Function{
	{
		Name:     FunctionIngest,
		Purpose:  "POST /v1/events: authenticate, advisory gate, enqueue",
		Timeout:  10 * time.Second,
		MemoryMB: 256,
		Tables:   map[string]Access{TableAPIKeys: Read, TableAccounts: Read, TableUsage: Read, TableLedger: Read, TableIdempotency: ReadWrite},
		Queues:   map[string]Access{QueueEvents: Send},
	},
	{
		Name:    FunctionAPI,
		Purpose: "accounts, event status, usage and usage query routes, the operator console, and every path no route declares",
		// The operator routes check the operator key. GET /v1/usage shows the limit the next
		// admission is held to, so it reads limits from the same source as the holds.
		ReadsLimits: true,
		Secrets:     []string{EnvAdminKeySecretARN, EnvKindeClientSecretARN},
		// The console's labs drive the stack through its public URL, inside one request.
		Settings: []string{EnvAPIURL},
		Timeout:  APITimeout,
		MemoryMB: 256,
		Tables: map[string]Access{
			TableAPIKeys: ReadWrite, TableAccounts: ReadWrite, TableAccountLinks: ReadWrite,
			// The ledger: an operator's redrive reopens an UNINSERTABLE event.
			TableLedger: ReadWrite,
			TableUsage:  Read, TableIdempotency: ReadWrite,
			// GET /v1/usage shows an allowance's grant rows; the billing-events routes read
			// events and replay them (a write and a nudge).
			TableGrants: Read, TableInbox: ReadWrite,
			// GET /v1/holds lists an account's holds; the console keeps its sessions and lab
			// slots.
			TableHolds: Read, TableConsole: ReadWrite,
			// GET /v1/usage/query reads the meters' rollups.
			TableRollups: Read,
			// The webhook endpoints' routes: registration, rotation, the delivery log, replay.
			TableWebhookEndpoints: ReadWrite, TableNotifications: ReadWrite,
		},
		// A redrive queues the archived payload again for the worker.
		Queues:  map[string]Access{QueueInbox: Send, QueueEvents: Send},
		Buckets: map[string]Access{BucketArchive: Read},
	},
	{
		Name:     FunctionWorker,
		Purpose:  "the SQS worker: claim, bill, archive, insert, mark",
		Timeout:  WorkerTimeout,
		MemoryMB: 512,
		Tables: map[string]Access{
			TableAccounts: ReadWrite, TableLedger: ReadWrite, TableUsage: ReadWrite, TableAnalytics: ReadWrite,
			// A unit's claim reads and writes the rollups of what it moves, and puts the
			// notifications it decides (a threshold crossed, the limit reached).
			TableRollups: ReadWrite, TableNotifications: ReadWrite,
		},
		Queues:  map[string]Access{QueueEvents: Consume},
		Buckets: map[string]Access{BucketArchive: ReadWrite},
	},
	{
		Name:     FunctionHolds,
		Purpose:  "usage holds: reserve (check and hold in one transaction), charge, settle, read",
		Timeout:  10 * time.Second,
		MemoryMB: 256,
		// Reserve reads the limit of each admission from the configured source.
		ReadsLimits: true,
		Secrets:     []string{EnvKindeClientSecretARN},
		// Accounts: read, plus the one-time first-usage stamp that fixes the billing cycle.
		// Grants: an allowance feature's limit is the sum of its grant rows, and the first
		// admission of a cycle writes the cycle's opening row.
		Tables: map[string]Access{
			TableAPIKeys: Read, TableAccounts: ReadWrite, TableUsage: ReadWrite,
			TableHolds: ReadWrite, TableRateLimits: ReadWrite, TableIdempotency: ReadWrite,
			TableGrants: ReadWrite,
			// A reservation the limit refuses tells the platform, once a cycle (hold.refused).
			TableNotifications: ReadWrite,
		},
	},
	{
		Name:     FunctionSweeper,
		Purpose:  "every minute: settle RUNNING holds whose lease expired, at their recorded usage, as EXPIRED",
		Timeout:  SweeperTimeout,
		MemoryMB: 256,
		// No reserved concurrency: a run ends before the next starts, and the rare overlap (an
		// asynchronous retry of a failed run) is safe, since every settlement is conditioned on
		// the hold's revision; capping it at one would turn that overlap into throttle alarms.
		Tables: map[string]Access{TableHolds: ReadWrite, TableUsage: ReadWrite},
		Every:  time.Minute,
	},
	{
		Name:    FunctionReporter,
		Purpose: "every minute: report up to 100 changed cycles to the providers (Kinde absolute totals, Stripe through the outbox), and reconcile cycles whose provider meter changed",
		Timeout: ReporterTimeout, MemoryMB: 256,
		// One run at a time: EventBridge Scheduler delivers at least once, and a second run would
		// report the same cycles again, at twice the rate the providers' limits allow.
		ReservedConcurrency: ProviderFacingConcurrency,
		ReportsUsage:        true,
		Secrets:             []string{EnvKindeClientSecretARN, EnvStripeAPIKeySecretARN},
		// The inbox: the provider meter marks it reads and clears.
		Tables: func() map[string]Access {
			t := reconcileTables()
			t[TableInbox] = ReadWrite
			return t
		}(),
		Every: time.Minute,
	},
	{
		Name:    FunctionDrainer,
		Purpose: "every minute: send the Stripe outbox's due rows under claim, back off on failure, dead-letter after a bounded number of tries",
		Timeout: DrainerTimeout, MemoryMB: 256,
		// One run at a time, for Stripe's rate limit (see the reporter).
		ReservedConcurrency: ProviderFacingConcurrency,
		ReportsUsage:        true,
		Secrets:             []string{EnvStripeAPIKeySecretARN},
		// Notifications: a row marked DEAD is marked with its notification (outbox.dead).
		Tables: map[string]Access{TableOutbox: ReadWrite, TableReview: ReadWrite, TableNotifications: ReadWrite},
		Every:  time.Minute,
	},
	{
		Name:    FunctionReconciler,
		Purpose: "nightly: prove every account's provider meter matches the ledger, repair it from the ledger, store the evidence",
		Timeout: ReconcilerTimeout, MemoryMB: 512,
		// One nightly run at a time: a duplicate delivery would read every account's provider
		// meters twice within the providers' rate limits.
		ReservedConcurrency: ProviderFacingConcurrency,
		ReportsUsage:        true,
		Secrets:             []string{EnvKindeClientSecretARN, EnvStripeAPIKeySecretARN},
		Tables:              reconcileTables(),
		Every:               ReconcileEvery,
	},
	{
		Name:    FunctionMeterAPI,
		Purpose: "operator routes of reporting and reconciliation: corrections, report now, reconcile now, evidence, review list",
		// Under the Idempotency-Key lease (30 s) and API Gateway's 30 s integration timeout.
		Timeout: 25 * time.Second, MemoryMB: 512,
		ReportsUsage: true,
		Secrets:      []string{EnvAdminKeySecretARN, EnvKindeClientSecretARN, EnvStripeAPIKeySecretARN},
		Tables: func() map[string]Access {
			t := reconcileTables()
			t[TableIdempotency] = ReadWrite
			// The operator's console session authenticates these routes too.
			t[TableConsole] = Read
			return t
		}(),
	},
	{
		Name:     FunctionWebhooks,
		Purpose:  "POST /v1/webhooks/kinde and /v1/webhooks/stripe: verify the signature, store the event with its receipt, nudge the worker",
		Timeout:  WebhooksTimeout,
		MemoryMB: 256,
		Secrets:  []string{EnvStripeWebhookSecretARN},
		Settings: []string{EnvKindeWebhookJWKSURL},
		Tables:   map[string]Access{TableInbox: ReadWrite},
		Queues:   map[string]Access{QueueInbox: Send},
	},
	{
		Name:     FunctionInbox,
		Purpose:  "the inbox worker: claim a stored billing event under a lease, apply its effect and mark it in one transaction",
		Timeout:  InboxWorkerTimeout,
		MemoryMB: 256,
		Secrets:  []string{EnvStripeAPIKeySecretARN},
		Settings: []string{EnvStripeRefetch, EnvStripeAPIBase},
		// Accounts: the plan and status a billing event changes. Grants: the allowance rows.
		// Notifications: what a change tells (account.plan_changed, account.status_changed, in
		// the apply transaction) and billing_event.dead.
		Tables: map[string]Access{TableInbox: ReadWrite, TableAccounts: ReadWrite, TableAccountLinks: Read, TableGrants: ReadWrite,
			TableNotifications: ReadWrite},
		// It consumes nudges and sends one back, delayed, for an event that is not due yet.
		Queues: map[string]Access{QueueInbox: ConsumeAndSend},
	},
	{
		Name:    FunctionNotifier,
		Purpose: "every minute: fan new notifications out to the endpoints that want them and deliver them signed (Standard Webhooks), under claim, backing off with jitter, DEAD after a bounded number of tries",
		Timeout: NotifierTimeout, MemoryMB: 256,
		// One run at a time: a second run would only contend for the same claims.
		ReservedConcurrency: 1,
		Tables:              map[string]Access{TableNotifications: ReadWrite, TableWebhookEndpoints: Read},
		Every:               NotifierEvery,
		LocalEvery:          NotifierLocalEvery,
	},
	{
		Name:     FunctionInboxSweep,
		Purpose:  "every minute: nudge the worker for every billing event that is due or whose lease lapsed, so no stored event is stranded",
		Timeout:  InboxSweepTimeout,
		MemoryMB: 256,
		Tables:   map[string]Access{TableInbox: Read},
		Queues:   map[string]Access{QueueInbox: Send},
		Every:    time.Minute,
	},
}

// reconcileTables is what reporting and reconciling read and write: the usage rows (marks,
// counters, corrections), the ledger's and the holds' indexes (the record the totals are proven
// from), the accounts, and the reporting tables.
func reconcileTables() map[string]Access {
	return map[string]Access{
		TableAccounts: Read, TableLedger: Read, TableHolds: Read, TableUsage: ReadWrite,
		TableMeters: ReadWrite, TableOutbox: ReadWrite, TableEvidence: ReadWrite, TableReview: ReadWrite,
		// Evidence whose verdict is not match is stored with its notification
		// (reconcile.mismatch), and an outbox row these functions drain to DEAD is marked with
		// its own (outbox.dead).
		TableNotifications: ReadWrite,
	}
}

// FunctionByName returns a function's definition.
func FunctionByName(name string) (Function, bool) {
	for _, f := range Functions {
		if f.Name == name {
			return f, true
		}
	}
	return Function{}, false
}
