package drain

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// Expressions.
const (
	// putDeliveryCondition: a delivery is written once, by the first fan-out (see Guards).
	putDeliveryCondition = "attribute_not_exists(#pk)"
	// rewriteCondition: every later write of a delivery is conditioned on the revision it was
	// decided on (see Guards). A claim taken over moves the revision, so the condition also says
	// the claim is still the writer's own.
	rewriteCondition = "#rev = :rev"
	// fannedCondition: a notification is marked fanned out only while it is NEW (see Guards).
	fannedCondition = "#status = :new"
	dueKeyCondition = "#dueShard = :shard AND #dueAtMs <= :now"
)

// Attributes of a delivery item, besides those named in resources (the indexes' keys) and in
// notify (kind, account, status).
const (
	attrNotification    = "notification"
	attrAttempts        = "attempts"
	attrLastStatus      = "lastStatus"
	attrLastAnswer      = "lastAnswer"
	attrLastError       = "lastError"
	attrNextAttemptAtMs = "nextAttemptAtMs"
	attrDeliveredAtMs   = "deliveredAtMs"
	attrCreatedAtMs     = "createdAtMs"
	attrUpdatedAtMs     = "updatedAtMs"
	attrReplays         = "replays"
	attrClaimOwner      = "claimOwner"
	attrClaimUntilMs    = "claimUntilMs"
	attrRev             = "rev"
)

// Attributes the fan-out adds to a notification item.
const (
	// attrFannedTo lists the endpoints the notification was fanned out to (absent: none wanted
	// it); attrFannedAtMs is when.
	attrFannedTo   = "fannedTo"
	attrFannedAtMs = "fannedAtMs"
)

// Bounds of the store's reads, with their units.
const (
	// MaxDuePerShard bounds the items one read of the due index takes from each shard, so that a
	// shard crowded with retries cannot starve the others.
	MaxDuePerShard = 25
	// maxDuePages bounds the pages read from one shard in one read.
	maxDuePages = 4
	// DefaultPageSize and MaxPageSize bound a page of a delivery log or a notification list
	// (MaxPageSize fits one BatchGetItem).
	DefaultPageSize = 50
	MaxPageSize     = dynamo.MaxBatchGetKeys
	// maxReplayTries bounds the reads and writes of one replay on a delivery that keeps changing.
	maxReplayTries = 4
)

// Errors of the store that stay inside the package.
var (
	// errChanged: the item was written after it was read.
	errChanged = errors.New("the delivery changed after it was read")
	// errNotFound: no item with this key.
	errNotFound = errors.New("no such item")
)

// Ref names an item of the notifications table: a notification or one of its deliveries.
type Ref struct{ PK, SK string }

// Notification is the id of the notification the item belongs to.
func (r Ref) Notification() string { return strings.TrimPrefix(r.PK, notify.PartitionPrefix) }

// IsDelivery reports whether the item is a delivery (otherwise it is the notification).
func (r Ref) IsDelivery() bool { return strings.HasPrefix(r.SK, notify.DeliveryPrefix) }

// Endpoint is the endpoint of a delivery.
func (r Ref) Endpoint() string { return strings.TrimPrefix(r.SK, notify.DeliveryPrefix) }

// DeliveryRef names the delivery of notification to endpoint.
func DeliveryRef(notification, endpoint string) Ref {
	return Ref{PK: notify.Partition(notification), SK: notify.DeliveryPrefix + endpoint}
}

func (r Ref) key() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(r.PK), "sk": dynamo.S(r.SK)}
}

// Store keeps the notifications' deliveries, beside the notifications, in the notifications
// table. It reads the clock nowhere: callers pass the instant they decide at.
type Store struct {
	DB    *dynamodb.Client
	Table string
}

