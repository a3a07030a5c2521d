package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
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

func store(env *testenv.Env, db *dynamodb.Client) *ledger.Table {
	return &ledger.Table{DB: db, Table: env.Names.Table(resources.TableLedger),
		Usage: usage.Table{DB: db, Name: env.Names.Table(resources.TableUsage)}}
}

func capped(limit int64) ledger.Billing {
	return ledger.Billing{Kind: ledger.BillCapped, Tier: plans.Capped, Feature: plans.FeatureEvents, Amount: 1, Limit: plans.Max(limit)}
}

// marked puts the budget row's report mark, as it is in the steady state (see usage/marks.go): a
// claim then only checks it, in its one transaction.
func marked(t *testing.T, s *ledger.Table) {
	t.Helper()
	_, err := s.DB.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		s.Usage.MarkPut(acct, plans.FeatureEvents, cycle, usage.BudgetSK, nowMs),
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func eventsUsed(t *testing.T, s *ledger.Table) int64 {
	t.Helper()
	tot, err := s.Usage.Read(context.Background(), acct, plans.FeatureEvents, cycle)
	if err != nil {
		t.Fatal(err)
	}
	return tot.Used
}

// finished claims (and so bills) an event alone in a unit of its own, and marks it INSERTED.
func finished(t *testing.T, s *ledger.Table, id string) error {
	t.Helper()
	ctx := context.Background()
	if err := s.WriteBatchClaim(ctx, batchClaim("u_"+id, id)); err != nil {
		return err
	}
	return s.MarkInserted(ctx, acct, id, nowMs)
}

// unchanged reports how a step on a finished entry changed it.
func unchanged(ctx context.Context, s *ledger.Table, id string, before ledger.Entry) error {
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
