package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	acct  = "acct_tx"
	cycle = "2026-11"
	nowMs = int64(1_795_000_000_000)
)

// wire records every DynamoDB request the store sends, as it leaves the client.
type wire struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	op     string
	params any
	err    error
}

func (w *wire) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("test.wire",
			func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				w.mu.Lock()
				w.calls = append(w.calls, call{op: middleware.GetOperationName(ctx), params: in.Parameters, err: err})
				w.mu.Unlock()
				return out, md, err
			}), smithymw.After)
	})
}

func (w *wire) ops(op string) []call {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []call
	for _, c := range w.calls {
		if c.op == op {
			out = append(out, c)
		}
	}
	return out
}

func store(env *testenv.Env, db *dynamodb.Client) *ledger.DynamoStore {
	return &ledger.DynamoStore{DB: db, Table: env.Names.Table(resources.TableLedger),
		Usage: usage.Table{DB: db, Name: env.Names.Table(resources.TableUsage)}}
}

func entry(id string) ledger.Entry {
	return ledger.Entry{AccountID: acct, EventID: id, Status: ledger.Inserting, RowInsertedAtMs: nowMs, ReceivedAtMs: nowMs,
		Cycle: cycle, CreatedAtMs: nowMs, UpdatedAtMs: nowMs}
}

func capped(limit int64) ledger.Billing {
	return ledger.Billing{Kind: ledger.BillCapped, Tier: plans.Capped, Feature: plans.FeatureEvents, Amount: 1, Limit: plans.Max(limit)}
}

