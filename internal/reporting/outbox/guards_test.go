package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
)

func guardRow() outbox.Row {
	return outbox.Row{Account: "acct_g", Feature: "events", Cycle: "2026-11", Key: "total#5", Kind: outbox.KindReport,
		Total: 5, Delta: 5, EventName: "events", Customer: "cus_g", TimestampMs: 1_000, CycleEndMs: 9_000, CreatedAtMs: 1_000, UpdatedAtMs: 1_000}
}

// A second report of the same total under the same identifier is refused: one identifier, one row.
func TestGuard_OneIdentifierIsOneRow(t *testing.T) {
	testenv.NeedsGuard(t, "outbox.insert.absent", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := &outbox.Table{DB: db, Table: env.Names.Table(resources.TableOutbox)}, context.Background()
		for i := range 2 {
			item, err := s.InsertItem(guardRow())
			if err != nil {
				return err
			}
			_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{item}})
			if i == 0 && err != nil {
				return fmt.Errorf("first insert: %w", err)
			}
			if i == 1 && err == nil {
				return errors.New("a second row under the same identifier was written")
			}
		}
		return nil
	})
}

// A drainer that read a row before another one rewrote it cannot rewrite it.
func TestGuard_ALateDrainerNeverRewritesARowChangedSince(t *testing.T) {
	testenv.NeedsGuard(t, "outbox.rewrite.rev", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := &outbox.Table{DB: db, Table: env.Names.Table(resources.TableOutbox)}, context.Background()
		item, err := s.InsertItem(guardRow())
		if err != nil {
			return err
		}
		if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{item}}); err != nil {
			return err
		}
		row := guardRow()
		row.Status, row.ClaimOwner, row.ClaimUntilMs = outbox.Sending, "drainer-a", 60_000
		if _, err := s.Rewrite(ctx, row, 1); err != nil {
			return fmt.Errorf("drainer-a's claim: %w", err)
		}
		row.ClaimOwner = "drainer-b" // decided on revision 1, like drainer-a
		if _, err := s.Rewrite(ctx, row, 1); !errors.Is(err, outbox.ErrChanged) {
			return fmt.Errorf("drainer-b's claim from the same revision: %v, want ErrChanged", err)
		}
		return nil
	})
}
