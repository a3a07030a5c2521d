package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// keyPrefix starts a session item's key in the console table, which also keeps the lab slots.
const keyPrefix = "session#"

// Table keeps sessions in the console table, one item per session, keyed by its token's
// hash. The TTL attribute lets DynamoDB delete an item some time after it expired.
type Table struct {
	DB    *dynamodb.Client
	Table string
}

func (s *Table) key(hash string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dynamo.S(keyPrefix + hash)}
}

// Put implements Store.
func (s *Table) Put(ctx context.Context, sess Session) error {
	added, err := dynamo.PutNew(ctx, s.DB, s.Table, map[string]types.AttributeValue{
		"pk":                          dynamo.S(keyPrefix + sess.Hash),
		"csrf":                        dynamo.S(sess.CSRF),
		"createdAtMs":                 dynamo.N(sess.CreatedAtMs),
		"expiresAtMs":                 dynamo.N(sess.ExpiresAtMs),
		resources.ConsoleTTLAttribute: dynamo.N(time.UnixMilli(sess.ExpiresAtMs).Add(time.Second).Unix()),
	})
	if err != nil {
		return fmt.Errorf("put session: %w", err)
	}
	if !added {
		return errors.New("a session with this token hash exists already")
	}
	return nil
}

// Get implements Store.
func (s *Table) Get(ctx context.Context, hash string) (Session, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: s.key(hash), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Session{}, fmt.Errorf("read session: %w", err)
	}
	if out.Item == nil {
		return Session{}, ErrNoSession
	}
	return Session{
		Hash: hash, CSRF: dynamo.Str(out.Item, "csrf"),
		CreatedAtMs: dynamo.Int(out.Item, "createdAtMs"), ExpiresAtMs: dynamo.Int(out.Item, "expiresAtMs"),
	}, nil
}

// Delete implements Store.
func (s *Table) Delete(ctx context.Context, hash string) error {
	if _, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table), Key: s.key(hash)}); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}