func claim(t *testing.T, s *ledger.DynamoStore, id string) ledger.Entry {
	t.Helper()
	e := entry(id)
	if err := s.Claim(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	return e
}

// marked puts the budget row's report mark, as it is in the steady state (see usage/marks.go): a
// billing then only checks it, in its one transaction.
func marked(t *testing.T, s *ledger.DynamoStore) {
	t.Helper()
	_, err := s.DB.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		s.Usage.MarkPut(acct, plans.FeatureEvents, cycle, usage.BudgetSK, nowMs),
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func eventsUsed(t *testing.T, s *ledger.DynamoStore) int64 {
	t.Helper()
	tot, err := s.Usage.Read(context.Background(), acct, plans.FeatureEvents, cycle)
	if err != nil {
		t.Fatal(err)
	}
	return tot.Used
}

// The meter and the checkpoint move in one transaction, and its two conditions are sent exactly
// as written: the meter's cap (a fresh row passes only when the event fits) and the checkpoint's
// "INSERTING and not yet billed", each guarding the other's invariant. The same transaction
// checks the budget row's report mark.
func TestBillingTransaction_SendsTheTwoConditionsVerbatim(t *testing.T) {
	env := testenv.New(t)
	w := &wire{}
	s := store(env, env.ClientsWith(t, w.option).DynamoDB)
	marked(t, s)
	w.calls = nil
	e := claim(t, s, "evt_1")
	if _, err := ledger.AcceptBilling(context.Background(), s, e, capped(1000), nowMs); err != nil {
		t.Fatal(err)
	}
	txs := w.ops("TransactWriteItems")
	if len(txs) != 1 {
		t.Fatalf("%d TransactWriteItems, want 1: the meter and the checkpoint are one write", len(txs))
	}
	items := txs[0].params.(*dynamodb.TransactWriteItemsInput).TransactItems
	if len(items) != 3 || items[0].Update == nil || items[1].Put == nil || items[2].ConditionCheck == nil {
		t.Fatalf("the billing transaction has %d items; want the meter's update, the checkpoint's put and the mark's check", len(items))
	}
	meterCond, checkpointCond := aws.ToString(items[0].Update.ConditionExpression), aws.ToString(items[1].Put.ConditionExpression)
	if want := "attribute_not_exists(#committed) OR #committed <= :room"; meterCond != want {
		t.Errorf("the meter's condition is %q, want %q", meterCond, want)
	}
	if want := "#status = :inserting AND attribute_not_exists(#billingAcceptedAtMs)"; checkpointCond != want {
		t.Errorf("the checkpoint's condition is %q, want %q", checkpointCond, want)
	}
	// committed ≤ limit − amount: 1000 − 1.
	if room, ok := items[0].Update.ExpressionAttributeValues[":room"].(*types.AttributeValueMemberN); !ok || room.Value != "999" {
		t.Errorf("the meter's room is %v, want 999 (the limit less the amount)", items[0].Update.ExpressionAttributeValues[":room"])
	}
}

// A redelivered, already billed event races through the cancellation path: its transaction is
// cancelled by the checkpoint's condition, the one projected, strongly consistent re-read finds
// the checkpoint, and the answer is "accepted" — with the meter moved once.
func TestAcceptBilling_AlreadyBilledEventThroughTheCancellation_AnswersAccepted(t *testing.T) {
	env := testenv.New(t)
	w := &wire{}
	s := store(env, env.ClientsWith(t, w.option).DynamoDB)
	marked(t, s)
	w.calls = nil
	e := claim(t, s, "evt_1")
	if out, err := ledger.AcceptBilling(context.Background(), s, e, capped(1000), nowMs); err != nil || out != ledger.Accepted {
		t.Fatalf("first billing: %v, %v", out, err)
	}
	out, err := ledger.AcceptBilling(context.Background(), s, e, capped(1000), nowMs+1)
	if err != nil || out != ledger.AlreadyAccepted {
		t.Fatalf("the redelivery's billing: %v, %v; want AlreadyAccepted", out, err)
	}
	txs := w.ops("TransactWriteItems")
	if len(txs) != 2 || txs[1].err == nil {
		t.Fatalf("want the second transaction sent and cancelled; got %d transactions", len(txs))
	}
	if got := eventsUsed(t, s); got != 1 {
		t.Errorf("the meter is %d after one event billed twice; want 1", got)
	}
	// The re-reads: the mark (present: it did not cancel the write), then the checkpoint.
	var reads []call
	for _, c := range w.ops("GetItem") {
		if aws.ToString(c.params.(*dynamodb.GetItemInput).TableName) == env.Names.Table(resources.TableLedger) {
			reads = append(reads, c)
		}
	}
	if len(reads) != 1 {
		t.Fatalf("%d re-reads of the ledger after the cancellation; want the one projected read of the checkpoint", len(reads))
	}
	in := reads[0].params.(*dynamodb.GetItemInput)
	if !aws.ToBool(in.ConsistentRead) || aws.ToString(in.ProjectionExpression) == "" {
		t.Errorf("the checkpoint's re-read is consistent=%v, projection %q; want strongly consistent and projected", aws.ToBool(in.ConsistentRead), aws.ToString(in.ProjectionExpression))
	}
}

// At an exhausted limit the transaction is cancelled by the meter's condition; the checkpoint is
// absent, the budget row (read strongly consistent) confirms the limit, and the answer is
// "rejected": nothing moved.
func TestAcceptBilling_ExhaustedLimit_AnswersRejected(t *testing.T) {
	env := testenv.New(t)
	w := &wire{}
	s := store(env, env.ClientsWith(t, w.option).DynamoDB)
	marked(t, s)
	if _, err := ledger.AcceptBilling(context.Background(), s, claim(t, s, "evt_1"), capped(1), nowMs); err != nil {
		t.Fatal(err)
	}
	w.calls = nil
	_, err := ledger.AcceptBilling(context.Background(), s, claim(t, s, "evt_2"), capped(1), nowMs)
	if !errors.Is(err, ledger.ErrLimitReached) {
		t.Fatalf("billing past the limit: %v; want ErrLimitReached", err)
	}
	explained := w.ops("GetItem")
	if got := eventsUsed(t, s); got != 1 {
		t.Errorf("the meter is %d; want 1", got)
	}
	billed, _, err := s.Checkpoint(context.Background(), acct, "evt_2")
	if err != nil || billed {
		t.Errorf("evt_2's checkpoint: %v, %v; want absent", billed, err)
	}
	// Both reads that explain the cancellation are strongly consistent.
	for _, c := range explained {
		for _, r := range instrument.Reads(c.params, map[string]string{
			env.Names.Table(resources.TableLedger): resources.TableLedger, env.Names.Table(resources.TableUsage): resources.TableUsage,
		}) {
			if msg := instrument.StaleRead(resources.FunctionWorker, r); msg != "" {
				t.Error(msg)
			}
		}
	}
	if n := len(explained); n != 3 {
		t.Errorf("%d reads explained the cancellation; want three (the report mark, the checkpoint, the budget row)", n)
	}
}

// finished claims, bills and marks an event INSERTED.
func finished(t *testing.T, s *ledger.DynamoStore, id string) error {
	t.Helper()
	ctx := context.Background()
	e := entry(id)
	if err := s.Claim(ctx, e); err != nil {
		return err
	}
	if _, err := ledger.AcceptBilling(ctx, s, e, capped(1000), nowMs); err != nil {
		return err
	}
	return s.MarkInserted(ctx, acct, id, nowMs)
}

// unchanged reports how a step on a finished entry changed it.
func unchanged(ctx context.Context, s *ledger.DynamoStore, id string, before ledger.Entry) error {
	after, err := s.Get(ctx, acct, id)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(after, before) {
		return fmt.Errorf("the INSERTED entry changed: %+v, was %+v", after, before)
	}
	return nil
}

// A row refused for one delivery counts against an unfinished event only: a delivery whose row
// write was refused after another finished the event changes nothing about it.
func TestGuard_QuarantineOfAFinishedEvent_ChangesNothing(t *testing.T) {
	testenv.NeedsGuard(t, "ledger.quarantine.inserting", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s := store(env, db)
		ctx := context.Background()
		if err := finished(t, s, "evt_q"); err != nil {
			return err
		}
		before, _ := s.Get(ctx, acct, "evt_q")
		if _, err := s.Quarantine(ctx, acct, "evt_q", "row refused", nowMs+5); !errors.Is(err, ledger.ErrNotInserting) {
			return fmt.Errorf("quarantine of an INSERTED event: %v, want ErrNotInserting", err)
		}
		return unchanged(ctx, s, "evt_q", before)
	})
}

// An INSERTED event never ends UNINSERTABLE, whatever a late delivery's row write met.
func TestGuard_UninsertableOfAFinishedEvent_ChangesNothing(t *testing.T) {
	testenv.NeedsGuard(t, "ledger.uninsertable.inserting", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s := store(env, db)
		ctx := context.Background()
		if err := finished(t, s, "evt_u"); err != nil {
			return err
		}
		before, _ := s.Get(ctx, acct, "evt_u")
		if err := s.MarkUninsertable(ctx, acct, "evt_u", nowMs+5); !errors.Is(err, ledger.ErrNotInserting) {
			return fmt.Errorf("UNINSERTABLE on an INSERTED event: %v, want ErrNotInserting", err)
		}
		return unchanged(ctx, s, "evt_u", before)
	})
}

