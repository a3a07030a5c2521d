// Package notify is what Ferry tells the platform: the notifications, each decided once, where
// the state it reports changes, and stored as the outbox row the notifier delivers from.
//
// A notification's key says what it is about — its kind, the account, the feature, the cycle
// and the threshold — so it exists once: the transaction that decides it puts it conditional on
// its absence (Put), and a second decision of the same thing (a redelivered unit, a unit that
// raced another) is cancelled by that condition, reads again and decides nothing. Its id, the
// webhook-id of every delivery of it, is a function of the key alone, and its body is fixed when
// it is written, so every attempt to every endpoint sends the same message.
//
// Layout of the notifications table: a notification's partition is "ntf#<id>"; its item has
// the sort key "notification", and each delivery of it to an endpoint (package drain) has
// "delivery#<endpoint>". A notification carries the due index's attributes until the notifier
// has fanned it out to the endpoints that want it.
package notify

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Kind is what a notification reports; it is the message's "type".
type Kind string

// Kinds.
const (
	// ThresholdCrossed: an account's usage of a capped feature reached one of its thresholds.
	ThresholdCrossed Kind = "threshold.crossed"
	// ThresholdResolved: a threshold told crossed this cycle is above the account's usage again:
	// its limit was raised, and a percent threshold moved up with it.
	ThresholdResolved Kind = "threshold.resolved"
	// LimitReached: an event was refused because the account's limit of a feature was reached
	// (once per account, feature, cycle and limit, not per event).
	LimitReached Kind = "limit.reached"
	// HoldRefused: a hold was refused because the account's limit of a feature was reached (once
	// per account, feature and cycle).
	HoldRefused Kind = "hold.refused"
	// ReconcileMismatch: the reconciler's verdict on a cycle's provider meter was not "match"
	// (once per piece of evidence: a distinct set of numbers).
	ReconcileMismatch Kind = "reconcile.mismatch"
	// OutboxDead: a meter event owed to Stripe failed every try and is DEAD (once per row).
	OutboxDead Kind = "outbox.dead"
	// BillingEventDead: a stored billing event (a provider's webhook) failed every attempt to
	// apply it and is DEAD (once per event).
	BillingEventDead Kind = "billing_event.dead"
	// PlanChanged and StatusChanged: a billing event changed an account's plan or status (once
	// per event).
	PlanChanged   Kind = "account.plan_changed"
	StatusChanged Kind = "account.status_changed"
)

// Kinds lists every kind, as endpoints subscribe to them.
var Kinds = []Kind{ThresholdCrossed, ThresholdResolved, LimitReached, HoldRefused, ReconcileMismatch, OutboxDead, BillingEventDead, PlanChanged, StatusChanged}

// PerCycle reports whether a kind is told once per account, feature and cycle (and threshold
// change, or limit); the others are told once per Subject.
func (k Kind) PerCycle() bool { return k.Threshold() || k == LimitReached || k == HoldRefused }

// Threshold reports whether a kind tells a change of a threshold's state.
func (k Kind) Threshold() bool { return k == ThresholdCrossed || k == ThresholdResolved }

// KnownKind reports whether k is a kind Ferry sends.
func KnownKind(k string) bool {
	for _, known := range Kinds {
		if string(known) == k {
			return true
		}
	}
	return false
}

// Notification is one thing Ferry tells the platform.
type Notification struct {
	Kind    Kind
	Account string
	// Feature and Meter are what it is about; Cycle the billing cycle (label).
	Feature string
	Meter   string
	Cycle   string
	// Threshold is the usage the threshold stands at; Percent its share of the limit when it
	// was given as one (0 for an absolute threshold and for limit.reached).
	Threshold int64
	Percent   int64
	// Change is, for the threshold kinds, which change of the threshold's state this is in the
	// cycle: 1 for its first crossing, 2 for its resolution, 3 for crossing it again, … (odd:
	// crossed, even: resolved). See ThresholdAlert.
	Change int64
	// Limit is the limit in force; Used the usage the deciding transaction brought the account
	// to (for limit.reached: the usage when the event was refused).
	Limit int64
	Used  int64
	// AtMs is when it was decided: the message's timestamp.
	AtMs int64
	// Subject is what a kind told once per thing is about (not PerCycle): the evidence's key,
	// the outbox row's identifier, the billing event's id. It is the notification's key.
	Subject string
	// Detail is what the kinds other than thresholds and limits say (Data's other members).
	Detail Detail
}

