package ledger

// Stage is one durable stage a member of a unit may still need after its claim: archive, insert
// or mark. The claim itself bills (it puts the entry checkpointed in the transaction that moves
// the meter), so no stage ever bills.
type Stage string

// Stages, in pipeline order. Archive always precedes insert: an archived payload without an
// analytics row is recoverable and invisible; the reverse would be a row whose payload exists
// nowhere.
const (
	StageArchive Stage = "archive"
	StageInsert  Stage = "insert"
	StageMark    Stage = "mark"
)

// State is everything durable the worker knows about an event when it picks a scenario.
type State struct {
	// ClaimWon: this delivery's claim put the entry.
	ClaimWon bool
	Status   Status
	// Billed: the checkpoint billingAcceptedAtMs is present.
	Billed bool
	// RowPresent: the analytics row exists (probed only while INSERTING, where the entry says).
	RowPresent bool
}

// Scenario is one row of the decision table.
type Scenario struct {
	Name   string
	Match  func(State) bool
	Stages []Stage
	// Retry fails the message so the queue redelivers it later.
	Retry bool
}

// Scenarios is the ordered decision table: the first match wins. Every re-entry point derives
// from durable state only — the claim's outcome, the entry's status, the checkpoint's presence
// and one existence probe of the analytics row — never from how far an earlier attempt probably
// got. No row bills: an entry is billed by the claim that puts it, or never.
var Scenarios = []Scenario{
	{
		// The claim puts the entry already checkpointed: claim and bill are one write.
		Name:   "claim won, billed: store then mark",
		Match:  func(s State) bool { return s.ClaimWon && s.Billed },
		Stages: []Stage{StageArchive, StageInsert, StageMark},
	},
	{
		// The claim puts the events past the cap (or of an account that may not spend)
		// REJECTED, with the reason, in the same write.
		Name:  "claim won, rejected: ack",
		Match: func(s State) bool { return s.ClaimWon && s.Status == Rejected },
	},
	{
		Name:  "INSERTED: ack",
		Match: func(s State) bool { return !s.ClaimWon && s.Status == Inserted },
	},
	{
		Name:  "REJECTED: ack",
		Match: func(s State) bool { return !s.ClaimWon && s.Status == Rejected },
	},
	{
		Name:  "UNINSERTABLE: ack",
		Match: func(s State) bool { return !s.ClaimWon && s.Status == Uninsertable },
	},
	{
		Name:   "INSERTING, analytics row present: mark only",
		Match:  func(s State) bool { return !s.ClaimWon && s.Status == Inserting && s.Billed && s.RowPresent },
		Stages: []Stage{StageMark},
	},
	{
		Name:   "INSERTING, billed, no row: store then mark, never bill",
		Match:  func(s State) bool { return !s.ClaimWon && s.Status == Inserting && s.Billed && !s.RowPresent },
		Stages: []Stage{StageArchive, StageInsert, StageMark},
	},
}

// unknownState is what Match returns for a state no row covers — an entry with a status Ferry
// does not write, or an INSERTING entry without its checkpoint that no claim took over: fail the
// message, so it retries and, if it never matches, reaches the DLQ.
var unknownState = Scenario{Name: "unrecognised ledger state: fail this message (retry)", Retry: true}

// Match returns the first scenario whose predicate holds.
func Match(s State) Scenario {
	for _, sc := range Scenarios {
		if sc.Match(s) {
			return sc
		}
	}
	return unknownState
}
