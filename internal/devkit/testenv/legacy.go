package testenv

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ClaimedAlone is a ledger entry as the per-event worker of releases before the one worker
// design left it when it claimed an event on its own and died before billing it: INSERTING, no
// checkpoint, no batch, no archive location. Its shape is frozen history, so it is written here
// attribute by attribute rather than through the ledger's own encoding, which has moved on.
type ClaimedAlone struct {
	AccountID, EventID, Cycle     string
	RowInsertedAtMs, ReceivedAtMs int64
}

// PutClaimedAlone writes entry into the ledger table, unconditionally.
func PutClaimedAlone(ctx context.Context, db *dynamodb.Client, table string, e ClaimedAlone) error {
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"pk": s(e.AccountID + "#" + e.EventID), "accountId": s(e.AccountID), "eventId": s(e.EventID), "status": s("INSERTING"),
		"rowInsertedAtMs": n(e.RowInsertedAtMs), "receivedAtMs": n(e.ReceivedAtMs), "cycle": s(e.Cycle),
		"createdAtMs": n(e.RowInsertedAtMs), "updatedAtMs": n(e.RowInsertedAtMs),
	}})
	if err != nil {
		return fmt.Errorf("put the entry %s claimed alone: %w", e.EventID, err)
	}
	return nil
}
