package devstack

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymeter/ferry/internal/retry"
)

// SQSHandler is a Lambda handler for SQS events with partial batch responses.
type SQSHandler func(ctx context.Context, batch events.SQSEvent) (events.SQSEventResponse, error)

// Event source defaults, as Lambda's SQS event source mapping has them.
const (
	DefaultBatchSize = 10
	longPollSeconds  = 1
	// errorPause is how long a poller rests after a receive error before trying again.
	errorPause = 500 * time.Millisecond
)

// EventSource plays Lambda's SQS event source mapping: it long-polls the queue, hands batches of
// up to BatchSize messages to the handler as an events.SQSEvent, deletes the messages the
// handler did not report as failed (ReportBatchItemFailures), and leaves the failed ones to
// reappear after the visibility timeout. The queue's redrive policy moves a message that keeps
// failing to the DLQ after maxReceiveCount receives.
type EventSource struct {
	SQS       *sqs.Client
	QueueURL  string
	QueueARN  string
	Handler   SQSHandler
	BatchSize int
	Log       *slog.Logger
}

// Run polls with the given number of concurrent pollers until ctx ends.
func (s *EventSource) Run(ctx context.Context, pollers int) {
	done := make(chan struct{})
	for range max(1, pollers) {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				if _, err := s.PollOnce(ctx, longPollSeconds); err != nil && ctx.Err() == nil {
					s.Log.Warn("event source poll failed", "err", err)
					_ = retry.Sleep(ctx, errorPause)
				}
			}
		}()
	}
	for range max(1, pollers) {
		<-done
	}
}

// PollOnce receives one batch (waiting up to waitSeconds for messages), invokes the handler and
// deletes what succeeded. It returns how many messages it received.
func (s *EventSource) PollOnce(ctx context.Context, waitSeconds int32) (int, error) {
	size := s.BatchSize
	if size <= 0 || size > DefaultBatchSize {
		size = DefaultBatchSize
	}
	out, err := s.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.QueueURL),
		MaxNumberOfMessages:         int32(size),
		WaitTimeSeconds:             waitSeconds,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		return 0, err
	}
	if len(out.Messages) == 0 {
		return 0, nil
	}
	batch := events.SQSEvent{Records: make([]events.SQSMessage, len(out.Messages))}
	for i, m := range out.Messages {
		batch.Records[i] = events.SQSMessage{
			MessageId:      aws.ToString(m.MessageId),
			ReceiptHandle:  aws.ToString(m.ReceiptHandle),
			Body:           aws.ToString(m.Body),
			Md5OfBody:      aws.ToString(m.MD5OfBody),
			Attributes:     m.Attributes,
			EventSource:    "aws:sqs",
			EventSourceARN: s.QueueARN,
			AWSRegion:      "us-east-1",
		}
	}
	resp, err := s.Handler(ctx, batch)
	if err != nil {
		// A failed invocation fails the whole batch: every message comes back later.
		s.Log.Warn("worker invocation failed; the batch will be redelivered", "messages", len(batch.Records), "err", err)
		return len(batch.Records), nil
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	var entries []types.DeleteMessageBatchRequestEntry
	for i, m := range batch.Records {
		if failed[m.MessageId] {
			continue
		}
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(m.ReceiptHandle)})
	}
	if len(entries) == 0 {
		return len(batch.Records), nil
	}
	del, err := s.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.QueueURL), Entries: entries})
	if err != nil {
		// Undeleted messages are redelivered; the worker acks redeliveries of finished events.
		return len(batch.Records), err
	}
	if len(del.Failed) > 0 {
		return len(batch.Records), errors.New("some processed messages could not be deleted; they will be redelivered and acked")
	}
	return len(batch.Records), nil
}

// QueueARN reads a queue's ARN.
func QueueARN(ctx context.Context, c *sqs.Client, url string) (string, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", err
	}
	return out.Attributes[string(types.QueueAttributeNameQueueArn)], nil
}
