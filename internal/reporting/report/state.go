package report

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// Key names one (account, feature, cycle): the unit Ferry reports and reconciles.
type Key struct {
	Account string
	Feature string
	Cycle   string
}

// PK is the key's partition in the usage, meters and outbox tables.
func (k Key) PK() string { return usage.PartitionKey(k.Account, k.Feature, k.Cycle) }

func (k Key) String() string { return k.Account + " " + k.Feature + " " + k.Cycle }

// ParseKey reads a key back from a partition key.
func ParseKey(pk string) (Key, bool) {
	parts := strings.Split(pk, "#")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return Key{}, false
	}
	return Key{Account: parts[0], Feature: parts[1], Cycle: parts[2]}, true
}

// State is what Ferry has told the providers about one key: the last total sent to each (Stripe's
// lastSent is what the next delta is computed from) and the lease that keeps two reporters (or a
// reporter and the reconciler) off one key at once.
type State struct {
	StripeSent     int64
	StripeSentAtMs int64
	// StripeEpoch counts the reconciler's cancellations (see outbox.ReportKey).
	StripeEpoch int64
	// StripeSeq counts the Stripe reports and repairs committed (see outbox.AbsoluteKey).
	StripeSeq     int64
	KindeSent     int64
	KindeSentAtMs int64
	LeaseUntilMs  int64
	LeaseOwner    string
	// LeaseRole says which kind of run holds (or last held) the lease.
	LeaseRole Role
}

// Role is the kind of run that takes a cycle's lease.
type Role string

// Roles. A lease taken before roles were recorded reads as "".
const (
	RoleReporter   Role = "reporter"
	RoleReconciler Role = "reconciler"
)

// LeasedError is a claim refused because another run holds the lease, named as the lease
// records it. errors.Is(err, ErrLeased) holds for it.
type LeasedError struct {
	Role    Role
	Owner   string
	UntilMs int64
}

func (e *LeasedError) Error() string {
	return fmt.Sprintf("the cycle is leased by %s until %s", e.Holder(), time.UnixMilli(e.UntilMs).UTC().Format(time.RFC3339))
}

// Is makes a LeasedError match ErrLeased.
func (e *LeasedError) Is(target error) bool { return target == ErrLeased }

// Holder names the run that holds the lease, in words.
func (e *LeasedError) Holder() string {
	switch e.Role {
	case RoleReporter:
		return fmt.Sprintf("the reporter (%s)", e.Owner)
	case RoleReconciler:
		return fmt.Sprintf("another reconciliation (%s)", e.Owner)
	}
	return fmt.Sprintf("another run (%s)", e.Owner)
}

// Errors of the state store.
var (
	// ErrLeased: another reporter (or the reconciler) holds the key's lease.
	ErrLeased = errors.New("the cycle is being reported by another run")
	// ErrSentChanged: lastSent moved since it was read (another run reported first).
	ErrSentChanged = errors.New("lastSent changed since it was read")
)

// Expressions of the state store.
const (
	// claimCondition: the lease is free (never taken, released, or lapsed).
	claimCondition = "attribute_not_exists(#leaseUntilMs) OR #leaseUntilMs <= :now"
	claimUpdate    = "SET #leaseUntilMs = :until, #leaseOwner = :owner, #leaseRole = :role, #stripeSent = if_not_exists(#stripeSent, :zero), #kindeSent = if_not_exists(#kindeSent, :zero)"
	// releaseCondition: only the holder gives the lease back (a lapsed holder must not free a
	// lease another run has taken since).
	releaseCondition = "#leaseOwner = :owner"
	releaseUpdate    = "SET #leaseUntilMs = :zero"
	// stripeSentCondition: lastSent is still what the delta was computed from, so two runs can
	// never both write a delta from the same lastSent.
	stripeSentCondition = "#stripeSent = :prev"
	stripeSentUpdate    = "SET #stripeSent = :total, #stripeSentAtMs = :now ADD #stripeSeq :one"
	kindeSentUpdate     = "SET #kindeSent = :total, #kindeSentAtMs = :now"
	// stripeCancelledUpdate lowers lastSent after cancellations and starts a new epoch of keys.
	stripeCancelledUpdate = "SET #stripeSent = :total, #stripeSentAtMs = :now ADD #stripeEpoch :one"
	notBeforeUpdate       = "SET #notBeforeMs = :until"
)

// StateStore keeps State in the meters table.
type StateStore struct {
	DB    *dynamodb.Client
	Table string
}

func stateKey(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(pk)}
}

func stateOf(item map[string]types.AttributeValue) State {
	return State{
		StripeSent: dynamo.Int(item, "stripeSent"), StripeSentAtMs: dynamo.Int(item, "stripeSentAtMs"),
		StripeEpoch: dynamo.Int(item, "stripeEpoch"), StripeSeq: dynamo.Int(item, "stripeSeq"),
		KindeSent: dynamo.Int(item, "kindeSent"), KindeSentAtMs: dynamo.Int(item, "kindeSentAtMs"),
		LeaseUntilMs: dynamo.Int(item, "leaseUntilMs"), LeaseOwner: dynamo.Str(item, "leaseOwner"),
		LeaseRole: Role(dynamo.Str(item, "leaseRole")),
	}
}

