package inbox

import (
	"context"
	"hash/fnv"
)

// MeterMark says that a provider reported a change of its meter for (account, feature, cycle):
// the reconciler should compare the provider's meter with Ferry's ledger for that cycle. The
// apply transaction of a customer.meter_usage_updated event writes it, so a mark exists exactly
// when such an event was APPLIED and the mark was not cleared since.
//
// Stored shape (inbox table): pk "mm#<shard>" (shard = two digits, fnv32a(account) mod 16),
// sk "<account>#<cycle>#<feature>" (feature "*" when the event names no feature Ferry knows),
// attributes accountId, feature ("" for every feature), cycle ("2026-11"), markedAtMs, eventId
// (the billing event id of the last mark) and rev (counts the marks). Marking again only moves
// markedAtMs, eventId and rev.
type MeterMark struct {
	AccountID string
	// Feature is the catalog feature whose meter changed; "" means the provider did not say
	// (reconcile every reported feature of the cycle).
	Feature string
	Cycle   string
	// MarkedAtMs is when the last mark was written; EventID is the billing event that wrote it.
	MarkedAtMs int64
	EventID    string
	// Rev counts the marks; Clear removes a mark only at the revision it was read at.
	Rev int64
}

// MeterMarkShards spreads the marks over partitions so that no partition takes every
// account's marks.
const MeterMarkShards = 16

// meterMarkShard is the shard of an account's marks.
func meterMarkShard(accountID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(accountID))
	return int(h.Sum32() % MeterMarkShards)
}

// MeterMarks is the reconciler's reader of the marks.
type MeterMarks interface {
	// List returns up to limit marks after cursor ("" starts at the beginning) and the cursor
	// of the next page ("" at the end). Marks are listed shard by shard, in key order.
	List(ctx context.Context, cursor string, limit int) ([]MeterMark, string, error)
	// Clear removes a mark the reconciler has acted on, only if it was not marked again since it
	// was listed (its Rev is unchanged). It reports whether it removed it; false means a newer
	// mark is waiting, which the next List returns.
	Clear(ctx context.Context, m MeterMark) (bool, error)
}
