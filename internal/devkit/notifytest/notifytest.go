// Package notifytest reads back what a test's Ferry told: every notification in the test's
// notifications table, each with the message its deliveries send. It is tooling for tests;
// production never imports it.
package notifytest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// maxPages bounds the scan: a test's notifications table is its own and small, so a scan that
// runs past this many pages is a test gone wrong.
const maxPages = 100

// Note is one stored notification: its item as stored, as read, and the message its deliveries
// send.
type Note struct {
	Item    map[string]types.AttributeValue
	Stored  notify.Stored
	Message notify.Message
}

// Read returns every notification stored in env's notifications table (not their deliveries),
// strongly consistent, in no particular order. A body that does not decode, or a message that
// names another notification or another account than its item, fails the test.
func Read(t testing.TB, env *testenv.Env) []Note {
	t.Helper()
	return ReadTable(t, env.Clients.DynamoDB, env.Names.Table(resources.TableNotifications))
}

// ReadTable is Read of the notifications table named table, for a test that made its own.
func ReadTable(t testing.TB, db *dynamodb.Client, table string) []Note {
	t.Helper()
	var out []Note
	var start map[string]types.AttributeValue
	for range maxPages {
		page, err := db.Scan(context.Background(), &dynamodb.ScanInput{
			TableName: aws.String(table), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			t.Fatalf("read the notifications: %v", err)
		}
		for _, item := range page.Items {
			if dynamo.Str(item, "sk") != notify.SKNotification {
				continue
			}
			n := notify.StoredOf(item)
			var m notify.Message
			if err := json.Unmarshal(n.Body, &m); err != nil {
				t.Fatalf("notification %s: %v", n.ID, err)
			}
			if m.ID != n.ID || m.Data.Account != n.Account {
				t.Errorf("notification %s (account %q) carries the message of %s (account %q)", n.ID, n.Account, m.ID, m.Data.Account)
			}
			out = append(out, Note{Item: item, Stored: n, Message: m})
		}
		if start = page.LastEvaluatedKey; len(start) == 0 {
			return out
		}
	}
	t.Fatalf("the notifications table has more than %d pages", maxPages)
	return nil
}