// A redrive (ferry redrive) reopens only an UNINSERTABLE event: an operator who names an
// INSERTED one is refused, and the event stays as it was.
func TestGuard_ReopenOfAnInsertedEvent_IsRefused(t *testing.T) {
	testenv.NeedsGuard(t, "ledger.reopen.uninsertable", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s := store(env, db)
		ctx := context.Background()
		if err := finished(t, s, "evt_r"); err != nil {
			return err
		}
		before, _ := s.Get(ctx, acct, "evt_r")
		if err := s.Reopen(ctx, acct, "evt_r", nowMs+5); err == nil {
			return errors.New("reopening an INSERTED event succeeded")
		}
		return unchanged(ctx, s, "evt_r", before)
	})
}

// internalBilling is the internal tier's billing: the checkpoint alone, one conditional update.
func internalBilling() ledger.Billing {
	return ledger.Billing{Kind: ledger.BillCheckpointOnly, Tier: plans.Internal, Feature: plans.FeatureEvents}
}

// An internal-tier event billed twice (a redelivery) is stamped once: the second billing answers
// "already accepted".
func TestGuard_CheckpointOnlyBillingOfABilledEvent_AnswersAlreadyAccepted(t *testing.T) {
	testenv.NeedsGuard(t, "ledger.checkpoint.unbilled", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := store(env, db), context.Background()
		e := claim(t, s, "evt_i")
		if out, err := ledger.AcceptBilling(ctx, s, e, internalBilling(), nowMs); err != nil || out != ledger.Accepted {
			return fmt.Errorf("first billing: %v, %v", out, err)
		}
		if out, err := ledger.AcceptBilling(ctx, s, e, internalBilling(), nowMs+1); err != nil || out != ledger.AlreadyAccepted {
			return fmt.Errorf("the redelivery's billing: %v, %v; want AlreadyAccepted", out, err)
		}
		return nil
	})
}

// An internal-tier event another delivery rejected is never billed.
func TestGuard_CheckpointOnlyBillingOfARejectedEvent_IsRefused(t *testing.T) {
	testenv.NeedsGuard(t, "ledger.checkpoint.inserting", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := store(env, db), context.Background()
		e := claim(t, s, "evt_r")
		if err := s.Reject(ctx, acct, "evt_r", "inactive", nowMs); err != nil {
			return err
		}
		if _, err := ledger.AcceptBilling(ctx, s, e, internalBilling(), nowMs+1); !errors.Is(err, ledger.ErrNotInserting) {
			return fmt.Errorf("billing a REJECTED event: %v; want ErrNotInserting", err)
		}
		return nil
	})
}
