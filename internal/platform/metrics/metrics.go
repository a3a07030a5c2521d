// Package metrics emits Ferry's counters as CloudWatch embedded metric format (EMF) log lines:
// Lambda ships stdout to CloudWatch Logs, which turns each line into metrics without an API call
// on the hot path. The names here are the ones the CDK app's alarms watch.
package metrics

import (
	"encoding/json"
	"io"
	"sort"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of every Ferry metric.
const Namespace = "Ferry"

// Metric names.
const (
	EventsQueued       = "EventsQueued"       // ingest: events durably queued
	EventsRefused      = "EventsRefused"      // ingest: 402 from the advisory gate
	GateFailedOpen     = "GateFailedOpen"     // ingest: the advisory gate could not read and let the event through
	EventsBilled       = "EventsBilled"       // worker: checkpoint stamped
	EventsInserted     = "EventsInserted"     // worker: ledger marked INSERTED
	EventsDuplicate    = "EventsDuplicate"    // worker: redelivery of a finished event, acked with no write
	EventsRejected     = "EventsRejected"     // worker: REJECTED terminally (limit reached, plan inactive)
	EventsQuarantined  = "EventsQuarantined"  // worker: analytics row refused, will retry
	EventsUninsertable = "EventsUninsertable" // worker: UNINSERTABLE terminally
	WorkerFailures     = "WorkerFailures"     // worker: a message failed and will be redelivered
)

// Metric names of the usage holds.
const (
	HoldsAdmitted    = "HoldsAdmitted"    // holds: a new hold was opened
	HoldsRefused     = "HoldsRefused"     // holds: 402, the limit had no room
	HoldsRateLimited = "HoldsRateLimited" // holds: 429, too many new holds this minute
	HoldsCapped      = "HoldsCapped"      // holds: a charge step was cut to what the hold had left
	HoldsSettled     = "HoldsSettled"     // holds: settled by its worker
	HoldsExpired     = "HoldsExpired"     // sweeper: settled as EXPIRED after its lease ran out
	SweepFailures    = "SweepFailures"    // sweeper: a lapsed hold could not be settled this run (the run then fails, and the function's Errors alarm fires)
	LimitsStale      = "LimitsStale"      // limits: the provider failed and a stale limit was used
	LimitsUnknown    = "LimitsUnknown"    // limits: no usable limit; an admission failed closed (503)
)

// Metric names of meter reporting and reconciliation.
const (
	ReportsSent      = "ReportsSent"      // reporter: a cycle's total reached a provider (Kinde written, or a Stripe outbox row committed)
	ReportFailures   = "ReportFailures"   // reporter: a cycle's report failed and its mark stays for the next run
	OutboxSent       = "OutboxSent"       // drainer: a Stripe meter event was accepted
	OutboxRetried    = "OutboxRetried"    // drainer: a send failed and the row backs off
	OutboxDead       = "OutboxDead"       // drainer: a row failed its last try (or for good) and is DEAD
	ReviewListed     = "ReviewListed"     // reporter, drainer, reconciler: a new entry on the review list
	ReconcileChecked = "ReconcileChecked" // reconciler: a (account, feature, cycle, provider) was compared, by verdict
	// ReconcileUnreadable, ReconcileDrift and ReconcileUnconfirmed alarm: a provider that could
	// not be read, a closed cycle that drifted, and a repair whose read-back did not match.
	ReconcileUnreadable  = "ReconcileUnreadable"
	ReconcileDrift       = "ReconcileDrift"
	ReconcileRepaired    = "ReconcileRepaired"
	ReconcileUnconfirmed = "ReconcileUnconfirmed"
	CountersRebuilt      = "CountersRebuilt" // reconciler: a counter row differed from the ledger rows behind it and was rebuilt
)

// Metric names of the webhook inbox.
const (
	WebhooksStored    = "WebhooksStored"    // webhooks: a new billing event was stored
	WebhooksDuplicate = "WebhooksDuplicate" // webhooks: a copy of a stored event was counted
	WebhooksRefused   = "WebhooksRefused"   // webhooks: 401, the signature could not be verified (nothing stored)
	WebhooksStoreFail = "WebhooksStoreFail" // webhooks: 503, the delivery could not be stored (the provider retries)
	InboxApplied      = "InboxApplied"      // inbox worker: an event's effect and its APPLIED mark committed
	InboxIgnored      = "InboxIgnored"      // inbox worker: an event was IGNORED with its reason
	InboxFailed       = "InboxFailed"       // inbox worker: an attempt failed; the event waits out its backoff
	InboxDead         = "InboxDead"         // inbox worker: an event failed its last attempt and is DEAD
	InboxSweepNudged  = "InboxSweepNudged"  // inbox sweep: due or lease-expired events the sweep nudged
)

// Metric names of the outgoing notifications.
const (
	NotificationsDelivered = "NotificationsDelivered" // notifier: an endpoint accepted a delivery (2xx)
	NotificationsRetried   = "NotificationsRetried"   // notifier: a delivery failed and backs off
	NotificationsDead      = "NotificationsDead"      // notifier: a delivery failed its last try (or for good) and is DEAD
)

// Alarm describes an alarm on a metric: it fires when the metric's sum over one period reaches
// Threshold. Every terminal failure state has one.
type Alarm struct {
	Metric      string
	Threshold   float64
	Description string
}

// Alarms are the alarms the CDK app creates on Ferry's own metrics. Capabilities add theirs.
var Alarms = []Alarm{
	{EventsUninsertable, 1, "An event's analytics row was refused too many times; it is UNINSERTABLE. Fix the drift, then re-drive it from the archive (ferry redrive)."},
	{LimitsUnknown, 1, "New holds are being refused (503): the billing provider's entitlements have been unreadable for longer than the stale allowance. Check the provider and its credentials."},
	{OutboxDead, 1, "A Stripe outbox row is DEAD: its meter event failed every try (or was refused for good) and is not retried. Its delta is not on the meter; the reconciler repairs the meter from the ledger (ferry reconcile --account), then check the row's lastError."},
	{ReconcileUnreadable, 1, "The reconciler could not read a provider's meter back, so a cycle is unproven. Check the provider's credentials and status; the next run retries."},
	{ReconcileDrift, 1, "A closed billing cycle's meter differs from the ledger. Ferry never writes a closed cycle: see GET /v1/reconcile/review and settle it with the provider."},
	{ReconcileUnconfirmed, 1, "The reconciler repaired a meter but its read-back did not equal the ledger. See the evidence (GET /v1/reconcile/evidence) and re-run ferry reconcile for the account."},
	{ReviewListed, 1, "A new entry is on the review list (GET /v1/reconcile/review): a closed cycle changed or drifted, or over-billing can no longer be cancelled. A person must settle it."},
	{CountersRebuilt, 1, "The reconciler rebuilt a usage counter that differed from the ledger rows behind it; this should never happen. See the reconciler's logs for the rows."},
	{WebhooksRefused, 5, "Webhook deliveries are being refused (401, nothing stored): a provider whose deliveries keep failing gives up on them (Kinde after 36 hours, Stripe after 3 days). Check the Stripe signing secret and the Kinde JWKS URL, or whether someone is sending forged deliveries."},
	{InboxDead, 1, "A billing event failed all of its attempts and is DEAD: the plan or allowance it carries is not applied. Read its reason (GET /v1/billing-events?status=DEAD), fix the cause, then replay it (POST /v1/billing-events/{id}/replay)."},
	{NotificationsDead, 1, "A webhook delivery is DEAD: the endpoint refused or did not answer every try (or the delivery could not be signed or sent at all), and Ferry stops trying. Read the endpoint's delivery log for the last status and error, fix the receiver, then replay the delivery (same webhook-id)."},
}

// Dimension is one metric dimension.
type Dimension struct{ Name, Value string }

// Recorder counts things. Implementations must be safe for concurrent use.
type Recorder interface {
	Count(name string, n int, dims ...Dimension)
}

// EMF writes one embedded-metric-format JSON line per Count.
type EMF struct {
	mu  sync.Mutex
	out io.Writer
	now func() time.Time
}

// NewEMF writes EMF lines to out (stdout in Lambda).
func NewEMF(out io.Writer, now func() time.Time) *EMF { return &EMF{out: out, now: now} }

// Count implements Recorder.
func (e *EMF) Count(name string, n int, dims ...Dimension) {
	dimNames := make([]string, 0, len(dims))
	line := map[string]any{name: n}
	for _, d := range dims {
		dimNames = append(dimNames, d.Name)
		line[d.Name] = d.Value
	}
	line["_aws"] = map[string]any{
		"Timestamp": e.now().UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  Namespace,
			"Dimensions": [][]string{dimNames},
			"Metrics":    []any{map[string]string{"Name": name, "Unit": "Count"}},
		}},
	}
	data, err := json.Marshal(line)
	if err != nil {
		return // every value above marshals; nothing to report to
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.out.Write(append(data, '\n'))
}

// Counter keeps counts in memory: for tests, ferry dev and benchmarks.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{counts: map[string]int{}} }

// Count implements Recorder; dimensions are ignored.
func (c *Counter) Count(name string, n int, _ ...Dimension) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[name] += n
}

// Get returns the count for name.
func (c *Counter) Get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[name]
}

// Snapshot returns a copy of every count, for printing.
func (c *Counter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Names returns the counted names, sorted.
func (c *Counter) Names() []string {
	snap := c.Snapshot()
	names := make([]string, 0, len(snap))
	for k := range snap {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Multi sends every count to each recorder.
type Multi []Recorder

// Count implements Recorder.
func (m Multi) Count(name string, n int, dims ...Dimension) {
	for _, r := range m {
		r.Count(name, n, dims...)
	}
}
