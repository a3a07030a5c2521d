package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/metering/event"
)

// testVisibility is the visibility timeout testenv gives queues.
const testVisibility = 2 * time.Second

func sqsSend(queueURL, body string) *sqs.SendMessageInput {
	return &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(body)}
}

// receiveAll reads what a queue holds (one long poll).
func receiveAll(t testing.TB, h *apptest.Harness, queueURL string) []string {
	t.Helper()
	out, err := h.Env.Clients.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range out.Messages {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	return bodies
}

// mode is the shape of the message the tests deliver: one event (what POST /v1/events queues,
// handled alone in its invocation: a unit of one event, as in sparse traffic), or packed with a
// companion event (what the batch route queues). Every crash-window test runs both.
type mode struct {
	name  string
	batch bool
}

var modes = []mode{{"Single", false}, {"Packed", true}}

// ids are the events one delivery of id carries in the mode.
func (m mode) ids(id string) []string {
	if m.batch {
		return []string{id, id + "_pair"}
	}
	return []string{id}
}

// body is the queue message of id (and, packed, its companion) as ingest sends it.
func (m mode) body(t testing.TB, h *apptest.Harness, accountID, id string, data map[string]any) string {
	t.Helper()
	if !m.batch {
		return message(t, h, accountID, id, data)
	}
	return packed(t, h, accountID, data, m.ids(id)...)
}

// packed is the packed message of events ids, as ingest's batch route queues it.
func packed(t testing.TB, h *apptest.Harness, accountID string, data map[string]any, ids ...string) string {
	t.Helper()
	p := event.Packed{AccountID: accountID, ReceivedAtMs: h.Clock.Now().UnixMilli()}
	for _, id := range ids {
		ce := map[string]any{"specversion": "1.0", "id": id, "source": "/tests", "type": "api.call"}
		if data != nil {
			ce["data"] = data
		}
		raw, _ := json.Marshal(ce)
		p.Events = append(p.Events, raw)
	}
	body, err := event.EncodePacked(p)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// payloadOf is the queued bytes of event id in a message body of either shape.
func payloadOf(t testing.TB, body, id string) []byte {
	t.Helper()
	m, err := event.DecodeMessage(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range m.Envelopes {
		if env.EventID == id {
			return env.Event
		}
	}
	t.Fatalf("event %s is not in the message", id)
	return nil
}
