package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Slots bound how many labs run at once across every container: a run holds one of Count slot
// items in the console table under a lease as long as the run may last, taken with a conditional
// write (the slot is free, or its lease has lapsed) and given back when the run ends. A container
// that dies mid-run frees its slot when the lease lapses.
type Slots struct {
	DB    *dynamodb.Client
	Table string
	Count int
	Now   func() time.Time
	Log   *slog.Logger
}

// slotPrefix starts a slot item's key in the console table.
const slotPrefix = "labslot#"

// Slot conditions: a slot is taken only when no run holds it, or its run's lease lapsed; it is
// given back only by the run that holds it.
const (
	slotFree   = "attribute_not_exists(#pk) OR #leaseExpiresAtMs <= :now"
	slotHolder = "#holder = :holder"
)

// Acquire takes a free slot for lease and returns the function that gives it back; ErrLabsBusy
// when every slot is held.
func (s *Slots) Acquire(ctx context.Context, lease time.Duration) (func(), error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	holder := hex.EncodeToString(b[:])
	now := s.Now()
	for i := range s.Count {
		key := slotPrefix + strconv.Itoa(i)
		_, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.Table),
			Item: map[string]types.AttributeValue{
				"pk": dynamo.S(key), "holder": dynamo.S(holder),
				"leaseExpiresAtMs":            dynamo.N(now.Add(lease).UnixMilli()),
				resources.ConsoleTTLAttribute: dynamo.N(now.Add(lease).Add(time.Hour).Unix()),
			},
			ConditionExpression:       aws.String(slotFree),
			ExpressionAttributeNames:  dynamo.Names(slotFree),
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": dynamo.N(now.UnixMilli())},
		})
		if dynamo.IsConditionFailed(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("take lab slot %d: %w", i, err)
		}
		return func() { s.release(key, holder) }, nil
	}
	return nil, ErrLabsBusy
}

// release gives a slot back, even when the run's context has ended.
func (s *Slots) release(key, holder string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.Table),
		Key:                       map[string]types.AttributeValue{"pk": dynamo.S(key)},
		ConditionExpression:       aws.String(slotHolder),
		ExpressionAttributeNames:  dynamo.Names(slotHolder),
		ExpressionAttributeValues: map[string]types.AttributeValue{":holder": dynamo.S(holder)},
	})
	if err != nil && !dynamo.IsConditionFailed(err) {
		// The lease frees the slot when it lapses.
		s.Log.Warn("lab slot not given back; its lease will free it", "slot", key, "err", err)
	}
}
