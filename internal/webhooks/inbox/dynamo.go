package inbox

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Keys in the inbox table. An event's partition holds the event, its payload and its receipts;
// meter marks have partitions of their own.
const (
	eventPrefix   = "ev#"
	eventSK       = "event"
	payloadSK     = "payload"
	receiptPrefix = "rcpt#"
	markPrefix    = "mm#"
	// Index partitions: every event is in the "all" list; an event that is not final is "due"
	// at the instant it may be claimed, and a final one moves to "idle", which nothing reads
	// (the local emulator ignores REMOVE, so an index key is moved rather than removed).
	listAllValue = "all"
	dueValue     = "due"
	idleValue    = "idle"
	// unattributed is the account partition of events no account is linked to yet: nothing
	// lists it (account ids never start with '-'). Writing it rather than leaving the index
	// attributes out keeps every index key present from the insert on: the local emulator
	// corrupts an index when an update adds a key attribute an item did not have.
	unattributed = "-"
)

// Bounds of the adapter's reads.
const (
	maxDuePages = 5
	duePageSize = 100
)

// Conditions. Every attribute name is an alias (see dynamo.Names).
const (
	// insertCondition is the claim-first insert: exactly one delivery of an event stores it.
	insertCondition = "attribute_not_exists(#pk)"
	// copyCondition keeps a copy from creating a stray item if its event is gone (expired).
	copyCondition = "attribute_exists(#pk)"
	copyUpdate    = "ADD #seenCount :one SET #lastSeenAtMs = :now"
	// revCondition is the version guard of every status transition: the write commits only if
	// no other write (a claim, a replay, another worker's mark) moved the event since it was
	// read. It is what keeps two workers from both applying one event.
	revCondition = "#rev = :rev"
	markUpdate   = "SET #accountId = :account, #feature = :feature, #cycle = :cycle, #markedAtMs = :now, #eventId = :event ADD #rev :one"
	// clearCondition removes a meter mark only if nobody marked it again since it was listed.
	clearCondition = "#rev = :rev"
)

// Table keeps the inbox in its table. Its apply transactions also span the accounts
// table (the plan and status), the grants table (the allowance rows) and the notifications table
// (what a change tells), through those packages' own item builders.
type Table struct {
	DB       *dynamodb.Client
	Table    string
	Accounts *accounts.Table
	Grants   *allowance.Table
	// Notifications is the notifications table's name: the worker's (only the worker applies
	// events and writes them DEAD).
	Notifications string
}

// errNoNotifications: a store without the notifications table was asked to tell something (a
// composition that forgot it).
var errNoNotifications = errors.New("the inbox store has no notifications table")

type eventItem struct {
	PK                string `dynamodbav:"pk"`
	SK                string `dynamodbav:"sk"`
	ID                string `dynamodbav:"id"`
	Source            string `dynamodbav:"source"`
	EventID           string `dynamodbav:"eventId"`
	Type              string `dynamodbav:"type"`
	OccurredAtMs      int64  `dynamodbav:"occurredAtMs"`
	OrderKey          string `dynamodbav:"orderKey"`
	APIVersion        string `dynamodbav:"apiVersion,omitempty"`
	Status            string `dynamodbav:"status"`
	Attempts          int    `dynamodbav:"attempts"`
	SeenCount         int    `dynamodbav:"seenCount"`
	Replays           int    `dynamodbav:"replays"`
	Rev               int64  `dynamodbav:"rev"`
	FirstSeenAtMs     int64  `dynamodbav:"firstSeenAtMs"`
	LastSeenAtMs      int64  `dynamodbav:"lastSeenAtMs"`
	UpdatedAtMs       int64  `dynamodbav:"updatedAtMs"`
	LeaseExpiresAtMs  int64  `dynamodbav:"leaseExpiresAtMs"`
	NextAttemptAtMs   int64  `dynamodbav:"nextAttemptAtMs"`
	AccountID         string `dynamodbav:"accountId,omitempty"`
	Result            string `dynamodbav:"result,omitempty"`
	Reason            string `dynamodbav:"reason,omitempty"`
	FinishedAtMs      int64  `dynamodbav:"finishedAtMs,omitempty"`
	PayloadSHA256     string `dynamodbav:"payloadSha256"`
	ExpiresAt         int64  `dynamodbav:"expiresAt"`
	ListAll           string `dynamodbav:"listAll"`
	ListStatus        string `dynamodbav:"listStatus"`
	ListAccount       string `dynamodbav:"listAccount"`
	ListAccountStatus string `dynamodbav:"listAccountStatus"`
	ListOrder         string `dynamodbav:"listOrder"`
	DueShard          string `dynamodbav:"dueShard"`
	DueAtMs           int64  `dynamodbav:"dueAtMs"`
}