// Due returns the items that need the notifier by nowMs, oldest first within each shard, at most
// MaxDuePerShard from each: NEW notifications and deliveries that are due or whose claim lapsed.
// The index is eventually consistent: the notifier reads every item again before acting on it.
func (s *Store) Due(ctx context.Context, nowMs int64) ([]Ref, error) {
	var refs []Ref
	for shard := range resources.NotificationsDueShards {
		var start map[string]types.AttributeValue
		taken := 0
		for range maxDuePages {
			out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
				TableName:                aws.String(s.Table),
				IndexName:                aws.String(resources.IndexNotificationsDue),
				KeyConditionExpression:   aws.String(dueKeyCondition),
				ExpressionAttributeNames: dynamo.Names(dueKeyCondition),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":shard": dynamo.S(strconv.Itoa(shard)), ":now": dynamo.N(nowMs),
				},
				Limit:             aws.Int32(int32(MaxDuePerShard - taken)),
				ExclusiveStartKey: start,
			})
			if err != nil {
				return refs, fmt.Errorf("query due notifications of shard %d: %w", shard, err)
			}
			for _, item := range out.Items {
				refs = append(refs, Ref{PK: dynamo.Str(item, "pk"), SK: dynamo.Str(item, "sk")})
			}
			taken += len(out.Items)
			if len(out.LastEvaluatedKey) == 0 || taken >= MaxDuePerShard {
				break
			}
			start = out.LastEvaluatedKey
		}
	}
	return refs, nil
}

// notification reads a notification item (strongly consistent), whole, and as notify reads it.
func (s *Store) notification(ctx context.Context, id string) (map[string]types.AttributeValue, notify.Stored, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: notify.ItemKey(id), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, notify.Stored{}, fmt.Errorf("read notification %s: %w", id, err)
	}
	if out.Item == nil {
		return nil, notify.Stored{}, errNotFound
	}
	return out.Item, notify.StoredOf(out.Item), nil
}

// markFanned rewrites a NEW notification, as it was read (item), as fanned out at nowMs to the
// endpoints to: FANNED, off the due index, expiring after Retention. The item is put whole,
// because the local emulator ignores REMOVE. It reports false when the notification was no
// longer NEW (another notifier fanned it out first).
func (s *Store) markFanned(ctx context.Context, item map[string]types.AttributeValue, to []string, nowMs int64) (bool, error) {
	next := make(map[string]types.AttributeValue, len(item)+3)
	for k, v := range item {
		next[k] = v
	}
	delete(next, resources.NotificationsAttrDueShard)
	delete(next, resources.NotificationsAttrDueAtMs)
	next[notify.AttrStatus] = dynamo.S(notify.StatusFanned)
	next[attrFannedAtMs] = dynamo.N(nowMs)
	next[resources.NotificationsTTLAttribute] = dynamo.N(expiresAt(nowMs))
	if len(to) > 0 {
		ids := make([]types.AttributeValue, len(to))
		for i, id := range to {
			ids[i] = dynamo.S(id)
		}
		next[attrFannedTo] = &types.AttributeValueMemberL{Value: ids}
	}
	_, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.Table), Item: next,
		ConditionExpression:       aws.String(fannedCondition),
		ExpressionAttributeNames:  dynamo.Names(fannedCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{":new": dynamo.S(notify.StatusNew)},
	})
	if dynamo.IsConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mark notification %s fanned out: %w", dynamo.Str(item, notify.AttrID), err)
	}
	return true, nil
}

// putDelivery writes a new delivery (revision 1), only if the notification has none to that
// endpoint yet. It reports false when one was there: a fan-out run again changes nothing.
func (s *Store) putDelivery(ctx context.Context, r Record) (bool, error) {
	r.Rev = 1
	_, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.Table), Item: recordItem(r),
		ConditionExpression: aws.String(putDeliveryCondition), ExpressionAttributeNames: dynamo.Names(putDeliveryCondition),
	})
	if dynamo.IsConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("put the delivery of %s to %s: %w", r.Notification, r.Endpoint, err)
	}
	return true, nil
}

// delivery reads a delivery (strongly consistent).
func (s *Store) delivery(ctx context.Context, ref Ref) (Record, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: ref.key(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Record{}, fmt.Errorf("read the delivery of %s to %s: %w", ref.Notification(), ref.Endpoint(), err)
	}
	if out.Item == nil {
		return Record{}, errNotFound
	}
	return recordOf(out.Item), nil
}