// Detail is the members of a message's data that only some kinds carry.
type Detail struct {
	// Requested is what a refused hold asked for (hold.refused).
	Requested int64 `json:"requested,omitempty"`
	// Provider ("kinde", "stripe") and Verdict are the reconciler's (reconcile.mismatch);
	// Ledger and Meter the figures it compared.
	Provider string `json:"provider,omitempty"`
	Verdict  string `json:"verdict,omitempty"`
	Ledger   *int64 `json:"ledger,omitempty"`
	Meter    *int64 `json:"providerMeter,omitempty"`
	// Event and EventType name a billing event (billing_event.dead, account.*_changed);
	// From and To are what it changed (a plan or a status).
	Event     string `json:"event,omitempty"`
	EventType string `json:"eventType,omitempty"`
	From      string `json:"from,omitempty"`
	To        string `json:"to,omitempty"`
	// Reason says why (the last error of something DEAD).
	Reason string `json:"reason,omitempty"`
}

// Key is what makes the notification one: the same kind for the same account, feature, cycle
// and threshold change (or limit) is the same notification.
func (n Notification) Key() string {
	if !n.Kind.PerCycle() {
		return string(n.Kind) + "\x00" + n.Subject
	}
	k := string(n.Kind) + "\x00" + n.Account + "\x00" + n.Feature + "\x00" + n.Cycle
	switch {
	case n.Kind.Threshold():
		k += "\x00" + ThresholdAlert(ThresholdDef(n.Percent, n.Threshold), n.Change)
	case n.Kind == LimitReached:
		k += "\x00" + LimitAlert(n.Limit)
	}
	return k
}

// ID is the notification's id: "ntf_" and 26 characters of base32 of its key's SHA-256. It is
// the webhook-id of every delivery of it.
func (n Notification) ID() string { return IDOf(n.Key()) }

// IDOf is the id of the notification keyed key.
func IDOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "ntf_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
}

// The alert keys: how a feature's budget row remembers what was decided on it this cycle (the
// row's "alerts" string set). Keys are only ever added to the set: one update cannot both add
// to a set and take from it, and a key written once never has to be taken back.
//
//   - A threshold is known by its definition (ThresholdDef), not by the usage it stands at,
//     which moves with the limit. Each change of its state this cycle adds one key,
//     ThresholdAlert(def, change): change 1 is its first crossing, 2 its resolution, 3 crossing
//     it again. The highest change present is its state (ThresholdChange): odd is crossed.
//   - limit.reached adds LimitAlert(limit): it is told once for each limit the account reaches
//     in a cycle.

// ThresholdDef names a threshold by how it was given: "p80" for 80% of the limit, "v5000" for
// an absolute 5,000 (percent is 0 then; at is the usage it stands at).
func ThresholdDef(percent, at int64) string {
	if percent > 0 {
		return "p" + strconv.FormatInt(percent, 10)
	}
	return "v" + strconv.FormatInt(at, 10)
}

// ThresholdAlert is the alert key of the change-th change of the threshold def's state.
func ThresholdAlert(def string, change int64) string {
	return def + "@" + strconv.FormatInt(change, 10)
}

// ThresholdChange is the state of threshold def as the row's alert keys record it: the number of
// its last change (0 if it has none this cycle). Odd means crossed.
func ThresholdChange(alerted map[string]bool, def string) int64 {
	var last int64
	for k := range alerted {
		rest, ok := strings.CutPrefix(k, def+"@")
		if !ok {
			continue
		}
		if c, err := strconv.ParseInt(rest, 10, 64); err == nil && c > last {
			last = c
		}
	}
	return last
}