type payloadItem struct {
	PK        string `dynamodbav:"pk"`
	SK        string `dynamodbav:"sk"`
	Payload   []byte `dynamodbav:"payload"`
	ExpiresAt int64  `dynamodbav:"expiresAt"`
}

type receiptItem struct {
	PK            string `dynamodbav:"pk"`
	SK            string `dynamodbav:"sk"`
	ReceivedAtMs  int64  `dynamodbav:"receivedAtMs"`
	Duplicate     bool   `dynamodbav:"duplicate"`
	WebhookID     string `dynamodbav:"webhookId,omitempty"`
	KeyID         string `dynamodbav:"keyId,omitempty"`
	PayloadSHA256 string `dynamodbav:"payloadSha256"`
	ExpiresAt     int64  `dynamodbav:"expiresAt"`
}

func eventPK(id string) string { return eventPrefix + id }

func eventKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(eventPK(id)), "sk": dynamo.S(eventSK)}
}

func payloadKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(eventPK(id)), "sk": dynamo.S(payloadSK)}
}

// listOrder sorts an event in the lists: by when it was first seen, then by id.
func listOrder(e Event) string { return fmt.Sprintf("%013d#%s", e.FirstSeenAtMs, e.ID) }

var listOrderPattern = regexp.MustCompile(`^[0-9]{13}#bev_[a-z2-7]{26}$`)

// due is the index position of an event: when it may next be claimed, or idle once final.
func due(e Event) (string, int64) {
	switch e.Status {
	case Processing:
		return dueValue, e.LeaseExpiresAtMs
	case Received, Failed:
		return dueValue, e.NextAttemptAtMs
	}
	return idleValue, e.FinishedAtMs
}

func itemOf(e Event) eventItem {
	shard, at := due(e)
	it := eventItem{
		PK: eventPK(e.ID), SK: eventSK, ID: e.ID, Source: string(e.Source), EventID: e.EventID, Type: e.Type,
		OccurredAtMs: e.OccurredAtMs, OrderKey: e.OrderKey, APIVersion: e.APIVersion, Status: string(e.Status),
		Attempts: e.Attempts, SeenCount: e.SeenCount, Replays: e.Replays, Rev: e.Rev,
		FirstSeenAtMs: e.FirstSeenAtMs, LastSeenAtMs: e.LastSeenAtMs, UpdatedAtMs: e.UpdatedAtMs,
		LeaseExpiresAtMs: e.LeaseExpiresAtMs, NextAttemptAtMs: e.NextAttemptAtMs, AccountID: e.AccountID,
		Result: e.Result, Reason: e.Reason, FinishedAtMs: e.FinishedAtMs, PayloadSHA256: e.PayloadSHA256,
		ExpiresAt: e.ExpiresAt, ListAll: listAllValue, ListStatus: string(e.Status), ListOrder: listOrder(e),
		DueShard: shard, DueAtMs: at,
	}
	account := e.AccountID
	if account == "" {
		account = unattributed
	}
	it.ListAccount, it.ListAccountStatus = account, account+"#"+string(e.Status)
	return it
}

func (it eventItem) event() Event {
	return Event{
		ID: it.ID, Source: Source(it.Source), EventID: it.EventID, Type: it.Type, OccurredAtMs: it.OccurredAtMs,
		OrderKey: it.OrderKey, APIVersion: it.APIVersion, Status: Status(it.Status), Attempts: it.Attempts,
		SeenCount: it.SeenCount, Replays: it.Replays, Rev: it.Rev, FirstSeenAtMs: it.FirstSeenAtMs,
		LastSeenAtMs: it.LastSeenAtMs, UpdatedAtMs: it.UpdatedAtMs, LeaseExpiresAtMs: it.LeaseExpiresAtMs,
		NextAttemptAtMs: it.NextAttemptAtMs, AccountID: it.AccountID, Result: it.Result, Reason: it.Reason,
		FinishedAtMs: it.FinishedAtMs, PayloadSHA256: it.PayloadSHA256, ExpiresAt: it.ExpiresAt,
	}
}