// Claim takes the key's lease for a run of a role until untilMs and returns the state under it.
// A lease another run holds is a *LeasedError that names it.
func (s *StateStore) Claim(ctx context.Context, k Key, role Role, owner string, nowMs, untilMs int64) (State, error) {
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.Table),
		Key:                      stateKey(k.PK()),
		UpdateExpression:         aws.String(claimUpdate),
		ConditionExpression:      aws.String(claimCondition),
		ExpressionAttributeNames: dynamo.Names(claimUpdate, claimCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":until": dynamo.N(untilMs), ":owner": dynamo.S(owner), ":role": dynamo.S(string(role)), ":now": dynamo.N(nowMs), ":zero": dynamo.N(0),
		},
		ReturnValues: types.ReturnValueAllNew,
		// The holder, read in the same request that found the lease taken.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		held := stateOf(failed.Item)
		return State{}, &LeasedError{Role: held.LeaseRole, Owner: held.LeaseOwner, UntilMs: held.LeaseUntilMs}
	}
	if err != nil {
		return State{}, fmt.Errorf("claim the report lease of %s: %w", k, err)
	}
	return stateOf(out.Attributes), nil
}

// Release gives the lease back, if this owner still holds it.
func (s *StateStore) Release(ctx context.Context, k Key, owner string) error {
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.Table),
		Key:                       stateKey(k.PK()),
		UpdateExpression:          aws.String(releaseUpdate),
		ConditionExpression:       aws.String(releaseCondition),
		ExpressionAttributeNames:  dynamo.Names(releaseUpdate, releaseCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{":owner": dynamo.S(owner), ":zero": dynamo.N(0)},
	})
	if err != nil && !dynamo.IsConditionFailed(err) {
		return fmt.Errorf("release the report lease of %s: %w", k, err)
	}
	return nil
}

// Get reads the state (strongly consistent); a key never reported reads as zeros.
func (s *StateStore) Get(ctx context.Context, k Key) (State, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: stateKey(k.PK()), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return State{}, fmt.Errorf("read the report state of %s: %w", k, err)
	}
	return stateOf(out.Item), nil
}

// StripeSentItem is the transaction item that moves Stripe's lastSent from prev to total: it
// commits with the outbox row that carries the delta, or not at all.
func (s *StateStore) StripeSentItem(k Key, prev, total, nowMs int64) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(s.Table),
		Key:                      stateKey(k.PK()),
		UpdateExpression:         aws.String(stripeSentUpdate),
		ConditionExpression:      aws.String(stripeSentCondition),
		ExpressionAttributeNames: dynamo.Names(stripeSentUpdate, stripeSentCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":prev": dynamo.N(prev), ":total": dynamo.N(total), ":now": dynamo.N(nowMs), ":one": dynamo.N(1),
		},
	}}
}

// StripeCancelledItem is the transaction item that sets lastSent to total after the reconciler
// cancelled events (conditioned, like StripeSentItem, on the lastSent it read), and starts a new
// epoch of report keys.
func (s *StateStore) StripeCancelledItem(k Key, prev, total, nowMs int64) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(s.Table),
		Key:                      stateKey(k.PK()),
		UpdateExpression:         aws.String(stripeCancelledUpdate),
		ConditionExpression:      aws.String(stripeSentCondition),
		ExpressionAttributeNames: dynamo.Names(stripeCancelledUpdate, stripeSentCondition),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":prev": dynamo.N(prev), ":total": dynamo.N(total), ":now": dynamo.N(nowMs), ":one": dynamo.N(1),
		},
	}}
}

// Commit writes transaction items together (an outbox row and lastSent). A cancelled
// transaction is ErrSentChanged: the caller re-reads the state to learn what happened.
func (s *StateStore) Commit(ctx context.Context, items ...types.TransactWriteItem) error {
	_, err := s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if dynamo.IsTransactionCanceled(err) {
		return ErrSentChanged
	}
	return err
}

// SetKindeSent records the absolute total Kinde was last sent.
func (s *StateStore) SetKindeSent(ctx context.Context, k Key, total, nowMs int64) error {
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.Table),
		Key:                       stateKey(k.PK()),
		UpdateExpression:          aws.String(kindeSentUpdate),
		ExpressionAttributeNames:  dynamo.Names(kindeSentUpdate),
		ExpressionAttributeValues: map[string]types.AttributeValue{":total": dynamo.N(total), ":now": dynamo.N(nowMs)},
	})
	if err != nil {
		return fmt.Errorf("record the Kinde total of %s: %w", k, err)
	}
	return nil
}

// providerKey is the state item of a provider as a whole (its rate-limit pause).
func providerKey(provider string) map[string]types.AttributeValue {
	return stateKey("provider#" + provider)
}

// NotBefore is when Ferry may call a provider's meters again (0: now), after a 429.
func (s *StateStore) NotBefore(ctx context.Context, provider string) (int64, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: providerKey(provider), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, fmt.Errorf("read the %s pause: %w", provider, err)
	}
	return dynamo.Int(out.Item, "notBeforeMs"), nil
}

// SetNotBefore pauses calls to a provider's meters until untilMs (its RateLimit-Reset).
func (s *StateStore) SetNotBefore(ctx context.Context, provider string, untilMs int64) error {
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.Table),
		Key:                       providerKey(provider),
		UpdateExpression:          aws.String(notBeforeUpdate),
		ExpressionAttributeNames:  dynamo.Names(notBeforeUpdate),
		ExpressionAttributeValues: map[string]types.AttributeValue{":until": dynamo.N(untilMs)},
	})
	if err != nil {
		return fmt.Errorf("record the %s pause: %w", provider, err)
	}
	return nil
}
