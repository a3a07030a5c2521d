package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/platform/fanout"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
)

// Coalescing (batch mode): the messages of one invocation are grouped by account — single-event
// messages and packed ones alike — into units of at most event.MaxPackedEvents distinct events,
// each claimed, checkpointed and metered by one transaction and archived in one object
// (batch.go). A message is acked only when every event in it is finished; a message holding an
// unfinished event is reported as a batch item failure.
//
// A unit's identity is the hash of its messages in unit order, and unit order is fixed by the
// messages themselves (arrival instant, then the hash of their bytes), never by their order in
// the invocation: the same messages always make the same unit, the same claim plan and the same
// archive bytes. A redelivery may group them differently; an event a unit claimed before is then
// another unit's member, finished from its own entry (its payload was archived before its
// claim), and the events no unit claimed yet are claimed by the new one.

// queued is one decoded message of an invocation.
type queued struct {
	id  string // the SQS message id
	msg event.Message
	raw []byte // the bytes the message's identity derives from
	// redelivered: SQS received the message before (ApproximateReceiveCount above 1).
	redelivered bool
}

// redelivered reads SQS's receive count: a message received more than once before this
// delivery. A missing or unreadable count is a first delivery.
func redelivered(rec events.SQSMessage) bool {
	n, err := strconv.Atoi(rec.Attributes["ApproximateReceiveCount"])
	return err == nil && n > 1
}

// queuedOrder is unit order: arrival instant, then identity.
func queuedOrder(a, b queued) bool {
	ra, rb := a.msg.Envelopes[0].ReceivedAtMs, b.msg.Envelopes[0].ReceivedAtMs
	if ra != rb {
		return ra < rb
	}
	ha, hb := sha256.Sum256(a.raw), sha256.Sum256(b.raw)
	return bytes.Compare(ha[:], hb[:]) < 0
}

// units groups one account's messages, in unit order, into units of at most maxUnitEvents
// distinct events, a message never split. cycle names each message's billing cycle: a unit bills
// one cycle's meter, so it never spans two.
func units(msgs []queued, cycle func(event.Envelope) string) [][]queued {
	sort.SliceStable(msgs, func(i, j int) bool { return queuedOrder(msgs[i], msgs[j]) })
	var out [][]queued
	var cur []queued
	seen := map[string]bool{}
	curCycle := ""
	for _, q := range msgs {
		fresh := 0
		for _, env := range q.msg.Envelopes {
			if !seen[env.EventID] {
				fresh++
			}
		}
		c := cycle(q.msg.Envelopes[0])
		if len(cur) > 0 && (len(seen)+fresh > maxUnitEvents || c != curCycle) {
			out, cur, seen = append(out, cur), nil, map[string]bool{}
		}
		curCycle = c
		cur = append(cur, q)
		for _, env := range q.msg.Envelopes {
			seen[env.EventID] = true
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// maxUnitEvents bounds a unit: one transaction holds its entries, the meter row and its mark.
const maxUnitEvents = event.MaxPackedEvents

// handleCoalesced is HandleSQS in batch mode. Accounts run concurrently (at most
// maxBatchConcurrency at once); one account's units run one after another, so they do not
// contend for its budget row.
func (w *Worker) handleCoalesced(ctx context.Context, batch events.SQSEvent) events.SQSEventResponse {
	type failed struct {
		q   queued
		err error
	}
	var (
		failures  []events.SQSBatchItemFailure
		byAccount = map[string][]queued{}
		order     []string
	)
	fail := func(f failed) {
		w.Metrics.Count(metrics.WorkerFailures, 1)
		w.Log.Warn("message failed; it will be redelivered", "messageId", f.q.id, "err", f.err)
		failures = append(failures, events.SQSBatchItemFailure{ItemIdentifier: f.q.id})
	}
	for _, rec := range batch.Records {
		m, err := event.DecodeMessage(rec.Body)
		if err != nil {
			w.Log.Error("undecodable message", "err", err)
			fail(failed{queued{id: rec.MessageId}, err})
			continue
		}
		raw := m.Raw
		if !m.Packed {
			raw = []byte(rec.Body)
		}
		acct := m.Envelopes[0].AccountID
		if _, ok := byAccount[acct]; !ok {
			order = append(order, acct)
		}
		byAccount[acct] = append(byAccount[acct], queued{id: rec.MessageId, msg: m, raw: raw, redelivered: redelivered(rec)})
	}
	fanout.Each(order, maxBatchConcurrency, func(accountID string) ([]failed, error) {
		msgs := byAccount[accountID]
		var out []failed
		acct, err := w.account(ctx, accountID, w.Now())
		if err != nil {
			for _, q := range msgs {
				out = append(out, failed{q, err})
			}
			return out, nil
		}
		cycle := func(env event.Envelope) string { return acct.CycleAt(time.UnixMilli(env.ReceivedAtMs)).Label() }
		for _, u := range units(msgs, cycle) {
			_, pending, err := w.processUnit(ctx, u, acct)
			for _, q := range u {
				if err != nil {
					out = append(out, failed{q, err})
					continue
				}
				for _, env := range q.msg.Envelopes {
					if e := pending[env.EventID]; e != nil {
						out = append(out, failed{q, fmt.Errorf("event %s not finished: %w", env.EventID, e)})
						break
					}
				}
			}
		}
		return out, nil
	}, func(_ string, out []failed, _ error) {
		for _, f := range out {
			fail(f)
		}
	})
	return events.SQSEventResponse{BatchItemFailures: failures}
}