func decodeEvent(item map[string]types.AttributeValue) (Event, error) {
	var it eventItem
	if err := attributevalue.UnmarshalMap(item, &it); err != nil {
		return Event{}, fmt.Errorf("decode billing event %s: %w", dynamo.Str(item, "id"), err)
	}
	return it.event(), nil
}

func receiptOf(id string, r Receipt, expiresAt int64) (map[string]types.AttributeValue, error) {
	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("receipt nonce: %w", err)
	}
	return attributevalue.MarshalMap(receiptItem{
		PK: eventPK(id), SK: fmt.Sprintf("%s%013d#%s", receiptPrefix, r.ReceivedAtMs, hex.EncodeToString(nonce[:])),
		ReceivedAtMs: r.ReceivedAtMs, Duplicate: r.Duplicate, WebhookID: r.WebhookID, KeyID: r.KeyID,
		PayloadSHA256: r.PayloadSHA256, ExpiresAt: expiresAt,
	})
}

// Insert implements Store: the event, its payload and its first receipt, in one transaction
// that commits only if no event has this id yet.
func (s *Table) Insert(ctx context.Context, e Event, payload []byte, r Receipt) error {
	ev, err := attributevalue.MarshalMap(itemOf(e))
	if err != nil {
		return fmt.Errorf("encode billing event %s: %w", e.ID, err)
	}
	body, err := attributevalue.MarshalMap(payloadItem{PK: eventPK(e.ID), SK: payloadSK, Payload: payload, ExpiresAt: e.ExpiresAt})
	if err != nil {
		return fmt.Errorf("encode payload of %s: %w", e.ID, err)
	}
	receipt, err := receiptOf(e.ID, r, e.ExpiresAt)
	if err != nil {
		return err
	}
	return s.write(ctx, "insert billing event "+e.ID, []types.TransactWriteItem{
		{Put: &types.Put{
			TableName: aws.String(s.Table), Item: ev,
			ConditionExpression: aws.String(insertCondition), ExpressionAttributeNames: dynamo.Names(insertCondition),
		}},
		{Put: &types.Put{TableName: aws.String(s.Table), Item: body}},
		{Put: &types.Put{TableName: aws.String(s.Table), Item: receipt}},
	})
}

// AddCopy implements Store: one more sighting of a stored event and its receipt, together.
func (s *Table) AddCopy(ctx context.Context, id string, r Receipt) error {
	receipt, err := receiptOf(id, r, time.UnixMilli(r.ReceivedAtMs).Add(Retention).Unix())
	if err != nil {
		return err
	}
	return s.write(ctx, "count a copy of billing event "+id, []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:                aws.String(s.Table),
			Key:                      eventKey(id),
			UpdateExpression:         aws.String(copyUpdate),
			ConditionExpression:      aws.String(copyCondition),
			ExpressionAttributeNames: dynamo.Names(copyUpdate, copyCondition),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":one": dynamo.N(1), ":now": dynamo.N(r.ReceivedAtMs),
			},
		}},
		{Put: &types.Put{TableName: aws.String(s.Table), Item: receipt}},
	})
}

// Get implements Store: the event, strongly consistent.
func (s *Table) Get(ctx context.Context, id string) (Event, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: eventKey(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Event{}, fmt.Errorf("read billing event %s: %w", id, err)
	}
	if out.Item == nil {
		return Event{}, ErrNotFound
	}
	return decodeEvent(out.Item)
}

