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
	failedIDs := map[string]bool{}
	fail := func(f failed) {
		if failedIDs[f.q.id] {
			return // a message split in parts fails once
		}
		failedIDs[f.q.id] = true
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
		q := queued{id: rec.MessageId, msg: m, raw: raw, redelivered: redelivered(rec)}
		for i, ev := range m.Events {
			rs, _ := w.readings(ev, m.Envelopes[i])
			q.reads = append(q.reads, rs)
		}
		byAccount[acct] = append(byAccount[acct], q)
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
