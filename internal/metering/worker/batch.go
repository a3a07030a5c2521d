package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// A unit: the events of one account from one invocation's messages (coalesce.go), billed
// together. Each step is done once for the whole unit:
//
//  1. Archive: one object holding every member's payload in unit order, under a key derived
//     from the unit and those bytes, so every delivery and every lap writes the same bytes (the
//     conditional put makes a retry free). A first delivery of a unit of several events writes
//     it before the read below, so the read and the claim are adjacent; a redelivery, or a unit
//     of one event, writes it only if its read finds a member to claim. Either way it exists
//     before any entry points into it.
//  2. Claim and bill: one TransactWriteItems claims every unclaimed event, checkpointed and
//     located in the unit's archive object, or REJECTED (past a cap, or with a value its meter
//     refuses) with its reason, moves every meter the admitted members match once, with the
//     markers of distinct values counted first and the rollup writes, and puts the admitted
//     members' analytics rows (ledger.PlanUnit, ledger.Table.WriteBatchClaim). A cancelled
//     transaction is resolved from durable state (ReadBatch), and the next lap claims what is
//     still unclaimed, admitting members in unit order while they fit.
//  3. Each member's scenario is picked from the ordered table in package ledger, from durable
//     state: its entry as the claim wrote it or as read, the unit's record and, for an INSERTING
//     entry, one bulk probe of the analytics rows.
//  4. Insert: the rows the claim could not carry, in bulk; a refused bulk write is retried row
//     by row, so a poison row is quarantined alone.
//  5. Mark: one item records the unit finished (MarkBatchDone).
//
// A member another unit claimed (sent before, alone or in another message) is finished from its
// own entry (finish.go); a member whose entry an earlier release claimed alone and never billed
// is taken over by the claim (ledger.ClaimedAlone).

// batchRun is one unit's processing: one account's events, from the messages of one invocation
// that bill the same account and cycle.
type batchRun struct {
	// deferred: the lap's plan left the unit's last members for the next lap (planClaim).
	deferred bool
	envs     []event.Envelope // the unit's distinct events, in unit order
	evs      []event.Event
	batch    string
	account  accounts.Account
	billing  ledger.Billing
	cycle    string
	nowMs    int64
	ids      []string
	log      *slog.Logger
	// archivedKey is the object this delivery wrote before its claim.
	archivedKey string
	// redelivered: every message of the unit was received before (SQS's receive count), so
	// its events are likely claimed already and the archive is written only if the read finds
	// one to claim.
	redelivered bool
	// rows are the members' analytics rows as their claim would write them, built when first
	// needed (rowBuilt), nil where the sink's schema refuses one; allRows is the rows item of
	// every member's row, built before the read on a first delivery (allBuilt).
	rows     []*analytics.Row
	rowBuilt []bool
	allRows  ledger.RowsItem
	allBuilt bool
	// reads are each member's meter readings, refused why a member has none (a bad value:
	// it is claimed REJECTED with the reason).
	reads   [][]meter.Reading
	refused []error
}

// member is one event of the batch as the scenario table sees it.
type member struct {
	env      event.Envelope
	ev       event.Event
	entry    ledger.Entry
	state    ledger.State
	scenario ledger.Scenario
	foreign  bool // claimed by another unit
	done     bool // claimed by another unit and finished
	// failed is why the member cannot be finished by this delivery (nil: it can): its message
	// alone is left to a redelivery.
	failed error
}

// BatchID is a packed message's identity: the hash of its bytes, the same on every delivery.
func BatchID(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:16])
}

