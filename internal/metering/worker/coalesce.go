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
	"github.com/ferrymeter/ferry/internal/metering/meter"
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
	// reads are each envelope's meter readings (nil for an event with a bad value, which moves
	// nothing), for bounding its unit's items.
	reads [][]meter.Reading
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
// distinct events whose claim fits one transaction (unitItems), a message never split — except a
// message that alone does not fit (packed under a catalog whose meters needed fewer items), which
// is split in its own order (splitOversize). cycle names each message's billing cycle: a unit
// bills one cycle's meters, so it never spans two.
func units(msgs []queued, cycle func(event.Envelope) string) [][]queued {
	sort.SliceStable(msgs, func(i, j int) bool { return queuedOrder(msgs[i], msgs[j]) })
	var out [][]queued
	var cur []queued
	var fp meter.Footprint
	seen := map[string]bool{}
	curCycle := ""
	for _, whole := range msgs {
		for _, q := range splitOversize(whole) {
			next, fresh := fp.Clone(), 0
			for i, env := range q.msg.Envelopes {
				if !seen[env.EventID] {
					fresh++
					next.Add(q.readings(i), env.ReceivedAtMs)
				}
			}
			c := cycle(q.msg.Envelopes[0])
			if len(cur) > 0 && (len(seen)+fresh > maxUnitEvents || unitItems(len(seen)+fresh, next) > maxUnitItems || c != curCycle) {
				out, cur, seen = append(out, cur), nil, map[string]bool{}
				next = meter.Footprint{}
				for i, env := range q.msg.Envelopes {
					next.Add(q.readings(i), env.ReceivedAtMs)
				}
			}
			fp, curCycle = next, c
			cur = append(cur, q)
			for _, env := range q.msg.Envelopes {
				seen[env.EventID] = true
			}
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// readings are envelope i's meter readings, if known.
func (q queued) readings(i int) []meter.Reading {
	if i < len(q.reads) {
		return q.reads[i]
	}
	return nil
}

// unitItems bounds the items of the claim of a unit of n events whose meters' footprint is fp:
// the n entries, the unit's analytics rows item, and what the meters add.
func unitItems(n int, fp meter.Footprint) int { return n + 1 + fp.Items() }

// maxUnitEvents bounds a unit's events: a packed message's bound, so that a unit of one pack is
// the pack.
const maxUnitEvents = event.MaxPackedEvents

// maxUnitItems is DynamoDB's bound on one TransactWriteItems, which holds a unit's claim.
const maxUnitItems = 100

// splitOversize returns a message as the units take it: whole when its claim alone fits one
// transaction, else in parts, each as many of its events, in its own order, as fit. A part's
// identity is the message's and its index, so the same message always makes the same parts.
// Ingest packs a batch request's events by the same bound, so only a message packed before a
// catalog change (meters that now need more items) is ever split; its SQS message is acked when
// every part is finished.
func splitOversize(q queued) []queued {
	var fp meter.Footprint
	for i, env := range q.msg.Envelopes {
		fp.Add(q.readings(i), env.ReceivedAtMs)
	}
	if unitItems(len(q.msg.Envelopes), fp) <= maxUnitItems {
		return []queued{q}
	}
	var parts []queued
	start := 0
	fp = meter.Footprint{}
	for i, env := range q.msg.Envelopes {
		next := fp.Clone()
		next.Add(q.readings(i), env.ReceivedAtMs)
		if i > start && unitItems(i-start+1, next) > maxUnitItems {
			parts = append(parts, q.part(len(parts), start, i))
			start, next = i, meter.Footprint{}
			next.Add(q.readings(i), env.ReceivedAtMs)
		}
		fp = next
	}
	return append(parts, q.part(len(parts), start, len(q.msg.Envelopes)))
}

// part is events [from, to) of the message, as the n-th part of it.
func (q queued) part(n, from, to int) queued {
	p := q
	p.msg.Envelopes, p.msg.Events = q.msg.Envelopes[from:to], q.msg.Events[from:to]
	if q.reads != nil {
		p.reads = q.reads[from:to]
	}
	p.raw = append(append(append([]byte(nil), q.raw...), "\x00part "...), strconv.Itoa(n)...)
	return p
}

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
		if o, ok := out[id]; ok && o.err != nil {
			return // a message split in parts fails once
		}
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
		q := queued{id: rec.MessageId, msg: m, raw: raw, redelivered: redelivered(rec)}
		for i, ev := range m.Events {
			rs, _ := w.readings(ev, m.Envelopes[i])
			q.reads = append(q.reads, rs)
		}
		byAccount[acct] = append(byAccount[acct], q)
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
			if prev, ok := out[q.id]; ok {
				o = joined(prev, o)
			}
			out[q.id] = o
		}
	}
	return out
}

// joined is one message's outcome from two of its parts (a message split in parts,
// splitOversize): the events of both, the first part's first event as the message's own, and
// the first error — the message is acked only when every part is finished.
func joined(first, next outcome) outcome {
	if first.err == nil {
		first.err = next.err
	}
	if first.Events == nil {
		first.Events = map[string]Result{}
	}
	for id, r := range next.Events {
		first.Events[id] = r
	}
	return first
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
