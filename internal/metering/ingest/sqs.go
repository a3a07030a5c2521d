package ingest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// SQS limits for SendMessageBatch, and how many attempts an entry SQS itself failed (not the
// sender's fault) gets, the first included.
const (
	maxBatchEntries  = 10
	maxBatchPayload  = 256 << 10
	maxEntryAttempts = 3
)

// SQSQueue sends envelopes to an SQS queue: one event as a message body event.EncodeEnvelope
// writes, a batch's events packed several to a message (event.EncodePacked), up to
// event.MaxPackedEvents each and no more than one claim transaction meters (Packs), so that a
// pack is one message, one worker transaction and one archive object.
type SQSQueue struct {
	Client *sqs.Client
	URL    string
	// Meters are the catalog's meters: a pack holds no more events than the worker's claim of
	// it can meter in one transaction (see Packs).
	Meters meter.Set
}

// maxPackedRaw bounds a packed message's JSON so its base64 body stays within SQS's 256 KiB.
const maxPackedRaw = (maxBatchPayload/4)*3 - 1024

// Send implements Queue.
func (q *SQSQueue) Send(ctx context.Context, env event.Envelope) error {
	body, err := event.EncodeEnvelope(env)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrQueueUnavailable, err)
	}
	rec := &sendRecord{}
	_, err = q.Client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(body)}, rec.option)
	return rec.outcome(err)
}

// SendBatch implements Queue: SendMessageBatch calls of at most 10 entries and 256 KiB each;
// entries SQS refuses are sent again, a bounded number of times.
func (q *SQSQueue) SendBatch(ctx context.Context, envs []event.Envelope) error {
	bodies, err := q.encode(envs)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrQueueUnavailable, err)
	}
	// One record for the whole batch: once any chunk may have landed, a later failure leaves
	// the batch's outcome unknown.
	rec := &sendRecord{}
	for _, chunk := range chunks(bodies) {
		if err := q.sendChunk(ctx, bodies, chunk, rec); err != nil {
			return rec.outcome(err)
		}
	}
	return nil
}

// encode renders the message bodies of a batch: its envelopes packed (Packs).
func (q *SQSQueue) encode(envs []event.Envelope) ([]string, error) {
	var bodies []string
	for _, p := range Packs(envs, PackReadings(q.Meters)) {
		b, err := event.EncodePacked(p)
		if err != nil {
			return nil, err
		}
		bodies = append(bodies, b)
	}
	return bodies, nil
}

// PackReadings reads an envelope's meter readings under meters, as Packs bounds a pack by them:
// an event ingest did not accept, or one whose value refuses it, meters nothing.
func PackReadings(meters meter.Set) func(event.Envelope) []meter.Reading {
	return func(env event.Envelope) []meter.Reading {
		ev, err := event.Parse(env.Event)
		if err != nil {
			return nil
		}
		rs, _ := meters.Read(ev.ForMeters(env.ReceivedAtMs))
		return rs
	}
}