// unitID is a unit's identity: a packed message alone keeps its own (BatchID); several messages
// hash their identities in unit order, so the same messages make the same unit.
func unitID(msgs []queued) string {
	if len(msgs) == 1 {
		return BatchID(msgs[0].raw)
	}
	h := sha256.New()
	for _, q := range msgs {
		sum := sha256.Sum256(q.raw)
		h.Write(sum[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// archiveFirstMinEvents is the smallest unit a first delivery archives before its read. A unit
// of one event reads first and archives only if its event is still unclaimed: in sparse traffic
// (one message an invocation) every client's resend is such a unit, and archiving first would
// write an object for an event claimed long before ($5 a million resends). Reading first puts
// the PUT between the read and the claim, where a concurrent unit claiming the same event would
// cancel this one's transaction; for one event that transaction is four items (8 write units,
// about what the PUT costs), and such a race is far rarer than a resend.
const archiveFirstMinEvents = 2

// errBatchCancelled is a cancelled batch claim, resolved on the next lap from what was read.
var errBatchCancelled = errors.New("batch claim cancelled")

// errMembersDeferred is a claim that left the unit's last members for the next lap: the
// notifications it decided took their room in the transaction.
var errMembersDeferred = errors.New("batch claim deferred members to the next lap")

// unitResult is a unit's outcome: each event's result, and the unit's id.
type unitResult struct {
	Result
	batch string
}

// processUnit runs one unit: msgs are one account's messages, in unit order, holding at most
// event.MaxPackedEvents distinct events of acct. A non-nil error leaves every event of the unit
// to a redelivery; otherwise pending lists the events not finished (each message holding one is
// failed, the others acked).
func (w *Worker) processUnit(ctx context.Context, msgs []queued, acct accounts.Account) (res unitResult, pending map[string]error, err error) {
	now := w.Now()
	first := msgs[0].msg.Envelopes[0]
	r := &batchRun{batch: unitID(msgs), nowMs: now.UnixMilli(), redelivered: true}
	res.batch = r.batch
	seen := map[string]bool{}
	for _, q := range msgs {
		r.redelivered = r.redelivered && q.redelivered
		for i, env := range q.msg.Envelopes {
			if seen[env.EventID] {
				continue // the same event twice in one unit: its first copy is the member
			}
			seen[env.EventID] = true
			r.envs, r.evs, r.ids = append(r.envs, env), append(r.evs, q.msg.Events[i]), append(r.ids, env.EventID)
			rs, refused := w.readings(q.msg.Events[i], env)
			r.reads, r.refused = append(r.reads, rs), append(r.refused, refused)
		}
	}
	r.log = w.Log.With("account", first.AccountID, "batch", r.batch, "events", len(r.ids), "messages", len(msgs))
	r.account, r.billing = acct, ledger.BillingFor(acct, w.Catalog)
	r.cycle = acct.CycleAt(time.UnixMilli(first.ReceivedAtMs)).Label()
	for _, env := range r.envs {
		if c := acct.CycleAt(time.UnixMilli(env.ReceivedAtMs)).Label(); c != r.cycle {
			// A unit bills one cycle's meter; the caller splits units at cycle boundaries.
			return res, nil, fmt.Errorf("batch %s: event %s belongs to cycle %s, the unit to %s", r.batch, env.EventID, c, r.cycle)
		}
	}

	won, read, err := w.claimBatch(ctx, r)
	if err != nil {
		return res, nil, err
	}
	if err := w.hook(ctx, Point{Stage: StageClaim}); err != nil {
		return res, nil, err
	}
	members, err := w.batchMembers(ctx, r, won, read)
	if err != nil {
		return res, nil, err
	}
	res.Events = map[string]Result{}
	for _, mb := range members {
		if !mb.foreign {
			res.Events[mb.env.EventID] = Result{Scenario: mb.scenario.Name, Final: mb.entry.Status, Billed: won[mb.env.EventID].Billed()}
			if mb.scenario.Retry {
				// A state no scenario covers is this member's alone: its message is retried,
				// and the unit's other messages go on.
				mb.failed = fmt.Errorf("event %s: %s: %w", mb.env.EventID, mb.scenario.Name, errRetry)
			}
		}
	}
	pending, err = w.storeBatch(ctx, r, members, &res.Result, len(msgs) > 1)
	return res, pending, err
}

// claimBatch claims every event of the batch that has no entry (or whose entry an earlier release
// claimed alone), in bounded laps. It reads the batch's durable state first (one BatchGetItem:
// the entries, the batch's record, per feature the unit may move its budget row and its counter
// row's mark, the markers of its distinct values, the rollup items it replaces; unitRead), so
// that a redelivery, or a batch whose events were all sent before, costs that one read and no
// write, and the claim is planned against the budget as it is. Every lap's transaction is
// conditional on that state (no entry for what it claims, an entry taken over still unbilled,
// room on the budget rows, no marker for a value it counts first, a MAX or LATEST row unchanged),
// so a stale plan is cancelled, never applied; the lap after a cancellation reads the state
// again. It returns the entries this delivery's claim wrote and the state last read.
func (w *Worker) claimBatch(ctx context.Context, r *batchRun) (map[string]ledger.Entry, *ledger.BatchState, error) {
	var (
		read *ledger.BatchState
		won  map[string]ledger.Entry
	)
	// Archive, then read and claim: the unit's object (every member's payload, its key and
	// bytes fixed by the unit alone) exists before any entry points into it, so whichever unit
	// later finishes a member (a redelivery grouped differently) finds its payload. On a first
	// delivery it is written before the read, not between the read and the transaction: the
	// read and the transaction are then microseconds apart, and so is the window in which a
	// concurrent unit holding one of the same events (an original and a client's retry) can
	// claim it between them and cancel this unit's transaction. A unit whose every message was
	// received before is most likely finished: it reads first and writes the object only if
	// the read leaves something to claim, so a redelivery of a finished unit costs one read.
	// Every lap claims into the same object.
	layout := unitLayout(r)
	archive := func(ctx context.Context) error {
		if r.archivedKey != "" {
			return nil
		}
		if err := w.hook(ctx, Point{Before: true, Stage: ledger.StageArchive}); err != nil {
			return err
		}
		if err := w.Archive.Put(ctx, layout.key, layout.body); err != nil {
			return err
		}
		if err := w.hook(ctx, Point{Stage: ledger.StageArchive}); err != nil {
			return err
		}
		r.archivedKey = layout.key
		return nil
	}
	// An account that may not spend admits nothing: its events are claimed REJECTED, with no
	// payload to archive. A first delivery also builds its rows item before the read, for the
	// plan that admits every member (the common case), so that the plan is all that lies between
	// the read and the claim. A unit of one event reads first (archiveFirstMinEvents).
	if !r.redelivered && len(r.envs) >= archiveFirstMinEvents && r.billing.Kind != ledger.BillReject {
		if err := archive(ctx); err != nil {
			return nil, nil, err
		}
		all := make([]int, len(r.envs))
		for i := range all {
			all[i] = i
		}
		var err error
		if r.allRows, err = ledger.PackRows(r.batch, w.unitRows(r, layout, all)); err != nil {
			return nil, nil, err
		}
		r.allBuilt = true
	}
	_, err := retry.Do(ctx, retry.Contended, func(ctx context.Context, _ retry.Lap) (struct{}, error) {
		st, err := w.Ledger.ReadBatch(ctx, w.unitRead(r))
		if err != nil {
			return struct{}{}, err
		}
		read = &st
		c, err := w.planClaim(r, layout, read)
		if err != nil {
			return struct{}{}, err
		}
		if st.Done || len(c.Admit)+len(c.Reject) == 0 {
			return struct{}{}, nil
		}
		if len(c.Admit) > 0 {
			if err := archive(ctx); err != nil {
				return struct{}{}, err
			}
		}
		err = w.Ledger.WriteBatchClaim(ctx, c)
		if err == nil {
			if won == nil {
				won = map[string]ledger.Entry{}
			}
			for _, e := range c.Admit {
				e.Status, e.BillingAcceptedAtMs, e.Tier = ledger.Inserting, r.nowMs, r.billing.Tier
				e.RowInUnit = c.Rows.Holds(e.EventID)
				won[e.EventID] = e
			}
			for _, e := range c.Reject {
				e.Status = ledger.Rejected
				won[e.EventID] = e
			}
			w.Metrics.Count(metrics.EventsBilled, len(c.Admit), metrics.Dimension{Name: "Tier", Value: string(r.billing.Tier)})
			if len(c.Reject) > 0 {
				w.Metrics.Count(metrics.EventsRejected, len(c.Reject))
			}
			r.log.Info("batch claimed", "admitted", len(c.Admit), "rejected", len(c.Reject), "notifications", len(c.Notes))
			if r.deferred {
				// The claim left the unit's last members for the next lap (planClaim).
				return struct{}{}, retry.Again(errMembersDeferred)
			}
			return struct{}{}, nil
		}
		if !errors.Is(err, ledger.ErrCancelled) {
			return struct{}{}, err
		}
		return struct{}{}, retry.Again(errBatchCancelled)
	})
	if errors.Is(err, retry.ErrExhausted) {
		return nil, nil, fmt.Errorf("claim batch %s: still contended after %d tries", r.batch, retry.Contended.Tries)
	}
	return won, read, err
}

// layout is a unit's archive object: every member's payload, in unit order, each as sent and
// followed by a newline, under a key derived from the account, the unit and those bytes, dated
// by the first member's arrival day. It depends on the unit alone (not on what is claimed), so
// every delivery and every lap of the same unit writes the same bytes under the same key.
type layout struct {
	key    string
	body   []byte
	offset map[string]int64
}

func unitLayout(r *batchRun) layout {
	l := layout{offset: map[string]int64{}}
	for _, env := range r.envs {
		l.offset[env.EventID] = int64(len(l.body))
		l.body = append(append(l.body, env.Event...), '\n')
	}
	sum := sha256.Sum256(append([]byte(r.account.ID+"\n"+r.batch+"\n"), l.body...))
	l.key = archive.BatchKey(r.account.ID, hex.EncodeToString(sum[:16]), r.envs[0].ReceivedAtMs)
	return l
}

// planClaim is one lap's claim: every event without an entry, admitted or, past a cap, with a
// bad value, or for an account that may not spend, rejected (ledger.PlanUnit decides which, and
// what each admitted event moves). The events admitted are taken in unit order while each fits
// the budget rows as read: the same unit and the same durable state always admit the same
// events. Claiming every unclaimed event at once (rejected ones too) is what makes the claim one
// commit per unit. Each admitted entry records its payload's byte range in the unit's object
// (unitLayout), written before the read, and the admitted members' rows go in the same
// transaction as the unit's rows item (built before the read when the plan admits every member),
// with the rollup writes of what they move.
func (w *Worker) planClaim(r *batchRun, l layout, read *ledger.BatchState) (ledger.BatchClaim, error) {
	c := ledger.BatchClaim{
		AccountID: r.account.ID, Batch: r.batch, Cycle: r.cycle, ReceivedAtMs: r.envs[0].ReceivedAtMs,
		NowMs: r.nowMs, Billing: r.billing, TakeOver: map[string]bool{},
	}
	var open []ledger.UnitMember
	index := map[string]int{}
	for i, id := range r.ids {
		stored, ok := read.Entries[id]
		switch {
		case !ok:
		case ledger.ClaimedAlone(stored):
			// An earlier release's per-event worker claimed it and died before billing it:
			// planned here like an unclaimed one, put over that entry and at its instants.
			c.TakeOver[id] = true
		default:
			continue
		}
		e := claimEntry(r, l, i)
		if c.TakeOver[id] {
			e.RowInsertedAtMs, e.CreatedAtMs = stored.RowInsertedAtMs, stored.CreatedAtMs
		}
		open = append(open, ledger.UnitMember{Entry: e, Readings: r.reads[i], Refused: r.refused[i]})
		index[id] = i
	}
	in := ledger.UnitInput{
		AccountID: r.account.ID, Unit: r.batch, Cycle: r.cycle, NowMs: r.nowMs, Billing: r.billing,
		Limit: func(f string) plans.Limit { return r.account.Limit(f, w.Catalog) }, Open: open, State: read.Unit,
	}
	if w.Alerts {
		in.Thresholds = func(f string) []plans.Level { return r.account.Levels(f, w.Catalog) }
	}
	// The unit's items were bounded before anything was read (meter.Footprint), the alerts
	// apart: a claim that decides notifications may need more. Its rows item gives way first
	// (HasRoomForRows: the rows are then written after the claim); past that, the unit's last
	// members wait for the next lap, which claims them on the state this claim leaves.
	var plan ledger.UnitPlan
	r.deferred = false
	for {
		plan = ledger.PlanUnit(in)
		c.Rollups = nil
		if w.Rollups != nil && len(plan.Contributions) > 0 {
			var err error
			if c.Rollups, err = w.Rollups.Writes(r.account.ID, plan.Contributions, read.Extra); err != nil {
				return c, fmt.Errorf("batch %s: plan the rollups: %w", r.batch, err)
			}
		}
		if plan.Items()+len(c.Rollups) <= maxUnitItems || len(in.Open) == 1 {
			break
		}
		in.Open, r.deferred = in.Open[:len(in.Open)-1], true
	}
	c.Admit, c.Moves, c.Markers, c.Notes, c.Alerted = plan.Admit, plan.Moves, plan.Markers, plan.Notes, plan.Alerted
	for _, e := range plan.Reject {
		e.ArchiveKey, e.ArchiveOffset, e.ArchiveLength = "", 0, 0 // nothing of it is stored
		c.Reject = append(c.Reject, e)
	}
	var admitted []int
	for _, e := range c.Admit {
		if !c.TakeOver[e.EventID] {
			// A member taken over gets its row of its own after the claim, at the instant its
			// first claim fixed: where that release's worker, were it still running, writes it.
			admitted = append(admitted, index[e.EventID])
		}
	}
	// The admitted members' rows go with the claim, in the unit's rows item.
	if len(admitted) == 0 || !c.HasRoomForRows() {
		return c, nil
	}
	rows := w.unitRows(r, l, admitted)
	ids := make([]string, len(rows))
	for k, row := range rows {
		ids[k] = row.EventID
	}
	if r.allBuilt && r.allRows.BuiltFrom(ids) {
		c.Rows = r.allRows
		return c, nil
	}
	var err error
	c.Rows, err = ledger.PackRows(r.batch, rows)
	return c, err
}

// unitRead is what a unit's claim reads before it plans: its members' entries and record; per
// feature its members can move, the budget row (when a cap or a MAX or LATEST figure needs it)
// and the report mark of the counter row the claim moves; the markers of its distinct values;
// the rollup items its plan needs (rollup.Keys).
func (w *Worker) unitRead(r *batchRun) ledger.BatchRead {
	rd := ledger.BatchRead{AccountID: r.account.ID, Batch: r.batch, Cycle: r.cycle, EventIDs: r.ids}
	moves := r.billing.Kind == ledger.BillCapped || r.billing.Kind == ledger.BillCounted
	if !moves {
		return rd
	}
	features := map[string]bool{}
	distinct := map[string]bool{}
	var cs []meter.Contribution
	for i, rs := range r.reads {
		for _, rdg := range rs {
			if rdg.Aggregation == meter.UniqueCount && !distinct[ledger.DistinctKey(rdg.Feature, rdg.DistinctHash())] {
				distinct[ledger.DistinctKey(rdg.Feature, rdg.DistinctHash())] = true
				rd.Distinct = append(rd.Distinct, ledger.Marker{Feature: rdg.Feature, Hash: rdg.DistinctHash()})
			}
			// Every meter's: the rollups decide which items a plan needs read (those of MAX and
			// LATEST meters, and the hour item of a meter with dimensions, whose groups bound
			// what the claim may add to it).
			cs = append(cs, meter.Contribution{Meter: rdg.Meter, Aggregation: rdg.Aggregation, AtMs: r.envs[i].ReceivedAtMs,
				Group: rdg.Group, Value: rdg.Value, OrderKey: rdg.OrderKey})
			if features[rdg.Feature] {
				continue
			}
			features[rdg.Feature] = true
			f := ledger.FeatureRead{Feature: rdg.Feature, Row: ledger.MeterRowSK(r.billing, r.batch)}
			switch {
			case !rdg.Aggregation.Additive():
				f.Row, f.Budget = usage.BudgetSK, true
			case r.billing.Kind == ledger.BillCapped:
				f.Budget = !r.account.Limit(rdg.Feature, w.Catalog).Unlimited
			}
			rd.Features = append(rd.Features, f)
		}
	}
	sort.Slice(rd.Features, func(i, j int) bool { return rd.Features[i].Feature < rd.Features[j].Feature })
	if w.Rollups != nil && len(cs) > 0 {
		rd.Extra = w.Rollups.Keys(r.account.ID, cs)
	}
	return rd
}

// readings are what an event gives its meters, or why it gives none (a bad value).
func (w *Worker) readings(ev event.Event, env event.Envelope) ([]meter.Reading, error) {
	return w.Catalog.Meters.Read(ev.ForMeters(env.ReceivedAtMs))
}

// claimEntry is member i's entry as the unit's claim admits it: stamped with the claim's instant
// and the unit, its payload at its byte range of the unit's archive object.
func claimEntry(r *batchRun, l layout, i int) ledger.Entry {
	env := r.envs[i]
	return ledger.Entry{AccountID: r.account.ID, EventID: env.EventID, ReceivedAtMs: env.ReceivedAtMs, Cycle: r.cycle,
		RowInsertedAtMs: r.nowMs, CreatedAtMs: r.nowMs, UpdatedAtMs: r.nowMs, Batch: r.batch,
		ArchiveKey: l.key, ArchiveOffset: l.offset[env.EventID], ArchiveLength: int64(len(env.Event))}
}

// unitRows are the rows of the members at idx (in unit order) as the unit's claim writes them,
// leaving out a row the sink's schema refuses (that member's row is written, and quarantined, on
// its own after the claim). Each member's row depends only on the unit (its claim instant, cycle
// and archive layout) and its event, so it is built once.
func (w *Worker) unitRows(r *batchRun, l layout, idx []int) []analytics.Row {
	if r.rows == nil {
		r.rows, r.rowBuilt = make([]*analytics.Row, len(r.envs)), make([]bool, len(r.envs))
	}
	var rows []analytics.Row
	for _, i := range idx {
		if !r.rowBuilt[i] {
			if row, err := w.rowFor(r.evs[i], claimEntry(r, l, i)); err == nil {
				r.rows[i] = &row
			}
			r.rowBuilt[i] = true
		}
		if r.rows[i] != nil {
			rows = append(rows, *r.rows[i])
		}
	}
	return rows
}

// batchMembers builds each event's durable state and picks its scenario.
func (w *Worker) batchMembers(ctx context.Context, r *batchRun, won map[string]ledger.Entry, read *ledger.BatchState) ([]*member, error) {
	members := make([]*member, len(r.ids))
	var probe []analytics.RowRef
	foreignBatches := map[string]bool{}
	for i, env := range r.envs {
		mb := &member{env: env, ev: r.evs[i]}
		members[i] = mb
		if e, ok := won[env.EventID]; ok {
			mb.entry = e
			mb.state = ledger.State{ClaimWon: true, Status: e.Status, Billed: e.Billed()}
			continue
		}
		e, ok := read.Entries[env.EventID]
		if !ok {
			return nil, fmt.Errorf("batch %s: event %s has no entry after the claim", r.batch, env.EventID)
		}
		if e.Batch != r.batch {
			mb.foreign, mb.entry = true, e
			if e.Status == ledger.Inserting && e.Batch != "" {
				foreignBatches[e.Batch] = true
			}
			continue
		}
		mb.entry = ledger.Resolve(e, read.Done, read.DoneAtMs)
		mb.state = ledger.State{Status: mb.entry.Status, Billed: mb.entry.Billed()}
		if mb.entry.Status == ledger.Inserting {
			probe = append(probe, e.RowRef())
		}
	}
	if len(probe) > 0 {
		present, err := w.Analytics.ExistsBatch(ctx, r.account.ID, probe)
		if err != nil {
			return nil, err
		}
		for _, mb := range members {
			if !mb.foreign && mb.state.Status == ledger.Inserting && !mb.state.ClaimWon {
				mb.state.RowPresent = present[mb.env.EventID]
			}
		}
	}
	// An event another batch claimed is finished when its own status says so or its batch is
	// recorded done: then it is acked here, with no further read or write.
	done := map[string]ledger.Entry{}
	for b := range foreignBatches {
		ok, at, err := w.Ledger.BatchDone(ctx, r.account.ID, b)
		if err != nil {
			return nil, err
		}
		if ok {
			done[b] = ledger.Entry{InsertedAtMs: at}
		}
	}
	for _, mb := range members {
		if mb.foreign {
			if d, ok := done[mb.entry.Batch]; ok {
				mb.entry = ledger.Resolve(mb.entry, true, d.InsertedAtMs)
			}
			mb.done = mb.entry.Status.Terminal()
			continue
		}
		mb.scenario = ledger.Match(mb.state)
	}
	return members, nil
}

func has(stages []ledger.Stage, s ledger.Stage) bool {
	for _, x := range stages {
		if x == s {
			return true
		}
	}
	return false
}

// storeBatch runs the unit's stages: archive, insert, the events other units claimed, mark. It
// returns the events left unfinished. When partial is set (a unit of several messages, which are
// acked one by one), the finished members are marked one by one if any other is left, since the
// batch's record would also cover the unfinished ones; a unit of one message is retried whole.
func (w *Worker) storeBatch(ctx context.Context, r *batchRun, members []*member, res *Result, partial bool) (map[string]error, error) {
	var markNeeded bool
	archiveNeeded := false
	var insert []*member
	for _, mb := range members {
		if mb.foreign || mb.failed != nil {
			continue
		}
		st := mb.scenario.Stages
		// This delivery archived what it claimed before claiming it; an entry an earlier
		// delivery claimed has its object rewritten, byte for byte.
		if has(st, ledger.StageArchive) && (r.archivedKey == "" || mb.entry.ArchiveKey != r.archivedKey) {
			archiveNeeded = true
		}
		markNeeded = markNeeded || has(st, ledger.StageMark)
		if len(st) == 0 {
			w.Metrics.Count(metrics.EventsDuplicate, 1)
		}
	}
	if archiveNeeded {
		if err := w.archiveBatch(ctx, r, members); err != nil {
			return nil, err
		}
	}
	failed := map[string]error{}
	for _, mb := range members {
		if mb.failed != nil {
			failed[mb.env.EventID] = mb.failed
			continue
		}
		// A row the claim wrote in the unit's rows item is there (one transaction).
		if !mb.foreign && has(mb.scenario.Stages, ledger.StageInsert) && !mb.entry.RowInUnit {
			insert = append(insert, mb)
		}
	}
	if len(insert) > 0 {
		if err := w.hook(ctx, Point{Before: true, Stage: ledger.StageInsert}); err != nil {
			return nil, err
		}
		errs, err := w.insertBatch(ctx, r, insert, res)
		if err != nil {
			return nil, err
		}
		for id, e := range errs {
			failed[id] = e
		}
	}
	for _, mb := range members {
		if !mb.foreign {
			continue
		}
		if mb.done {
			res.Events[mb.env.EventID] = Result{Scenario: "claimed elsewhere, finished: ack", Final: mb.entry.Status}
			w.Metrics.Count(metrics.EventsDuplicate, 1)
			continue
		}
		// Claimed by another unit: its own entry says where it re-enters.
		one, err := w.finishAlone(ctx, mb.env, mb.ev, r.account, mb.entry)
		res.Events[mb.env.EventID] = one
		if err != nil {
			failed[mb.env.EventID] = err
		}
	}
	if len(failed) > 0 && !partial {
		return failed, nil
	}
	if !markNeeded {
		if len(failed) == 0 {
			r.log.Info("redelivery of a finished batch; acked")
		}
		return failed, nil
	}
	if err := w.hook(ctx, Point{Before: true, Stage: ledger.StageMark}); err != nil {
		return nil, err
	}
	finished := func(mb *member) bool {
		return !mb.foreign && has(mb.scenario.Stages, ledger.StageMark) && failed[mb.env.EventID] == nil &&
			res.Events[mb.env.EventID].Final != ledger.Uninsertable
	}
	if len(failed) == 0 {
		if err := w.Ledger.MarkBatchDone(ctx, r.account.ID, r.batch, r.nowMs); err != nil {
			return nil, err
		}
	} else {
		// Some members are left for a redelivery, which will group them differently: the
		// batch's record would show them INSERTED, so the finished ones are marked alone.
		for _, mb := range members {
			if finished(mb) {
				if err := w.Ledger.MarkInserted(ctx, r.account.ID, mb.env.EventID, r.nowMs); err != nil {
					failed[mb.env.EventID] = err
				}
			}
		}
	}
	for _, mb := range members {
		if finished(mb) {
			one := res.Events[mb.env.EventID]
			one.Final = ledger.Inserted
			res.Events[mb.env.EventID] = one
			w.Metrics.Count(metrics.EventsInserted, 1)
		}
	}
	if err := w.hook(ctx, Point{Stage: ledger.StageMark}); err != nil {
		return nil, err
	}
	if len(failed) == 0 {
		r.log.Info("batch stored")
	}
	return failed, nil
}

// archiveBatch writes the unit's archive object again (an entry an earlier delivery claimed,
// whose object this delivery did not write): every member's payload in unit order, each followed
// by a newline. Its key and bytes derive from the unit alone, so every retry writes the same
// object. A member whose recorded location this unit does not lay out, and which is not stored,
// cannot be repaired by retrying: it is failed alone (its message reaches the DLQ, whose alarm
// calls an operator), and the unit's other members go on.
func (w *Worker) archiveBatch(ctx context.Context, r *batchRun, members []*member) error {
	if err := w.hook(ctx, Point{Before: true, Stage: ledger.StageArchive}); err != nil {
		return err
	}
	l := unitLayout(r)
	write := false
	stored := map[string]bool{}
	for _, mb := range members {
		e := mb.entry
		if mb.foreign || mb.failed != nil || e.ArchiveKey == "" {
			continue
		}
		if e.ArchiveKey == l.key && e.ArchiveOffset == l.offset[e.EventID] && e.ArchiveLength == int64(len(mb.env.Event)) {
			write = true
			continue
		}
		// Claimed under another layout (an object of the admitted members only, as units were
		// archived before this one): that object was written before the claim, so it is there
		// unless the entry is not this unit's to repair.
		ok, seen := stored[e.ArchiveKey]
		if !seen {
			var err error
			if ok, err = w.Archive.Exists(ctx, e.ArchiveKey); err != nil {
				return err
			}
			stored[e.ArchiveKey] = ok
		}
		if !ok {
			mb.failed = fmt.Errorf("batch %s: event %s is recorded at %s [%d, +%d), which is not stored and this unit does not lay out",
				r.batch, e.EventID, e.ArchiveKey, e.ArchiveOffset, e.ArchiveLength)
			w.Log.Error("an entry names an archive object that is not stored", "account", r.account.ID, "eventId", e.EventID, "err", mb.failed)
		}
	}
	if write {
		if err := w.Archive.Put(ctx, l.key, l.body); err != nil {
			return err
		}
	}
	return w.hook(ctx, Point{Stage: ledger.StageArchive})
}

// insertBatch writes the rows of the events that need one, in bulk writes of RowChunk rows. A
// chunk the sink refuses is written row by row through the one-row insert (finish.go), which quarantines
// the refused row alone (and, after the bound, ends its event UNINSERTABLE). It returns the
// events left quarantined for another try.
func (w *Worker) insertBatch(ctx context.Context, r *batchRun, insert []*member, res *Result) (map[string]error, error) {
	chunk := w.RowChunk
	if chunk <= 0 || chunk > 25 {
		chunk = 25
	}
	failed := map[string]error{}
	for start := 0; start < len(insert); start += chunk {
		part := insert[start:min(start+chunk, len(insert))]
		rows := make([]analytics.Row, 0, len(part))
		var rowErr error
		for _, mb := range part {
			row, err := w.rowFor(mb.ev, mb.entry)
			if err != nil {
				rowErr = err
				break
			}
			rows = append(rows, row)
		}
		err := rowErr
		if err == nil {
			err = w.Analytics.WriteBatch(ctx, rows)
		}
		if err != nil && !errors.Is(err, analytics.ErrRowRejected) {
			return nil, err
		}
		if err != nil {
			r.log.Warn("a bulk analytics write was refused; writing its rows one by one", "err", err)
			for _, mb := range part {
				j := &job{env: mb.env, ev: mb.ev, account: r.account, entry: mb.entry, nowMs: r.nowMs,
					log: r.log.With("eventId", mb.env.EventID)}
				if _, err := w.insert(ctx, j); err != nil {
					failed[mb.env.EventID] = err
				}
				if j.result.Final == ledger.Uninsertable {
					one := res.Events[mb.env.EventID]
					one.Final = ledger.Uninsertable
					res.Events[mb.env.EventID] = one
				}
			}
		}
		if err := w.hook(ctx, Point{Stage: ledger.StageInsert}); err != nil {
			return nil, err
		}
	}
	return failed, nil
}

func joinErrors(m map[string]error) error {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	errs := make([]error, len(ids))
	for i, id := range ids {
		errs[i] = m[id]
	}
	return errors.Join(errs...)
}
