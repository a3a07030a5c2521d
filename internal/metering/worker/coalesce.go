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

// Coalescing: the messages of one invocation are grouped by account — single-event messages and
// packed ones alike — into units of at most event.MaxPackedEvents distinct events, each claimed,
// checkpointed and metered by one transaction and archived in one object (batch.go). A message is
// acked only when every event in it is finished; a message holding an unfinished event is
// reported as a batch item failure. A message alone in its invocation is a unit of its own.
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

// outcome is one message's: its events' results, and why it is left to a redelivery (nil: ack).
type outcome struct {
	Result
	err error
}

// handle runs one invocation and returns each message's outcome by message id. Accounts run
// concurrently (at most maxAccountConcurrency at once); one account's units run one after
// another, so they do not contend for its budget row.
func (w *Worker) handle(ctx context.Context, records []events.SQSMessage) map[string]outcome {
	var (
		out       = make(map[string]outcome, len(records))
		byAccount = map[string][]queued{}
		order     []string
	)
	fail := func(id string, res Result, err error) {
		w.Metrics.Count(metrics.WorkerFailures, 1)
		w.Log.Warn("message failed; it will be redelivered", "messageId", id, "err", err)
		out[id] = outcome{res, err}
	}
	for _, rec := range records {
		m, err := event.DecodeMessage(rec.Body)
		if err != nil {
			// Ingest never queues such a message; retrying cannot fix it, and after
			// maxReceiveCount it lands in the DLQ, whose alarm calls an operator.
			w.Log.Error("undecodable message", "err", err)
			fail(rec.MessageId, Result{}, err)
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
	fanout.Each(order, maxAccountConcurrency, func(accountID string) (map[string]outcome, error) {
		return w.handleAccount(ctx, accountID, byAccount[accountID]), nil
	}, func(_ string, got map[string]outcome, _ error) {
		for id, o := range got {
			if o.err != nil {
				fail(id, o.Result, o.err)
				continue
			}
			out[id] = o
		}
	})
	return out
}

// handleAccount runs one account's messages, unit after unit, and returns each message's
// outcome.
func (w *Worker) handleAccount(ctx context.Context, accountID string, msgs []queued) map[string]outcome {
	out := make(map[string]outcome, len(msgs))
	acct, err := w.account(ctx, accountID, w.Now())
	if err != nil {
		for _, q := range msgs {
			out[q.id] = outcome{err: err}
		}
		return out
	}
	cycle := func(env event.Envelope) string { return acct.CycleAt(time.UnixMilli(env.ReceivedAtMs)).Label() }
	for _, u := range units(msgs, cycle) {
		res, pending, err := w.processUnit(ctx, u, acct)
		for _, q := range u {
			o := outcome{Result: messageResult(res, q), err: err}
			for _, env := range q.msg.Envelopes {
				if e := pending[env.EventID]; e != nil && o.err == nil {
					o.err = fmt.Errorf("event %s not finished: %w", env.EventID, e)
				}
			}
			out[q.id] = o
		}
	}
	return out
}

// messageResult is one message's share of its unit's results: its events', the first one's as
// the message's own.
func messageResult(unit unitResult, q queued) Result {
	res := Result{Events: map[string]Result{}}
	for i, env := range q.msg.Envelopes {
		one, ok := unit.Events[env.EventID]
		if !ok {
			continue
		}
		res.Events[env.EventID] = one
		if i == 0 {
			res.Scenario, res.Final, res.Billed = one.Scenario, one.Final, one.Billed
		}
	}
	return res
}
