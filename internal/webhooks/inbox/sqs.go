package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// maxSendBatch is SQS's largest SendMessageBatch.
const maxSendBatch = 10

// nudge is the body of a queue message: the id of an event that may be ready.
type nudge struct {
	ID string `json:"id"`
}

// SQSNudger sends nudges to the inbox queue.
type SQSNudger struct {
	Client *sqs.Client
	URL    string
}

// Nudge implements Nudger. A delay longer than SQS allows is cut to its 15 minutes: the worker
// then finds the event not due yet and nudges it again, or the sweep does.
func (n *SQSNudger) Nudge(ctx context.Context, id string, delay time.Duration) error {
	body, _ := json.Marshal(nudge{ID: id})
	_, err := n.Client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(n.URL), MessageBody: aws.String(string(body)),
		DelaySeconds: int32(min(maxDelaySeconds, (delay+time.Second-1)/time.Second)),
	})
	if err != nil {
		return fmt.Errorf("nudge %s: %w", id, err)
	}
	return nil
}

// NudgeAll implements Nudger, ten to a request.
func (n *SQSNudger) NudgeAll(ctx context.Context, ids []string) error {
	var errs []error
	for start := 0; start < len(ids); start += maxSendBatch {
		batch := ids[start:min(start+maxSendBatch, len(ids))]
		entries := make([]types.SendMessageBatchRequestEntry, 0, len(batch))
		for i, id := range batch {
			body, _ := json.Marshal(nudge{ID: id})
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(body))})
		}
		out, err := n.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(n.URL), Entries: entries})
		if err != nil {
			errs = append(errs, fmt.Errorf("nudge %d events: %w", len(batch), err))
			continue
		}
		for _, f := range out.Failed {
			errs = append(errs, fmt.Errorf("nudge %s: %s", batch[atoi(aws.ToString(f.Id))], aws.ToString(f.Message)))
		}
	}
	return errors.Join(errs...)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// HandleSQS is the worker's Lambda handler: one nudge per message, with partial batch
// responses. A message whose event is not due yet is answered with a delayed nudge of its own
// (when the lease lapses, when the backoff ends) and deleted; a message whose work stopped on
// an error is reported failed, so SQS hands it back after its visibility timeout.
func (w *Applier) HandleSQS(ctx context.Context, batch events.SQSEvent) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	for _, m := range batch.Records {
		if err := w.handleMessage(ctx, m.Body); err != nil {
			w.Log.Warn("inbox message failed; it will be redelivered", "messageId", m.MessageId, "err", err)
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
	}
	return resp, nil
}

func (w *Applier) handleMessage(ctx context.Context, body string) error {
	var n nudge
	if err := json.Unmarshal([]byte(body), &n); err != nil || !ValidID(n.ID) {
		// Never sent by Ferry: leave it to the dead-letter queue and its alarm.
		return fmt.Errorf("not a nudge: %.100q", body)
	}
	out, err := w.Process(ctx, n.ID)
	if err != nil {
		return err
	}
	if out.RetryAfter > 0 {
		return w.Nudger.Nudge(ctx, n.ID, out.RetryAfter)
	}
	return nil
}
