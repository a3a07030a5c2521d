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

	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// SQSHandler is a Lambda handler for SQS events with partial batch responses.
type SQSHandler func(ctx context.Context, batch events.SQSEvent) (events.SQSEventResponse, error)

// Event source defaults, as Lambda's SQS event source mapping has them.
const (
	DefaultBatchSize = 10
	// MaxBatchSize is the largest batch Lambda's SQS event source hands one invocation.
	MaxBatchSize    = 10_000
	longPollSeconds = 1
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
	// Window bounds how long one batch is gathered when BatchSize is above 10 (Lambda's
	// MaximumBatchingWindowInSeconds); zero gathers until a receive comes back empty.
	Window time.Duration
	Log    *slog.Logger
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

// PollOnce receives one batch (waiting up to waitSeconds for the first messages), invokes the
// handler and deletes what succeeded. It returns how many messages it received. A BatchSize
// above SQS's 10 a receive gathers several receives into one batch, as Lambda's batching window
// does: receives continue while they bring messages and the batch has room, for at most Window.
func (s *EventSource) PollOnce(ctx context.Context, waitSeconds int32) (int, error) {
	size := s.BatchSize
	if size <= 0 {
		size = DefaultBatchSize
	}
	size = min(size, MaxBatchSize)
	var msgs []types.Message
	deadline := time.Now().Add(s.Window)
	for len(msgs) < size {
		wait := waitSeconds
		if len(msgs) > 0 {
			wait = 0
		}
		out, err := s.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(s.QueueURL),
			MaxNumberOfMessages:         int32(min(size-len(msgs), DefaultBatchSize)),
			WaitTimeSeconds:             wait,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			if len(msgs) > 0 {
				break // hand over what was gathered; the error shows on the next poll
			}
			return 0, err
		}
		msgs = append(msgs, out.Messages...)
		if len(out.Messages) == 0 || size <= DefaultBatchSize || (s.Window > 0 && time.Now().After(deadline)) {
			break
		}
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	batch := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
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
	for start := 0; start < len(entries); start += DefaultBatchSize {
		part := entries[start:min(start+DefaultBatchSize, len(entries))]
		del, err := s.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.QueueURL), Entries: part})
		if err != nil {
			// Undeleted messages are redelivered; the worker acks redeliveries of finished events.
			return len(batch.Records), err
		}
		if len(del.Failed) > 0 {
			return len(batch.Records), errors.New("some processed messages could not be deleted; they will be redelivered and acked")
		}
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
