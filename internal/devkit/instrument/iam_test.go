package instrument

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// The guard decides before a call leaves the process, so these clients point at a port where
// nothing listens: a refused call fails as AccessDenied, an allowed one gets as far as the
// network and fails there.
func TestGuard_RefusesWhatTheGrantRefuses(t *testing.T) {
	fn := resources.Function{
		Name:   "reader",
		Tables: map[string]resources.Access{"ledger": resources.Read, "usage": resources.ReadWrite},
		Queues: map[string]resources.Access{"events": resources.Send},
	}
	names := resources.Names{
		Tables: map[string]string{"ledger": "t-ledger", "usage": "t-usage", "holds": "t-holds"},
		Queues: map[string]string{"events": "http://127.0.0.1:1/q/events", "events-dlq": "http://127.0.0.1:1/q/dlq"},
	}
	guard := NewGuard(fn, names)
	dead := cloud.Endpoints{DynamoDB: "http://127.0.0.1:1", S3: "http://127.0.0.1:1", SQS: "http://127.0.0.1:1"}
	clients, err := cloud.New(context.Background(), dead, guard.Options())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // allowed calls stop at once instead of retrying the dead endpoint
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}
	cases := []struct {
		name    string
		call    func() error
		refused bool
	}{
		{"a read of a read-granted table", func() error {
			_, err := clients.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t-ledger"), Key: key})
			return err
		}, false},
		{"a write of a read-granted table", func() error {
			_, err := clients.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t-ledger"), Item: key})
			return err
		}, true},
		{"a transaction writing a read-granted table beside a granted one", func() error {
			_, err := clients.DynamoDB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{Update: &types.Update{TableName: aws.String("t-usage"), Key: key, UpdateExpression: aws.String("SET a = :a")}},
				{Put: &types.Put{TableName: aws.String("t-ledger"), Item: key}},
			}})
			return err
		}, true},
		{"a read of a table the entry does not list", func() error {
			_, err := clients.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t-holds"), Key: key})
			return err
		}, true},
		{"a scan, which no access level grants", func() error {
			_, err := clients.DynamoDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String("t-usage")})
			return err
		}, true},
		{"a send to a send-granted queue", func() error {
			_, err := clients.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(names.Queues["events"]), MessageBody: aws.String("{}")})
			return err
		}, false},
		{"a send to the DLQ, which the entry does not list", func() error {
			_, err := clients.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(names.Queues["events-dlq"]), MessageBody: aws.String("{}")})
			return err
		}, true},
		{"a table that is not one of Ferry's resources", func() error {
			_, err := clients.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("missing-table"), Key: key})
			return err
		}, false},
	}
	refusals := 0
	for _, c := range cases {
		err := c.call()
		var api smithy.APIError
		denied := errors.As(err, &api) && api.ErrorCode() == "AccessDeniedException"
		if denied != c.refused {
			t.Errorf("%s: refused %v (%v), want %v", c.name, denied, err, c.refused)
		}
		if c.refused {
			refusals++
		}
	}
	got := guard.Refused()
	if len(got) != refusals {
		t.Fatalf("recorded %d refusals, want %d: %v", len(got), refusals, got)
	}
	if !strings.Contains(got[0], "function reader may not dynamodb:PutItem on table ledger") || !strings.Contains(got[0], "grants read") {
		t.Errorf("refusal %q does not name the function, the action, the table and the grant", got[0])
	}
}