// rewrite replaces a delivery read at revision prev with next (whose Rev becomes prev+1), only if
// no one wrote it since. The item is put whole, so a delivery that is no longer due leaves the
// due index (the local emulator ignores REMOVE).
func (s *Store) rewrite(ctx context.Context, next Record, prev int64) (Record, error) {
	next.Rev = prev + 1
	_, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.Table), Item: recordItem(next),
		ConditionExpression:       aws.String(rewriteCondition),
		ExpressionAttributeNames:  dynamo.Names(rewriteCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{":rev": dynamo.N(prev)},
	})
	if dynamo.IsConditionFailed(err) {
		return Record{}, errChanged
	}
	if err != nil {
		return Record{}, fmt.Errorf("write the delivery of %s to %s: %w", next.Notification, next.Endpoint, err)
	}
	return next, nil
}

// Delivery reads the delivery of a notification to an endpoint, as its log shows it.
func (s *Store) Delivery(ctx context.Context, endpointID, notificationID string) (notify.Delivery, error) {
	if !endpoints.ValidID(endpointID) || !validNotificationID(notificationID) {
		return notify.Delivery{}, ErrNoDelivery
	}
	r, err := s.delivery(ctx, DeliveryRef(notificationID, endpointID))
	if errors.Is(err, errNotFound) {
		return notify.Delivery{}, ErrNoDelivery
	}
	if err != nil {
		return notify.Delivery{}, err
	}
	return r.Delivery, nil
}

// Replay puts the delivery of a notification to an endpoint back to PENDING, due at nowMs, with
// a fresh set of attempts (Record.Replayed): the notifier sends it again under the same
// webhook-id and body. It refuses one being sent under a live claim (ErrInFlight) and one whose
// notification is no longer stored (ErrNoDelivery: there is nothing left to send).
func (s *Store) Replay(ctx context.Context, endpointID, notificationID string, nowMs int64) (notify.Delivery, error) {
	if !endpoints.ValidID(endpointID) || !validNotificationID(notificationID) {
		return notify.Delivery{}, ErrNoDelivery
	}
	if _, _, err := s.notification(ctx, notificationID); errors.Is(err, errNotFound) {
		return notify.Delivery{}, ErrNoDelivery
	} else if err != nil {
		return notify.Delivery{}, err
	}
	ref := DeliveryRef(notificationID, endpointID)
	next, err := retry.Do(ctx, retry.Contended.WithTries(maxReplayTries), func(ctx context.Context, _ retry.Lap) (Record, error) {
		r, err := s.delivery(ctx, ref)
		if errors.Is(err, errNotFound) {
			return Record{}, ErrNoDelivery
		}
		if err != nil {
			return Record{}, err
		}
		next, err := r.Replayed(nowMs)
		if err != nil {
			return Record{}, err
		}
		written, err := s.rewrite(ctx, next, r.Rev)
		if errors.Is(err, errChanged) {
			return Record{}, retry.Again(err)
		}
		return written, err
	})
	if errors.Is(err, retry.ErrExhausted) {
		return notify.Delivery{}, fmt.Errorf("replay the delivery of %s to %s: %w: %w", notificationID, endpointID, ErrBusy, err)
	}
	if err != nil {
		return notify.Delivery{}, err
	}
	return next.Delivery, nil
}

