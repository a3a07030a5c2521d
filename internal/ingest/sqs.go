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

	"github.com/ferrymeter/ferry/internal/event"
	"github.com/ferrymeter/ferry/internal/retry"
)

// SQS limits for SendMessageBatch, and how many attempts an entry SQS itself failed (not the
// sender's fault) gets, the first included.
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
	_, err := retry.Do(ctx, retry.Contended.WithTries(maxEntryAttempts), func(ctx context.Context, _ retry.Lap) (struct{}, error) {
		entries := make([]types.SendMessageBatchRequestEntry, len(pending))
		for i, idx := range pending {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(idx)), MessageBody: aws.String(bodies[idx])}
		}
		out, err := q.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
		if err != nil {
			return struct{}{}, err
		}
		var again []int
		var reasons []error
		for _, f := range out.Failed {
			idx, _ := strconv.Atoi(aws.ToString(f.Id))
			if f.SenderFault {
				return struct{}{}, fmt.Errorf("SQS refused event %d: %s", idx, aws.ToString(f.Message))
			}
			again = append(again, idx)
			reasons = append(reasons, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
		if len(again) == 0 {
			return struct{}{}, nil
		}
		// SQS's own failures: send only those entries again.
		pending = again
		return struct{}{}, retry.Again(fmt.Errorf("%d entries not queued: %w", len(again), errors.Join(reasons...)))
	})
	if errors.Is(err, retry.ErrExhausted) {
		return fmt.Errorf("entries not queued after %d attempts: %w", maxEntryAttempts, err)
	}
	return err
}
