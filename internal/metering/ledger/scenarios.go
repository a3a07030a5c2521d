package ledger

// Stage is one durable stage of the worker's pipeline: bill, archive, insert or mark.
type Stage string

// Stages, in pipeline order. Archive always precedes insert: an archived payload without an
// analytics row is recoverable and invisible; the reverse would be a row whose payload exists
// nowhere.
const (
	StageBill    Stage = "bill"
	StageArchive Stage = "archive"
	StageInsert  Stage = "insert"
	StageMark    Stage = "mark"
)

// State is everything durable the worker knows about an event when it picks a scenario.
type State struct {
	// ClaimWon: this delivery's conditional insert created the entry.
	ClaimWon bool
	// Readable: the entry could be read (only meaningful when the claim was lost).
	Readable bool
	Status   Status
	// Billed: the checkpoint billingAcceptedAtMs is present.
	Billed bool
	// RowPresent: the analytics row exists (probed only while INSERTING).
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
// got. Rows six and seven differ only in the checkpoint: "bill now" versus "never bill again".
var Scenarios = []Scenario{
	{
		// A batch claim puts the entry already checkpointed: claim and bill are one write.
		Name:   "batch claim won, billed: store then mark",
		Match:  func(s State) bool { return s.ClaimWon && s.Billed },
		Stages: []Stage{StageArchive, StageInsert, StageMark},
	},
	{
		// A batch claim puts the events past the cap (or of an account that may not spend)
		// REJECTED, with the reason, in the same write.
		Name:  "batch claim won, rejected: ack",
		Match: func(s State) bool { return s.ClaimWon && s.Status == Rejected },
	},
	{
		Name:   "claim won: bill, store, mark",
		Match:  func(s State) bool { return s.ClaimWon && s.Status == Inserting && !s.Billed },
		Stages: []Stage{StageBill, StageArchive, StageInsert, StageMark},
	},
	{
		Name:  "INSERTED: ack",
		Match: func(s State) bool { return read(s) && s.Status == Inserted },
	},
	{
		Name:  "REJECTED: ack",
		Match: func(s State) bool { return read(s) && s.Status == Rejected },
	},
	{
		Name:  "UNINSERTABLE: ack",
		Match: func(s State) bool { return read(s) && s.Status == Uninsertable },
	},
	{
		Name:   "INSERTING, analytics row present: mark only",
		Match:  func(s State) bool { return read(s) && s.Status == Inserting && s.RowPresent && s.Billed },
		Stages: []Stage{StageMark},
	},
	{
		Name:   "INSERTING, billed, no row: store then mark, never bill",
		Match:  func(s State) bool { return read(s) && s.Status == Inserting && s.Billed && !s.RowPresent },
		Stages: []Stage{StageArchive, StageInsert, StageMark},
	},
	{
		Name:   "INSERTING, not billed, no row: bill, store, mark",
		Match:  func(s State) bool { return read(s) && s.Status == Inserting && !s.Billed && !s.RowPresent },
		Stages: []Stage{StageBill, StageArchive, StageInsert, StageMark},
	},
	{
		// Ferry's own steps never write a row before the checkpoint; a row written by hand (or
		// by a sink that reordered) must still not let the event skip billing.
		Name:   "INSERTING, row present, not billed: bill then mark",
		Match:  func(s State) bool { return read(s) && s.Status == Inserting && !s.Billed && s.RowPresent },
		Stages: []Stage{StageBill, StageMark},
	},
	{
		Name:  "ledger unreadable: fail this message (retry)",
		Match: func(s State) bool { return !s.ClaimWon && !s.Readable },
		Retry: true,
	},
}

// read reports a lost claim whose entry was read: the state every row after the first starts from.
func read(s State) bool { return !s.ClaimWon && s.Readable }

// unknownState is what Match returns for a state no row covers (an entry with a status Ferry
// does not write): fail the message, so it retries and, if it never matches, reaches the DLQ.
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