// Packs groups a batch's envelopes into packed messages: consecutive envelopes of the same
// account and instant, at most event.MaxPackedEvents and maxPackedRaw bytes of events each, and
// no more than the worker's claim of the pack holds in one transaction (maxPackItems: the
// entries, the rows item and what the events' meters add, meter.Footprint, with read giving an
// envelope's readings), split into packs of near-equal count (100 events make two packs of 50,
// not 95 and 5).
func Packs(envs []event.Envelope, read func(event.Envelope) []meter.Reading) []event.Packed {
	reads := make([][]meter.Reading, len(envs))
	for i, env := range envs {
		reads[i] = read(env)
	}
	var out []event.Packed
	for start := 0; start < len(envs); {
		end := start + 1
		for end < len(envs) && envs[end].AccountID == envs[start].AccountID && envs[end].ReceivedAtMs == envs[start].ReceivedAtMs {
			end++
		}
		run, runReads := envs[start:end], reads[start:end]
		// How many packs the run needs by count and items, then as many of near-equal count;
		// bytes (and items, where the events differ) may still close a pack early.
		parts := 0
		for i := 0; i < len(run); parts++ {
			var fp meter.Footprint
			n := 0
			for i < len(run) && n < event.MaxPackedEvents {
				next := fp.Clone()
				next.Add(runReads[i], run[i].ReceivedAtMs)
				if n > 0 && n+1+1+next.Items() > maxPackItems {
					break
				}
				fp, n, i = next, n+1, i+1
			}
		}
		per := (len(run) + parts - 1) / parts
		for len(run) > 0 {
			p := event.Packed{AccountID: run[0].AccountID, ReceivedAtMs: run[0].ReceivedAtMs}
			size := 0
			var fp meter.Footprint
			for len(run) > 0 && len(p.Events) < per && (len(p.Events) == 0 || size+len(run[0].Event)+1 <= maxPackedRaw) {
				next := fp.Clone()
				next.Add(runReads[0], run[0].ReceivedAtMs)
				if len(p.Events) > 0 && len(p.Events)+1+1+next.Items() > maxPackItems {
					break
				}
				fp = next
				p.Events = append(p.Events, run[0].Event)
				size += len(run[0].Event) + 1
				run, runReads = run[1:], runReads[1:]
			}
			out = append(out, p)
		}
		start = end
	}
	return out
}

// maxPackItems is DynamoDB's bound on one TransactWriteItems, which holds a pack's claim.
const maxPackItems = 100

// sendRecord learns, attempt by attempt (the SDK retries inside one call), whether a send may
// have reached the queue. Only an answer that proves otherwise counts as "not queued": SQS
// refusing the request (HTTP 4xx), a connection that was never made, or a batch answer whose
// every entry failed. Everything else — a 5xx, a timeout or a reset after the request went out,
// an answer whose MD5 does not match what was sent — may have queued the message.
type sendRecord struct {
	mu            sync.Mutex
	mayHaveLanded bool
}

// option installs the record's middleware on one call, inside the SDK's retry loop, so that it
// sees every attempt.
func (r *sendRecord) option(o *sqs.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("FerrySendOutcome", r.attempt), "Retry", middleware.After)
	})
}

func (r *sendRecord) attempt(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleFinalize(ctx, in)
	if !provedNotQueued(out, err) {
		r.mu.Lock()
		r.mayHaveLanded = true
		r.mu.Unlock()
	}
	return out, md, err
}

// provedNotQueued reports whether one attempt's answer proves that nothing was queued by it.
func provedNotQueued(out middleware.FinalizeOutput, err error) bool {
	if err == nil {
		batch, ok := out.Result.(*sqs.SendMessageBatchOutput)
		return ok && len(batch.Successful) == 0
	}
	var respErr *smithyhttp.ResponseError
	if errors.As(err, &respErr) && respErr.HTTPStatusCode() != 0 { // 0: no answer came
		status := respErr.HTTPStatusCode()
		return status >= 400 && status < 500
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	return errors.As(err, &opErr) && opErr.Op == "dial" || errors.As(err, &dnsErr)
}

// outcome turns a failed send into ErrQueueUnavailable when nothing can have been queued, and
// leaves it as it is otherwise: the caller must treat the outcome as unknown.
func (r *sendRecord) outcome(err error) error {
	if err == nil {
		return nil
	}
	r.mu.Lock()
	landed := r.mayHaveLanded
	r.mu.Unlock()
	if !landed {
		return fmt.Errorf("%w: %v", ErrQueueUnavailable, err)
	}
	return err
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

func (q *SQSQueue) sendChunk(ctx context.Context, bodies []string, chunk []int, rec *sendRecord) error {
	pending := chunk
	_, err := retry.Do(ctx, retry.Contended.WithTries(maxEntryAttempts), func(ctx context.Context, _ retry.Lap) (struct{}, error) {
		entries := make([]types.SendMessageBatchRequestEntry, len(pending))
		for i, idx := range pending {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(idx)), MessageBody: aws.String(bodies[idx])}
		}
		out, err := q.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries}, rec.option)
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
