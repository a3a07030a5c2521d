package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymeter/ferry/internal/dynamo"
	"github.com/ferrymeter/ferry/internal/event"
)

// SQS limits for SendMessageBatch, and how often Ferry retries entries SQS refused.
const (
	maxBatchEntries  = 10
	maxBatchPayload  = 256 << 10
	maxEntryAttempts = 3
)

// SQSQueue sends envelopes to an SQS queue.
type SQSQueue struct {
	Client *sqs.Client
	URL    string
}

// Send implements Queue.
func (q *SQSQueue) Send(ctx context.Context, env event.Envelope) error {
	body, err := json.Marshal(env)
	if err != nil {
		return err
	}
	_, err = q.Client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(string(body))})
	return err
}

// SendBatch implements Queue: SendMessageBatch calls of at most 10 entries and 256 KiB each;
// entries SQS refuses are sent again, a bounded number of times.
func (q *SQSQueue) SendBatch(ctx context.Context, envs []event.Envelope) error {
	bodies := make([]string, len(envs))
	for i, env := range envs {
		b, err := json.Marshal(env)
		if err != nil {
			return err
		}
		bodies[i] = string(b)
	}
	for _, chunk := range chunks(bodies) {
		if err := q.sendChunk(ctx, bodies, chunk); err != nil {
			return err
		}
	}
	return nil
}

// chunks groups body indexes into SendMessageBatch-sized groups.
func chunks(bodies []string) [][]int {
	var out [][]int
	var cur []int
	size := 0
	for i, b := range bodies {
		if len(cur) == maxBatchEntries || (len(cur) > 0 && size+len(b) > maxBatchPayload) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, i)
		size += len(b)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func (q *SQSQueue) sendChunk(ctx context.Context, bodies []string, chunk []int) error {
	pending := chunk
	for attempt := range maxEntryAttempts {
		entries := make([]types.SendMessageBatchRequestEntry, len(pending))
		for i, idx := range pending {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(idx)), MessageBody: aws.String(bodies[idx])}
		}
		out, err := q.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
		if err != nil {
			return err
		}
		if len(out.Failed) == 0 {
			return nil
		}
		var retry []int
		var reasons []error
		for _, f := range out.Failed {
			idx, _ := strconv.Atoi(aws.ToString(f.Id))
			if f.SenderFault {
				return fmt.Errorf("SQS refused event %d: %s", idx, aws.ToString(f.Message))
			}
			retry = append(retry, idx)
			reasons = append(reasons, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
		if attempt == maxEntryAttempts-1 {
			return fmt.Errorf("%d entries not queued after %d attempts: %w", len(retry), maxEntryAttempts, errors.Join(reasons...))
		}
		if err := dynamo.Sleep(ctx, dynamo.Backoff(attempt)); err != nil {
			return err
		}
		pending = retry
	}
	return nil
}