// Load implements Store: the event and its payload, strongly consistent, in one round trip.
func (s *Table) Load(ctx context.Context, id string) (Event, []byte, error) {
	items, err := dynamo.BatchGet(ctx, s.DB, s.Table, []map[string]types.AttributeValue{eventKey(id), payloadKey(id)})
	if err != nil {
		return Event{}, nil, fmt.Errorf("load billing event %s: %w", id, err)
	}
	var e Event
	var payload []byte
	found := false
	for _, item := range items {
		switch dynamo.Str(item, "sk") {
		case eventSK:
			if e, err = decodeEvent(item); err != nil {
				return Event{}, nil, err
			}
			found = true
		case payloadSK:
			var it payloadItem
			if err := attributevalue.UnmarshalMap(item, &it); err != nil {
				return Event{}, nil, fmt.Errorf("decode payload of %s: %w", id, err)
			}
			payload = it.Payload
		}
	}
	if !found {
		return Event{}, nil, ErrNotFound
	}
	if payload == nil {
		return Event{}, nil, fmt.Errorf("billing event %s has no payload", id)
	}
	return e, payload, nil
}

// transition is the update that moves an event from its state as read (rev) to next: every
// field a transition may change, never the seen count (copies add to it concurrently).
func (s *Table) transition(next Event, readRev int64) (*types.Update, error) {
	it := itemOf(next)
	sets := map[string]types.AttributeValue{
		"status": dynamo.S(it.Status), "attempts": dynamo.N(int64(it.Attempts)), "replays": dynamo.N(int64(it.Replays)),
		"rev": dynamo.N(it.Rev), "updatedAtMs": dynamo.N(it.UpdatedAtMs), "leaseExpiresAtMs": dynamo.N(it.LeaseExpiresAtMs),
		"nextAttemptAtMs": dynamo.N(it.NextAttemptAtMs), "result": dynamo.S(it.Result), "reason": dynamo.S(it.Reason),
		"finishedAtMs": dynamo.N(it.FinishedAtMs), "listStatus": dynamo.S(it.ListStatus),
		"dueShard": dynamo.S(it.DueShard), "dueAtMs": dynamo.N(it.DueAtMs),
		"listAccount": dynamo.S(it.ListAccount), "listAccountStatus": dynamo.S(it.ListAccountStatus),
	}
	if it.AccountID != "" {
		sets["accountId"] = dynamo.S(it.AccountID)
	}
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	sortStrings(names)
	parts := make([]string, 0, len(names))
	values := map[string]types.AttributeValue{":rev": dynamo.N(readRev)}
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("#%s = :v_%s", n, n))
		values[":v_"+n] = sets[n]
	}
	update := "SET " + strings.Join(parts, ", ")
	return &types.Update{
		TableName:                 aws.String(s.Table),
		Key:                       eventKey(next.ID),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(revCondition),
		ExpressionAttributeNames:  dynamo.Names(update, revCondition),
		ExpressionAttributeValues: values,
	}, nil
}

// Transition implements Store: one status change (a claim, a failure, a replay, DEAD),
// conditioned on the revision the event was read at. ErrCancelled: it moved since.
func (s *Table) Transition(ctx context.Context, readRev int64, next Event) error {
	u, err := s.transition(next, readRev)
	if err != nil {
		return err
	}
	_, err = s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
		ConditionExpression: u.ConditionExpression, ExpressionAttributeNames: u.ExpressionAttributeNames,
		ExpressionAttributeValues: u.ExpressionAttributeValues,
	})
	if dynamo.IsConditionFailed(err) {
		return fmt.Errorf("move billing event %s to %s: %w", next.ID, next.Status, ErrCancelled)
	}
	if err != nil {
		return fmt.Errorf("move billing event %s to %s: %w", next.ID, next.Status, err)
	}
	return nil
}

