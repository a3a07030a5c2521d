package idempotency

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Attribute names of a record item. The TTL attribute is the one resources declares.
const (
	attrPK               = "pk"
	attrScope            = "scope"
	attrRoute            = "route"
	attrFingerprint      = "fingerprint"
	attrState            = "state"
	attrToken            = "token"
	attrClaimedAtMs      = "claimedAtMs"
	attrLeaseExpiresAtMs = "leaseExpiresAtMs"
	attrExpiresAt        = resources.IdempotencyTTLAttribute
	attrCompletedAtMs    = "completedAtMs"
	attrStatus           = "status"
	attrHeaders          = "headers"
	attrBody             = "body"
)

// Expressions. Every attribute is written as a #name alias (dynamo.Names derives the map).
const (
	claimCondition = dynamo.AbsentCondition
	// takeOverCondition pins the claim that was read and checks, at the new claim's time, that it
	// is past its retention or in flight past its lease.
	takeOverCondition = "#token = :oldToken AND (#expiresAt <= :nowSec OR (#state = :inFlight AND #leaseExpiresAtMs <= :nowMs))"
	completeUpdate    = "SET #state = :completed, #completedAtMs = :completedAtMs, #expiresAt = :expiresAt, " +
		"#status = :status, #headers = :headers, #body = :body"
	// ownClaimCondition: the record still holds the owner's claim. A token names one claim,
	// and its owner finishes it once (completes or releases it), so a record under the owner's
	// token is still in flight.
	ownClaimCondition = "#token = :token"
)

// Table keeps records in the idempotency table, one item per record.
type Table struct {
	DB    *dynamodb.Client
	Table string
}

// Claim implements Store: a conditional insert that exactly one request can win.
func (s *Table) Claim(ctx context.Context, rec Record) error {
	added, err := dynamo.PutNew(ctx, s.DB, s.Table, item(rec))
	if err != nil {
		return fmt.Errorf("claim record %s: %w", rec.ID, err)
	}
	if !added {
		return ErrClaimed
	}
	return nil
}

// TakeOver implements Store. The condition pins the exact claim that was read (its token) and
// checks again, at the new claim's time, that it is expired: past its retention, or in flight
// past its lease. Of two requests taking over one claim, only one matches the old token.
func (s *Table) TakeOver(ctx context.Context, old, rec Record) error {
	cond := takeOverCondition
	_, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                aws.String(s.Table),
		Item:                     item(rec),
		ConditionExpression:      aws.String(cond),
		ExpressionAttributeNames: dynamo.Names(cond),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":oldToken": dynamo.S(old.Token),
			":nowSec":   dynamo.N(rec.ClaimedAtMs / 1000),
			":nowMs":    dynamo.N(rec.ClaimedAtMs),
			":inFlight": dynamo.S(string(InFlight)),
		},
	})
	if dynamo.IsConditionFailed(err) {
		return ErrClaimed
	}
	if err != nil {
		return fmt.Errorf("take over record %s: %w", rec.ID, err)
	}
	return nil
}

// Get implements Store.
func (s *Table) Get(ctx context.Context, id string) (Record, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.Table),
		Key:            map[string]types.AttributeValue{attrPK: dynamo.S(id)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Record{}, fmt.Errorf("read record %s: %w", id, err)
	}
	if out.Item == nil {
		return Record{}, ErrNotFound
	}
	return record(out.Item)
}

// Complete implements Store.
func (s *Table) Complete(ctx context.Context, rec Record) error {
	update, cond := completeUpdate, ownClaimCondition
	headers := make(map[string]types.AttributeValue, len(rec.Header))
	for k, v := range rec.Header {
		headers[k] = dynamo.S(v)
	}
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.Table),
		Key:                      map[string]types.AttributeValue{attrPK: dynamo.S(rec.ID)},
		UpdateExpression:         aws.String(update),
		ConditionExpression:      aws.String(cond),
		ExpressionAttributeNames: dynamo.Names(update, cond),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":completed":     dynamo.S(string(Completed)),
			":completedAtMs": dynamo.N(rec.CompletedAtMs),
			":expiresAt":     dynamo.N(rec.ExpiresAt),
			":status":        dynamo.N(int64(rec.Status)),
			":headers":       &types.AttributeValueMemberM{Value: headers},
			":body":          &types.AttributeValueMemberB{Value: rec.SealedBody},
			":token":         dynamo.S(rec.Token),
		},
	})
	if dynamo.IsConditionFailed(err) {
		return ErrClaimLost
	}
	if err != nil {
		return fmt.Errorf("complete record %s: %w", rec.ID, err)
	}
	return nil
}

// Release implements Store.
func (s *Table) Release(ctx context.Context, rec Record) error {
	cond := ownClaimCondition
	_, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                aws.String(s.Table),
		Key:                      map[string]types.AttributeValue{attrPK: dynamo.S(rec.ID)},
		ConditionExpression:      aws.String(cond),
		ExpressionAttributeNames: dynamo.Names(cond),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":token": dynamo.S(rec.Token),
		},
	})
	if dynamo.IsConditionFailed(err) {
		return ErrClaimLost
	}
	if err != nil {
		return fmt.Errorf("release record %s: %w", rec.ID, err)
	}
	return nil
}

// item is a claim as it is first written.
func item(rec Record) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK:               dynamo.S(rec.ID),
		attrScope:            dynamo.S(rec.Scope),
		attrRoute:            dynamo.S(rec.Route),
		attrFingerprint:      dynamo.S(rec.Fingerprint),
		attrState:            dynamo.S(string(rec.State)),
		attrToken:            dynamo.S(rec.Token),
		attrClaimedAtMs:      dynamo.N(rec.ClaimedAtMs),
		attrLeaseExpiresAtMs: dynamo.N(rec.LeaseExpiresAtMs),
		attrExpiresAt:        dynamo.N(rec.ExpiresAt),
	}
}

// record reads an item.
func record(it map[string]types.AttributeValue) (Record, error) {
	rec := Record{
		ID:               dynamo.Str(it, attrPK),
		Scope:            dynamo.Str(it, attrScope),
		Route:            dynamo.Str(it, attrRoute),
		Fingerprint:      dynamo.Str(it, attrFingerprint),
		State:            State(dynamo.Str(it, attrState)),
		Token:            dynamo.Str(it, attrToken),
		ClaimedAtMs:      dynamo.Int(it, attrClaimedAtMs),
		LeaseExpiresAtMs: dynamo.Int(it, attrLeaseExpiresAtMs),
		ExpiresAt:        dynamo.Int(it, attrExpiresAt),
		CompletedAtMs:    dynamo.Int(it, attrCompletedAtMs),
		Status:           int(dynamo.Int(it, attrStatus)),
	}
	if rec.State != InFlight && rec.State != Completed {
		return Record{}, fmt.Errorf("record %s: unknown state %q", rec.ID, rec.State)
	}
	if m, ok := it[attrHeaders].(*types.AttributeValueMemberM); ok {
		rec.Header = make(map[string]string, len(m.Value))
		for k := range m.Value {
			rec.Header[k] = dynamo.Str(m.Value, k)
		}
	}
	if b, ok := it[attrBody].(*types.AttributeValueMemberB); ok {
		rec.SealedBody = b.Value
	}
	if rec.State == Completed && (rec.Status < 100 || rec.Status > 599) {
		return Record{}, fmt.Errorf("record %s: completed with status %d", rec.ID, rec.Status)
	}
	return rec, nil
}
