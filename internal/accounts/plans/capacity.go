package plans

// Capacity is the one capacity rule Ferry applies wherever a limit is checked — the worker's
// billing, ingest's advisory gate, a hold's admission and GET /v1/usage: an amount fits under a
// limit when committed + amount ≤ limit, where committed is what the budget row has used and
// held. Nothing else in Ferry compares a budget with a limit.
type Capacity struct {
	// Fits: committed + amount ≤ limit. Always true when the limit is unlimited.
	Fits bool
	// Remaining is what the limit has left before the amount: limit − committed, never
	// negative. Nil when unlimited.
	Remaining *int64
}

// Check applies the capacity rule to amount on top of committed.
func (l Limit) Check(committed, amount int64) Capacity {
	if l.Unlimited {
		return Capacity{Fits: true}
	}
	remaining := max(0, l.Max-committed)
	return Capacity{Fits: committed+amount <= l.Max, Remaining: &remaining}
}

// CommittedAtMost is the capacity rule as a DynamoDB condition states it: conditions cannot add,
// so "committed + amount ≤ limit" is written "committed ≤ limit − amount", with the right-hand
// side computed here. It may be negative (an amount over the whole limit), which no committed
// value satisfies. It must not be called for an unlimited limit, which has no condition.
func (l Limit) CommittedAtMost(amount int64) int64 { return l.Max - amount }