// Apply implements Store: the decision's effect — the account's change, the grant rows, the
// meter mark — and the event's final mark, in ONE transaction. The mark is conditioned on the
// claim's revision, the account change on the event being newer than the account's, on the plan
// or status it changes being still the one it was decided from, and on the account's link
// (checked on its own when the event changes nothing on the account), the grant rows on the
// version of the rows they were decided from; the notifications the change tells ride with it.
// A refused condition cancels everything; ErrCancelled.
func (s *Table) Apply(ctx context.Context, claimedRev int64, marked Event, d Decision) error {
	mark, err := s.transition(marked, claimedRev)
	if err != nil {
		return err
	}
	items := []types.TransactWriteItem{{Update: mark}}
	switch {
	case d.Change != nil:
		items = append(items, s.Accounts.BillingChangeItem(*d.Change))
	case len(d.Grants) > 0 || d.Mark != nil:
		items = append(items, s.Accounts.LinkCheckItem(d.AccountID, d.Link.Kind, d.Link.ID))
	}
	for _, g := range d.Grants {
		grantItems, err := s.Grants.Items(g.Cycle, g.Add, marked.UpdatedAtMs)
		if err != nil {
			return err
		}
		items = append(items, grantItems...)
	}
	if m := d.Mark; m != nil {
		items = append(items, s.markItem(*m))
	}
	if len(d.Notes) > 0 && s.Notifications == "" {
		return fmt.Errorf("apply billing event %s: %w", marked.ID, errNoNotifications)
	}
	// Each note's put is conditional on its absence, and commits with the change it reports.
	// It never meets one already there (see accountChanged): it could only cancel this
	// transaction, not tell twice.
	for _, n := range d.Notes {
		items = append(items, notify.Put(s.Notifications, n))
	}
	return s.write(ctx, "apply billing event "+marked.ID, items)
}

// Tell implements Store: the notification on its own, conditional on its absence (told is
// false when it was told before).
func (s *Table) Tell(ctx context.Context, n notify.Notification) (bool, error) {
	if s.Notifications == "" {
		return false, fmt.Errorf("tell %s: %w", n.Kind, errNoNotifications)
	}
	return notify.Tell(ctx, s.DB, s.Notifications, n)
}

func markSK(m MeterMark) string {
	feature := m.Feature
	if feature == "" {
		feature = "*"
	}
	return m.AccountID + "#" + m.Cycle + "#" + feature
}

func (s *Table) markItem(m MeterMark) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(s.Table),
		Key: map[string]types.AttributeValue{
			"pk": dynamo.S(fmt.Sprintf("%s%02d", markPrefix, meterMarkShard(m.AccountID))), "sk": dynamo.S(markSK(m)),
		},
		UpdateExpression:         aws.String(markUpdate),
		ExpressionAttributeNames: dynamo.Names(markUpdate),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":account": dynamo.S(m.AccountID), ":feature": dynamo.S(m.Feature), ":cycle": dynamo.S(m.Cycle),
			":now": dynamo.N(m.MarkedAtMs), ":event": dynamo.S(m.EventID), ":one": dynamo.N(1),
		},
	}}
}

// Receipts implements Store: an event's receipts, oldest first, at most limit.
func (s *Table) Receipts(ctx context.Context, id string, limit int) ([]Receipt, error) {
	out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
		TableName:                aws.String(s.Table),
		KeyConditionExpression:   aws.String("#pk = :pk AND begins_with(#sk, :prefix)"),
		ExpressionAttributeNames: dynamo.Names("#pk #sk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": dynamo.S(eventPK(id)), ":prefix": dynamo.S(receiptPrefix),
		},
		ConsistentRead: aws.Bool(true),
		Limit:          aws.Int32(int32(limit)),
	})
	if err != nil {
		return nil, fmt.Errorf("read receipts of %s: %w", id, err)
	}
	receipts := make([]Receipt, 0, len(out.Items))
	for _, item := range out.Items {
		var it receiptItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return nil, fmt.Errorf("decode receipt of %s: %w", id, err)
		}
		receipts = append(receipts, Receipt{
			ReceivedAtMs: it.ReceivedAtMs, Duplicate: it.Duplicate, WebhookID: it.WebhookID, KeyID: it.KeyID, PayloadSHA256: it.PayloadSHA256,
		})
	}
	return receipts, nil
}

// Due implements Store: the ids of events that are not final and due by nowMs (received,
// failed past their backoff, or processing past their lease), oldest first, at most limit. The
// index is eventually consistent; the worker re-reads each event before acting on it.
func (s *Table) Due(ctx context.Context, nowMs int64, limit int) ([]string, error) {
	var ids []string
	var start map[string]types.AttributeValue
	for range maxDuePages {
		out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                aws.String(s.Table),
			IndexName:                aws.String(resources.IndexInboxDue),
			KeyConditionExpression:   aws.String("#dueShard = :due AND #dueAtMs <= :now"),
			ExpressionAttributeNames: dynamo.Names("#dueShard #dueAtMs"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":due": dynamo.S(dueValue), ":now": dynamo.N(nowMs),
			},
			Limit:             aws.Int32(int32(min(limit-len(ids), duePageSize))),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return ids, fmt.Errorf("query due billing events: %w", err)
		}
		for _, item := range out.Items {
			if id, ok := strings.CutPrefix(dynamo.Str(item, "pk"), eventPrefix); ok {
				ids = append(ids, id)
			}
		}
		if len(out.LastEvaluatedKey) == 0 || len(ids) >= limit {
			break
		}
		start = out.LastEvaluatedKey
	}
	return ids, nil
}

