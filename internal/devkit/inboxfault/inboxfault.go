// Package inboxfault kills the inbox worker at the one moment the reference scenario needs: after
// it has decided an event's effect and before the transaction that commits the effect and the
// APPLIED mark reaches DynamoDB. It is a DynamoDB client middleware, so the stop is real — the
// call is made and dies at the client, exactly as a worker killed at that instant would leave
// things — and it works against any endpoint. A killed worker writes nothing more: its next write
// to the event's item (the failure it would record) fails too, so the event stays PROCESSING
// under the dead worker's lease until a new claim takes it. It is instrumentation for tests and
// ferry dev; no deployed function installs it.
package inboxfault

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/devkit/instrument"
)

// CrashApply kills the apply transactions of the events it is armed for.
type CrashApply struct {
	mu    sync.Mutex
	armed map[string]int
	// dead holds the events whose killed worker's next write is still to be lost.
	dead  map[string]bool
	fired []string
}

// New returns an unarmed CrashApply.
func New() *CrashApply { return &CrashApply{armed: map[string]int{}, dead: map[string]bool{}} }

// Arm kills the next n apply transactions of the stored event id.
func (c *CrashApply) Arm(eventID string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed[eventID] += n
}

// Fired lists the events whose apply was killed, in order.
func (c *CrashApply) Fired() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.fired...)
}

// Option installs the middleware on a DynamoDB client.
func (c *CrashApply) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.inboxfault.CrashApply", c.handle), smithymw.Before)
	})
}

func (c *CrashApply) handle(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
	switch middleware.GetOperationName(ctx) {
	case "TransactWriteItems":
		if tx, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput); ok {
			if id, hit := c.take(tx); hit {
				return smithymw.InitializeOutput{}, smithymw.Metadata{}, fmt.Errorf("apply of billing event %s killed before it committed: %w", id, instrument.ErrInjectedCrash)
			}
		}
	case "UpdateItem":
		if u, ok := in.Parameters.(*dynamodb.UpdateItemInput); ok {
			if id, dead := c.deadWrite(u); dead {
				return smithymw.InitializeOutput{}, smithymw.Metadata{}, fmt.Errorf("billing event %s: its worker is dead: %w", id, instrument.ErrInjectedCrash)
			}
		}
	}
	return next.HandleInitialize(ctx, in)
}

// deadWrite reports whether u is the killed worker's next write to its event (and forgets it:
// the write after is another worker's).
func (c *CrashApply) deadWrite(u *dynamodb.UpdateItemInput) (string, bool) {
	id, ok := eventIDOf(u.Key)
	if !ok {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dead[id] {
		return "", false
	}
	delete(c.dead, id)
	return id, true
}

// take reports whether tx is the apply transaction of an armed event, and disarms one shot.
// An apply transaction is the one that moves the event's status: an update of the event item
// that sets its status (intake's insert is a put, a copy's count sets no status).
func (c *CrashApply) take(tx *dynamodb.TransactWriteItemsInput) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, n := range c.armed {
		if n > 0 && applies(tx, id) {
			c.armed[id]--
			c.dead[id] = true
			c.fired = append(c.fired, id)
			return id, true
		}
	}
	return "", false
}

func eventIDOf(key map[string]types.AttributeValue) (string, bool) {
	pk, ok := key["pk"].(*types.AttributeValueMemberS)
	sk, ok2 := key["sk"].(*types.AttributeValueMemberS)
	if !ok || !ok2 || sk.Value != "event" {
		return "", false
	}
	return strings.CutPrefix(pk.Value, "ev#")
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Gate holds the apply transaction of one event at the client until it is released: a worker
// paused after deciding and before committing, while a test moves durable state under it.
type Gate struct {
	eventID string
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

// NewGate returns a gate for the next apply of eventID.
func NewGate(eventID string) *Gate {
	return &Gate{eventID: eventID, reached: make(chan struct{}), release: make(chan struct{})}
}

// Reached is closed once the apply reaches the gate.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Release lets the held apply go on to DynamoDB.
func (g *Gate) Release() { close(g.release) }

// Option installs the gate on a DynamoDB client.
func (g *Gate) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.inboxfault.Gate", g.handle), smithymw.Before)
	})
}

func (g *Gate) handle(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
	if middleware.GetOperationName(ctx) == "TransactWriteItems" {
		if tx, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput); ok && applies(tx, g.eventID) {
			first := false
			g.once.Do(func() { first = true })
			if first {
				close(g.reached)
				select {
				case <-g.release:
				case <-ctx.Done():
					return smithymw.InitializeOutput{}, smithymw.Metadata{}, ctx.Err()
				}
			}
		}
	}
	return next.HandleInitialize(ctx, in)
}

// applies reports whether tx is the apply transaction of eventID.
func applies(tx *dynamodb.TransactWriteItemsInput, eventID string) bool {
	for _, item := range tx.TransactItems {
		if u := item.Update; u != nil && strings.Contains(derefString(u.UpdateExpression), "#status") {
			if id, ok := eventIDOf(u.Key); ok && id == eventID {
				return true
			}
		}
	}
	return false
}