// Log returns a page of an endpoint's delivery log, newest notification first, and the cursor
// of the next page ("" at the end). cursor is "" for the first page, or a cursor a page before
// handed out; anything else is refused as input. limit 0 means DefaultPageSize.
func (s *Store) Log(ctx context.Context, endpointID, cursor string, limit int) ([]notify.Delivery, string, error) {
	limit, err := pageSize(limit)
	if err != nil {
		return nil, "", err
	}
	if !endpoints.ValidID(endpointID) {
		return nil, "", problem.Input("endpoint is not a valid endpoint id")
	}
	list := dynamo.IndexList{
		Table: s.Table, Index: resources.IndexNotificationsByEndpoint, KeyAttrs: []string{"pk", "sk"}, NewestFirst: true,
		Start: func(cursor string) (map[string]types.AttributeValue, error) {
			atMs, id, err := listCursor.Decode(cursor)
			if err != nil {
				return nil, err
			}
			ref := DeliveryRef(id, endpointID)
			return map[string]types.AttributeValue{
				"pk": dynamo.S(ref.PK), "sk": dynamo.S(ref.SK), resources.NotificationsAttrEndpoint: dynamo.S(endpointID),
				resources.NotificationsAttrLogOrder: dynamo.S(notify.ListOrder(atMs, id)),
			}, nil
		},
		Cursor: func(last map[string]types.AttributeValue) string {
			return cursorAt(dynamo.Str(last, resources.NotificationsAttrLogOrder))
		},
	}
	cond := "#" + resources.NotificationsAttrEndpoint + " = :endpoint"
	items, next, err := list.Page(ctx, s.DB, cond, map[string]types.AttributeValue{":endpoint": dynamo.S(endpointID)}, cursor, limit)
	if err != nil {
		return nil, "", fmt.Errorf("read the delivery log of %s: %w", endpointID, err)
	}
	out := make([]notify.Delivery, 0, len(items))
	for _, item := range items {
		out = append(out, recordOf(item).Delivery)
	}
	return out, next, nil
}

// Notification is a notification as the notifications list shows it: what notify stored, and
// whom it was fanned out to.
type Notification struct {
	notify.Stored
	// FannedAtMs is when it was fanned out (0 while NEW); FannedTo the endpoints it went to.
	FannedAtMs int64
	FannedTo   []string
}

// Notifications returns a page of an account's notifications, newest first, and the cursor of
// the next page ("" at the end); cursor and limit as for Log.
func (s *Store) Notifications(ctx context.Context, account, cursor string, limit int) ([]Notification, string, error) {
	limit, err := pageSize(limit)
	if err != nil {
		return nil, "", err
	}
	if account == "" {
		return nil, "", problem.Input("account is required")
	}
	list := dynamo.IndexList{
		Table: s.Table, Index: resources.IndexNotificationsByAccount, KeyAttrs: []string{"pk", "sk"}, NewestFirst: true,
		Start: func(cursor string) (map[string]types.AttributeValue, error) {
			atMs, id, err := listCursor.Decode(cursor)
			if err != nil {
				return nil, err
			}
			start := notify.ItemKey(id)
			start[resources.NotificationsAttrAccount] = dynamo.S(account)
			start[resources.NotificationsAttrListOrder] = dynamo.S(notify.ListOrder(atMs, id))
			return start, nil
		},
		Cursor: func(last map[string]types.AttributeValue) string {
			return cursorAt(dynamo.Str(last, resources.NotificationsAttrListOrder))
		},
	}
	cond := "#" + resources.NotificationsAttrAccount + " = :account"
	items, next, err := list.Page(ctx, s.DB, cond, map[string]types.AttributeValue{":account": dynamo.S(account)}, cursor, limit)
	if err != nil {
		return nil, "", fmt.Errorf("list the notifications of %s: %w", account, err)
	}
	out := make([]Notification, 0, len(items))
	for _, item := range items {
		n := Notification{Stored: notify.StoredOf(item), FannedAtMs: dynamo.Int(item, attrFannedAtMs)}
		if l, ok := item[attrFannedTo].(*types.AttributeValueMemberL); ok {
			for _, v := range l.Value {
				if s, ok := v.(*types.AttributeValueMemberS); ok {
					n.FannedTo = append(n.FannedTo, s.Value)
				}
			}
		}
		out = append(out, n)
	}
	return out, next, nil
}

// listCursor is the cursor of both lists: the last item's notification instant and id.
var listCursor = dynamo.NewTimeCursor(`ntf_[a-z2-7]{26}`)

// cursorAt is the cursor after the item whose list order is order (notify.ListOrder).
func cursorAt(order string) string {
	ms, id, _ := strings.Cut(order, "#")
	atMs, _ := strconv.ParseInt(ms, 10, 64)
	return listCursor.Encode(atMs, id)
}

func pageSize(limit int) (int, error) {
	switch {
	case limit == 0:
		return DefaultPageSize, nil
	case limit < 0 || limit > MaxPageSize:
		return 0, problem.Input(fmt.Sprintf("limit must be from 1 to %d", MaxPageSize))
	}
	return limit, nil
}