// ListQuery selects a page of events: all of them, or one account's, optionally in one status.
type ListQuery struct {
	AccountID string
	Status    Status
	Cursor    string
	Limit     int
}

// Page is one page of events, newest first, and the cursor of the next ("" at the end).
type Page struct {
	Events []Event
	Next   string
}

// List implements Store. It reads one page of the index that answers the query — by account,
// by status, by both, or all — and fetches the page's events in one strongly consistent
// BatchGetItem. An event that left the query's status or account since the index was read
// (indexes are eventually consistent) is left out of the page rather than shown as it was.
func (s *Table) List(ctx context.Context, q ListQuery) (Page, error) {
	index, attr, value := resources.IndexInboxAll, resources.InboxAttrListAll, listAllValue
	switch {
	case q.AccountID != "" && q.Status != "":
		index, attr, value = resources.IndexInboxAccountStatus, resources.InboxAttrListAccountStatus, q.AccountID+"#"+string(q.Status)
	case q.AccountID != "":
		index, attr, value = resources.IndexInboxAccount, resources.InboxAttrListAccount, q.AccountID
	case q.Status != "":
		index, attr, value = resources.IndexInboxStatus, resources.InboxAttrListStatus, string(q.Status)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.Table),
		IndexName:                 aws.String(index),
		KeyConditionExpression:    aws.String("#" + attr + " = :v"),
		ExpressionAttributeNames:  dynamo.Names("#" + attr),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": dynamo.S(value)},
		ScanIndexForward:          aws.Bool(false),
		Limit:                     aws.Int32(int32(q.Limit)),
	}
	if q.Cursor != "" {
		order, err := decodeCursor(q.Cursor)
		if err != nil {
			return Page{}, err
		}
		id := order[strings.IndexByte(order, '#')+1:]
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			attr: dynamo.S(value), resources.InboxAttrListOrder: dynamo.S(order),
			"pk": dynamo.S(eventPK(id)), "sk": dynamo.S(eventSK),
		}
	}
	out, err := s.DB.Query(ctx, in)
	if err != nil {
		return Page{}, fmt.Errorf("list billing events: %w", err)
	}
	var page Page
	if last := out.LastEvaluatedKey; len(last) > 0 {
		page.Next = encodeCursor(dynamo.Str(last, resources.InboxAttrListOrder))
	}
	if len(out.Items) == 0 {
		return page, nil
	}
	keys := make([]map[string]types.AttributeValue, 0, len(out.Items))
	for _, item := range out.Items {
		keys = append(keys, map[string]types.AttributeValue{"pk": item["pk"], "sk": item["sk"]})
	}
	items, err := dynamo.BatchGet(ctx, s.DB, s.Table, keys)
	if err != nil {
		return Page{}, fmt.Errorf("list billing events: %w", err)
	}
	byPK := map[string]Event{}
	for _, item := range items {
		e, err := decodeEvent(item)
		if err != nil {
			return Page{}, err
		}
		byPK[eventPK(e.ID)] = e
	}
	for _, k := range keys {
		e, ok := byPK[dynamo.Str(k, "pk")]
		if !ok || (q.Status != "" && e.Status != q.Status) || (q.AccountID != "" && e.AccountID != q.AccountID) {
			continue
		}
		page.Events = append(page.Events, e)
	}
	return page, nil
}

// A cursor is the list position of the last event of a page, base64url-encoded. It names no
// partition: the query's own (the caller's account, the status) is always used, so a cursor
// cannot reach outside what the caller may list.
func encodeCursor(order string) string { return base64.RawURLEncoding.EncodeToString([]byte(order)) }