// LimitAlert is the alert key of limit.reached at limit.
func LimitAlert(limit int64) string { return "limit=" + strconv.FormatInt(limit, 10) }

// Data is the message's data member: the account (left out only for billing_event.dead of an
// event no account is known for); the feature, cycle, limit and usage for the kinds about a
// feature's usage; the Detail of the others.
type Data struct {
	Account   string `json:"account,omitempty"`
	Feature   string `json:"feature,omitempty"`
	Meter     string `json:"meter,omitempty"`
	Cycle     string `json:"cycle,omitempty"`
	Threshold *int64 `json:"threshold,omitempty"`
	Percent   *int64 `json:"percent,omitempty"`
	Limit     *int64 `json:"limit,omitempty"`
	Used      *int64 `json:"used,omitempty"`
	Detail
}

// Message is the body every delivery of the notification sends, as Standard Webhooks suggests
// it: the type, the instant, the data.
type Message struct {
	ID        string `json:"id"`
	Type      Kind   `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      Data   `json:"data"`
}

// Message is the notification's message.
func (n Notification) Message() Message {
	d := Data{Account: n.Account, Feature: n.Feature, Meter: n.Meter, Cycle: n.Cycle, Detail: n.Detail}
	if n.Kind.PerCycle() {
		d.Limit, d.Used = &n.Limit, &n.Used
	}
	if n.Kind.Threshold() {
		d.Threshold = &n.Threshold
		if n.Percent > 0 {
			d.Percent = &n.Percent
		}
	}
	return Message{ID: n.ID(), Type: n.Kind, Timestamp: time.UnixMilli(n.AtMs).UTC().Format(time.RFC3339Nano), Data: d}
}

// Body is the message's JSON, fixed when the notification is written.
func (n Notification) Body() []byte {
	b, err := json.Marshal(n.Message())
	if err != nil {
		panic(fmt.Sprintf("notify: encode a notification: %v", err)) // plain strings and integers
	}
	return b
}

// Sort keys and attributes of the notifications table.
const (
	SKNotification = "notification"
	// DeliveryPrefix starts a delivery's sort key; the endpoint's id follows.
	DeliveryPrefix = "delivery#"
	// PartitionPrefix starts every partition key; the notification's id follows.
	PartitionPrefix = "ntf#"

	AttrID      = "id"
	AttrKind    = "kind"
	AttrAccount = "account"
	AttrFeature = "feature"
	AttrCycle   = "cycle"
	AttrBody    = "body"
	AttrAtMs    = "atMs"
	AttrStatus  = "status"
)

// Statuses of a notification item: NEW until the notifier has written a delivery for every
// endpoint that wants it, then FANNED.
const (
	StatusNew    = "NEW"
	StatusFanned = "FANNED"
)

// Partition is the partition key of the notification with this id.
func Partition(id string) string { return PartitionPrefix + id }

// ItemKey is the key of the notification item with this id.
func ItemKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(Partition(id)), "sk": dynamo.S(SKNotification)}
}

// DueShard spreads the due index's items over NotificationsDueShards partitions, by id.
func DueShard(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return strconv.Itoa(int(h.Sum32() % resources.NotificationsDueShards))
}

// ListOrder orders an account's notifications (and an endpoint's deliveries): the instant,
// zero-padded, then the id.
func ListOrder(atMs int64, id string) string { return fmt.Sprintf("%016d#%s", atMs, id) }

// Item is the notification's item as it is first written: NEW, due now, with its body.
func (n Notification) Item() map[string]types.AttributeValue {
	id := n.ID()
	item := map[string]types.AttributeValue{
		"pk": dynamo.S(Partition(id)), "sk": dynamo.S(SKNotification),
		AttrID: dynamo.S(id), AttrKind: dynamo.S(string(n.Kind)), AttrAccount: dynamo.S(n.Account),
		AttrFeature: dynamo.S(n.Feature), AttrCycle: dynamo.S(n.Cycle),
		AttrBody: dynamo.S(string(n.Body())), AttrAtMs: dynamo.N(n.AtMs), AttrStatus: dynamo.S(StatusNew),
		resources.NotificationsAttrDueShard: dynamo.S(DueShard(id)), resources.NotificationsAttrDueAtMs: dynamo.N(n.AtMs),
	}
	// A notification of no account (billing_event.dead of an event no account is known for) is
	// in no account's list: DynamoDB refuses an empty string as an index key.
	if n.Account != "" {
		item[resources.NotificationsAttrAccount] = dynamo.S(n.Account)
		item[resources.NotificationsAttrListOrder] = dynamo.S(ListOrder(n.AtMs, id))
	}
	return item
}

// Put is the transaction item that writes the notification, conditional on its absence: the
// notification is decided once, whatever retries, races or redeliveries follow.
func Put(table string, n Notification) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(table), Item: n.Item(),
		ConditionExpression: aws.String(putCondition), ExpressionAttributeNames: dynamo.Names(putCondition),
	}}
}

// putCondition keeps a notification once (see Guards).
const putCondition = dynamo.AbsentCondition

// Tell writes the notification on its own, where no transaction decides it (a refusal, which
// changes nothing durable): conditional on its absence, so told is false, and nothing is
// written, when it was told before. A caller that fails between deciding and telling decides
// again on the retry, and the key keeps it one notification.
func Tell(ctx context.Context, db *dynamodb.Client, table string, n Notification) (told bool, err error) {
	told, err = dynamo.PutNew(ctx, db, table, n.Item())
	if err != nil {
		return false, fmt.Errorf("write notification %s (%s): %w", n.ID(), n.Kind, err)
	}
	return told, nil
}

// Stored is a notification as read back.
type Stored struct {
	ID      string
	Kind    Kind
	Account string
	Feature string
	Cycle   string
	AtMs    int64
	Status  string
	// Body is the message every delivery sends.
	Body []byte
}

// StoredOf reads a notification item.
func StoredOf(item map[string]types.AttributeValue) Stored {
	return Stored{
		ID: dynamo.Str(item, AttrID), Kind: Kind(dynamo.Str(item, AttrKind)), Account: dynamo.Str(item, AttrAccount),
		Feature: dynamo.Str(item, AttrFeature), Cycle: dynamo.Str(item, AttrCycle), AtMs: dynamo.Int(item, AttrAtMs),
		Status: dynamo.Str(item, AttrStatus), Body: []byte(dynamo.Str(item, AttrBody)),
	}
}

// Delivery statuses: PENDING (waiting for its next attempt), SENDING (claimed by a notifier
// until a deadline), DELIVERED (the endpoint answered 2xx), DEAD (every try failed, or the
// failure cannot pass by trying again).
const (
	DeliveryPending   = "PENDING"
	DeliverySending   = "SENDING"
	DeliveryDelivered = "DELIVERED"
	DeliveryDead      = "DEAD"
)

// Delivery is one notification's delivery to one endpoint, as its log shows it.
type Delivery struct {
	Notification string `json:"notification"`
	Endpoint     string `json:"endpoint"`
	Kind         Kind   `json:"kind"`
	Account      string `json:"account"`
	Status       string `json:"status"`
	Attempts     int    `json:"attempts"`
	// LastStatus is the HTTP status of the last attempt (0: no answer); LastAnswer the first
	// bytes of its body; LastError what went wrong, if anything.
	LastStatus      int    `json:"lastStatus,omitempty"`
	LastAnswer      string `json:"lastAnswer,omitempty"`
	LastError       string `json:"lastError,omitempty"`
	NextAttemptAtMs int64  `json:"nextAttemptAtMs,omitempty"`
	DeliveredAtMs   int64  `json:"deliveredAtMs,omitempty"`
	CreatedAtMs     int64  `json:"createdAtMs"`
	UpdatedAtMs     int64  `json:"updatedAtMs"`
	// Replays counts the operator's replays of it.
	Replays int `json:"replays,omitempty"`
}