var notificationID = regexp.MustCompile(`^ntf_[a-z2-7]{26}$`)

// validNotificationID reports whether id is one notify.IDOf makes.
func validNotificationID(id string) bool { return notificationID.MatchString(id) }

// expiresAt is the TTL, in epoch seconds, of an item finished at nowMs.
func expiresAt(nowMs int64) int64 { return (nowMs + Retention.Milliseconds()) / 1000 }

// recordItem is a delivery's item: its log, its claim and revision, the due index's attributes
// while it is due, and its TTL once it is finished.
func recordItem(r Record) map[string]types.AttributeValue {
	ref := DeliveryRef(r.Notification, r.Endpoint)
	item := map[string]types.AttributeValue{
		"pk": dynamo.S(ref.PK), "sk": dynamo.S(ref.SK),
		attrNotification: dynamo.S(r.Notification), resources.NotificationsAttrEndpoint: dynamo.S(r.Endpoint),
		resources.NotificationsAttrLogOrder: dynamo.S(r.LogOrder),
		notify.AttrKind:                     dynamo.S(string(r.Kind)), notify.AttrAccount: dynamo.S(r.Account),
		notify.AttrStatus: dynamo.S(r.Status), attrAttempts: dynamo.N(int64(r.Attempts)),
		attrCreatedAtMs: dynamo.N(r.CreatedAtMs), attrUpdatedAtMs: dynamo.N(r.UpdatedAtMs),
		attrReplays: dynamo.N(int64(r.Replays)), attrRev: dynamo.N(r.Rev),
	}
	setS := func(name, v string) {
		if v != "" {
			item[name] = dynamo.S(v)
		}
	}
	setN := func(name string, v int64) {
		if v != 0 {
			item[name] = dynamo.N(v)
		}
	}
	setN(attrLastStatus, int64(r.LastStatus))
	setS(attrLastAnswer, r.LastAnswer)
	setS(attrLastError, r.LastError)
	setN(attrNextAttemptAtMs, r.NextAttemptAtMs)
	setN(attrDeliveredAtMs, r.DeliveredAtMs)
	setS(attrClaimOwner, r.ClaimOwner)
	setN(attrClaimUntilMs, r.ClaimUntilMs)
	if at, due := r.due(); due {
		item[resources.NotificationsAttrDueShard] = dynamo.S(notify.DueShard(ref.PK + ref.SK))
		item[resources.NotificationsAttrDueAtMs] = dynamo.N(at)
	} else {
		item[resources.NotificationsTTLAttribute] = dynamo.N(expiresAt(r.UpdatedAtMs))
	}
	return item
}

// recordOf reads a delivery's item.
func recordOf(item map[string]types.AttributeValue) Record {
	return Record{
		Delivery: notify.Delivery{
			Notification: dynamo.Str(item, attrNotification), Endpoint: dynamo.Str(item, resources.NotificationsAttrEndpoint),
			Kind: notify.Kind(dynamo.Str(item, notify.AttrKind)), Account: dynamo.Str(item, notify.AttrAccount),
			Status: dynamo.Str(item, notify.AttrStatus), Attempts: int(dynamo.Int(item, attrAttempts)),
			LastStatus: int(dynamo.Int(item, attrLastStatus)), LastAnswer: dynamo.Str(item, attrLastAnswer),
			LastError: dynamo.Str(item, attrLastError), NextAttemptAtMs: dynamo.Int(item, attrNextAttemptAtMs),
			DeliveredAtMs: dynamo.Int(item, attrDeliveredAtMs), CreatedAtMs: dynamo.Int(item, attrCreatedAtMs),
			UpdatedAtMs: dynamo.Int(item, attrUpdatedAtMs), Replays: int(dynamo.Int(item, attrReplays)),
		},
		LogOrder:   dynamo.Str(item, resources.NotificationsAttrLogOrder),
		ClaimOwner: dynamo.Str(item, attrClaimOwner), ClaimUntilMs: dynamo.Int(item, attrClaimUntilMs),
		Rev: dynamo.Int(item, attrRev),
	}
}
