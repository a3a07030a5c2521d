package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymeter/ferry/internal/apptest"
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