func decodeCursor(cursor string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || !listOrderPattern.Match(raw) {
		return "", problem.Input("cursor is not one this API returned")
	}
	return string(raw), nil
}

// MeterMarkReader reads and clears meter marks (see MeterMarks).
type MeterMarkReader struct{ Store *Table }

// meterCursor is a position in the marks: a shard and the last key read in it.
func encodeMeterCursor(shard int, sk string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(shard) + "|" + sk))
}

func decodeMeterCursor(cursor string) (int, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return 0, "", problem.Input("meter mark cursor is not one List returned")
	}
	shardText, sk, ok := strings.Cut(string(raw), "|")
	shard, err := strconv.Atoi(shardText)
	if !ok || err != nil || shard < 0 || shard >= MeterMarkShards {
		return 0, "", problem.Input("meter mark cursor is not one List returned")
	}
	return shard, sk, nil
}

// List implements MeterMarks.
func (r MeterMarkReader) List(ctx context.Context, cursor string, limit int) ([]MeterMark, string, error) {
	if limit <= 0 || limit > MaxPageSize {
		limit = MaxPageSize
	}
	shard, after := 0, ""
	if cursor != "" {
		var err error
		if shard, after, err = decodeMeterCursor(cursor); err != nil {
			return nil, "", err
		}
	}
	var marks []MeterMark
	for ; shard < MeterMarkShards; shard, after = shard+1, "" {
		pk := fmt.Sprintf("%s%02d", markPrefix, shard)
		in := &dynamodb.QueryInput{
			TableName:                 aws.String(r.Store.Table),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  dynamo.Names("#pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": dynamo.S(pk)},
			ConsistentRead:            aws.Bool(true),
			Limit:                     aws.Int32(int32(limit - len(marks))),
		}
		if after != "" {
			in.ExclusiveStartKey = map[string]types.AttributeValue{"pk": dynamo.S(pk), "sk": dynamo.S(after)}
		}
		out, err := r.Store.DB.Query(ctx, in)
		if err != nil {
			return nil, "", fmt.Errorf("list meter marks: %w", err)
		}
		for _, item := range out.Items {
			marks = append(marks, MeterMark{
				AccountID: dynamo.Str(item, "accountId"), Feature: dynamo.Str(item, "feature"), Cycle: dynamo.Str(item, "cycle"),
				MarkedAtMs: dynamo.Int(item, "markedAtMs"), EventID: dynamo.Str(item, "eventId"), Rev: dynamo.Int(item, "rev"),
			})
		}
		if len(marks) >= limit {
			if len(out.LastEvaluatedKey) > 0 {
				return marks, encodeMeterCursor(shard, dynamo.Str(out.LastEvaluatedKey, "sk")), nil
			}
			if shard+1 < MeterMarkShards {
				return marks, encodeMeterCursor(shard+1, ""), nil
			}
			return marks, "", nil
		}
		if len(out.LastEvaluatedKey) > 0 {
			// A short page with more behind it (a size limit): continue in this shard.
			return marks, encodeMeterCursor(shard, dynamo.Str(out.LastEvaluatedKey, "sk")), nil
		}
	}
	return marks, "", nil
}

// Clear implements MeterMarks.
func (r MeterMarkReader) Clear(ctx context.Context, m MeterMark) (bool, error) {
	_, err := r.Store.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(r.Store.Table),
		Key: map[string]types.AttributeValue{
			"pk": dynamo.S(fmt.Sprintf("%s%02d", markPrefix, meterMarkShard(m.AccountID))), "sk": dynamo.S(markSK(m)),
		},
		ConditionExpression:       aws.String(clearCondition),
		ExpressionAttributeNames:  dynamo.Names(clearCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{":rev": dynamo.N(m.Rev)},
	})
	if dynamo.IsConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("clear meter mark %s %s %s: %w", m.AccountID, m.Cycle, m.Feature, err)
	}
	return true, nil
}

func (s *Table) write(ctx context.Context, what string, items []types.TransactWriteItem) error {
	_, err := s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if dynamo.IsTransactionCanceled(err) {
		return fmt.Errorf("%s: %w", what, ErrCancelled)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// IsCancelled reports whether err is a refused write.
func IsCancelled(err error) bool { return errors.Is(err, ErrCancelled) }
