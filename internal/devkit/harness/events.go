package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Limits of an events schedule.
const (
	maxEvents = 8
	// maxSendAttempts bounds a client's retries of one event at the front door.
	maxSendAttempts = 6
	// maxQuietDeliveries bounds the deliveries an event may need once faults are over, per
	// delivery of it still running then: a clean system finishes any event in one (two if a
	// redelivery raced it).
	maxQuietDeliveries = 3
	// receiveBatch and receiveHold: the harness takes queued messages off SQS into its own
	// pool, where it decides their deliveries; hold keeps them from coming back by themselves.
	receiveBatch = 10
	receiveHold  = 12 * 60 * 60
)

// Events is the event billing pipeline: clients send events through ingest (the advisory gate
// and SQS), or straight onto the queue; the worker's SQS handler takes them in invocations of one
// message (sparse traffic) or of several, which it groups by account into units (half the
// schedules each), and archives, claims and bills, stores and marks each unit, with deliveries
// duplicated, reordered and run concurrently, writes crashed before and after they commit,
// transactions cancelled by conflicts, throttles, S3 and SQS errors, and the worker killed
// between any two steps. Some events were claimed alone, and never billed, by the per-event
// worker of an earlier release (its crash before its billing): the unit meeting one takes it
// over.
//
// Invariants, per account: every event a client was told is queued ends in the ledger, and
// every entry ends terminal (INSERTED, REJECTED with its reason); the meter equals the
// checkpointed events and never passes the cap — a capped account bills exactly
// min(limit, events), so no event is rejected while there is room; every INSERTED event is
// billed, its payload archived byte for byte, with its analytics row; no REJECTED event is
// billed.
//
// With Packed, the events reach the queue packed several to a message (event.Packed, as the
// batch route queues them), and some events also travel alone or in both messages, so that a
// unit meets events another unit claimed. The invariants are the same; an INSERTED event's
// payload is a byte range of its unit's archive object either way.
type Events struct {
	Packed bool
}

// Name implements Pipeline.
func (p *Events) Name() string {
	if p.Packed {
		return "events-batch"
	}
	return "events"
}

type eventsState struct {
	acct  accounts.Account
	plan  string
	limit int64
	// raised is the limit an operator raises the account to during the schedule (0: none);
	// reactivate: an operator reactivates the inactive account.
	raised     int64
	reactivate bool
	inactive   bool
	viaIngest  bool
	// several: messages that reach the queue through ingest are handed to the worker in
	// invocations of several (units of one account's events), not one by one.
	several bool
	ids     []string
	bodies  map[string][]byte // the events as clients send them
	// queued are the events that reached the queue: a client was told so (202), or the
	// harness put them there.
	queued map[string]bool
	// deliveries counts deliveries per event, and quiet those made once faults were over.
	deliveries map[string]int
	quiet      map[string]int
	// running counts the deliveries of each message running now; chains is how many were
	// running (with the new one) when its first delivery after the faults was made.
	running, chains map[string]int
	// entries are the last ledger entries seen after a write, by event id.
	entries map[string]ledger.Entry
	// meters: events also move the catalog's other meters (see meterEvent), under these
	// limits.
	meters bool
	limits map[string]int64
	// thresholds are the account's own thresholds for its capped features (nil: the plan's).
	thresholds []plans.Threshold
}

// The harness catalog's meters other than events (Catalog), and what their events look like.
const (
	meterTokens = "tokens"
	meterGB     = "gb"
	meterUsers  = "users"
)

// meterEvent is event i of a batch schedule: an api.call (events only), an llm.call moving
// tokens (now and then with a value that must REJECT it: missing, negative, fractional, a
// string), a storage sample moving the gb maximum, or a login moving the distinct users.
func meterEvent(r interface{ IntN(int) int }, id string, i int) []byte {
	head := fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/harness",`, id)
	switch r.IntN(5) {
	case 2:
		tokens := fmt.Sprint(r.IntN(40))
		if r.IntN(8) == 0 {
			tokens = []string{`-1`, `1.5`, `"7"`, `null`}[r.IntN(4)]
		}
		if r.IntN(16) == 0 {
			return []byte(head + fmt.Sprintf(`"type":"llm.call","data":{"i":%d,"model":"m%d"}}`, i, r.IntN(2)))
		}
		return []byte(head + fmt.Sprintf(`"type":"llm.call","data":{"i":%d,"tokens":%s,"model":"m%d"}}`, i, tokens, r.IntN(2)))
	case 3:
		return []byte(head + fmt.Sprintf(`"type":"storage.sampled","data":{"i":%d,"gb":%d}}`, i, r.IntN(70)))
	case 4:
		return []byte(head + fmt.Sprintf(`"type":"app.login","data":{"i":%d,"user":"u%d"}}`, i, r.IntN(5)))
	}
	return []byte(head + fmt.Sprintf(`"type":"api.call","data":{"i":%d}}`, i))
}

// Start implements Pipeline.
func (p *Events) Start(ctx context.Context, s *Schedule) error {
	r := s.Rand
	st := &eventsState{bodies: map[string][]byte{}, queued: map[string]bool{}, deliveries: map[string]int{}, quiet: map[string]int{},
		running: map[string]int{}, chains: map[string]int{},
		entries: map[string]ledger.Entry{}}
	s.State = st
	n := 2 + r.IntN(maxEvents-1)
	st.plan = []string{"free", "free", "free", "plus", "internal"}[r.IntN(5)]
	st.limit = int64(r.IntN(n + 1))
	st.inactive = st.plan == "plus" && r.IntN(4) == 0
	switch {
	case st.inactive && r.IntN(2) == 0:
		st.reactivate = true
	case st.plan == "free" && r.IntN(3) == 0:
		st.raised = st.limit + 1 + int64(r.IntN(n))
	}
	st.viaIngest = !p.Packed && r.IntN(3) == 0
	if st.viaIngest {
		// What reaches the queue is handed to the worker one message an invocation, or in
		// invocations of several.
		st.several = r.IntN(2) == 0
	}
	in := accounts.CreateInput{
		ID: fmt.Sprintf("acct_e%d", s.Seed), Plan: st.plan, Status: accounts.Active,
		Limits: map[string]plans.Limit{plans.FeatureEvents: plans.Max(st.limit)},
	}
	// Half the schedules whose messages the harness queues itself also meter: their events move
	// the catalog's other meters, in units of one message or of several, next to entries an
	// earlier release claimed alone (which a unit takes over and plans like unclaimed ones).
	st.meters = !st.viaIngest && r.IntN(2) == 0
	if st.meters {
		st.limits = map[string]int64{meterTokens: int64(r.IntN(120)), meterGB: int64(r.IntN(70)), meterUsers: int64(r.IntN(5))}
		for f, l := range st.limits {
			if st.plan == "free" {
				in.Limits[f] = plans.Max(l)
			}
		}
	}
	// A third of the schedules keep the plan's thresholds (80% and 100%), a third turn them off
	// and a third set one of 50%: chosen by the seed, so the schedules' draws stay as they were.
	// Without the 100% threshold, only the cap's condition keeps two racing units under the
	// limit (the condition of an alert at the limit would otherwise hold them too).
	st.thresholds = [][]plans.Threshold{nil, {}, {{Percent: 50}}}[s.Seed%3]
	if st.thresholds != nil && st.plan == "free" {
		in.Alerts = map[string][]plans.Threshold{}
		for _, f := range []string{plans.FeatureEvents, meterTokens, meterUsers} {
			in.Alerts[f] = st.thresholds
		}
	}
	if st.inactive {
		in.Status = accounts.Inactive
	}
	acct, _, err := s.Env.API().Accounts.Create(ctx, in)
	if err != nil {
		return fmt.Errorf("create account: %w", err)
	}
	st.acct = acct
	s.Note("events: plan %s, limit %d (raised to %d), inactive %v (reactivated %v), %d events, via ingest %v, meters %v (limits %v), thresholds %v, fault rate %.2f",
		st.plan, st.limit, st.raised, st.inactive, st.reactivate, n, st.viaIngest, st.meters, st.limits, st.thresholds, s.FaultRate)
	if st.raised > 0 || st.reactivate {
		p.operate(s, st)
	}
	p.watchTerminal(s, st)
	for i := range n {
		id := fmt.Sprintf("evt_%02d", i)
		st.ids = append(st.ids, id)
		st.bodies[id] = []byte(fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/harness","type":"api.call","data":{"i":%d}}`, id, i))
		if st.meters {
			st.bodies[id] = meterEvent(r, id, i)
		}
	}
	installHook(s.Env)
	if st.viaIngest {
		for _, id := range st.ids {
			copies := 1 + r.IntN(2) // a client that sends twice (a retry of its own, a second SDK)
			for range copies {
				p.produce(ctx, s, st, id)
			}
		}
		return nil
	}
	if p.Packed {
		msgs, err := p.pack(s, st)
		if err != nil {
			return err
		}
		p.deliverAll(s, st, msgs, r.IntN(2) == 0)
		return nil
	}
	var msgs []string
	for _, id := range st.ids {
		ev, err := event.Parse(st.bodies[id])
		if err != nil {
			return err
		}
		body, err := event.EncodeEnvelope(event.Envelope{AccountID: acct.ID, EventID: id, ReceivedAtMs: s.Env.Clock.Now().UnixMilli(), Event: ev.Canonical})
		if err != nil {
			return err
		}
		st.queued[id] = true
		msgs = append(msgs, body)
		if r.IntN(2) == 0 {
			s.Count("duplicate-delivery")
			msgs = append(msgs, body)
		}
		if r.IntN(claimedAloneOneIn) == 0 {
			if err := p.claimedAlone(ctx, s, st, id); err != nil {
				return err
			}
		}
	}
	p.deliverAll(s, st, msgs, r.IntN(2) == 0)
	return nil
}

// claimedAloneOneIn: one event in claimedAloneOneIn queued straight onto the queue was claimed
// by an earlier release's per-event worker that died before billing it, before this release ran.
const claimedAloneOneIn = 6

// claimedAlone leaves the entry an earlier release's per-event worker left when it claimed the
// event and died before its billing transaction: the message stays queued, and the worker of this
// release meets the entry.
func (p *Events) claimedAlone(ctx context.Context, s *Schedule, st *eventsState, id string) error {
	s.Count("earlier-release-claim")
	now := s.Env.Clock.Now()
	return testenv.PutClaimedAlone(ctx, s.Env.Admin.DynamoDB, s.Env.Names.Table(resources.TableLedger), testenv.ClaimedAlone{
		AccountID: st.acct.ID, EventID: id, Cycle: st.acct.CycleAt(now).Label(),
		RowInsertedAtMs: now.UnixMilli(), ReceivedAtMs: now.UnixMilli(),
	})
}

// deliverAll hands the messages to the worker: in invocations of several messages, which it
// groups by account into units (several), or one message an invocation, as sparse traffic
// reaches it.
func (p *Events) deliverAll(s *Schedule, st *eventsState, msgs []string, several bool) {
	if several {
		s.Count("coalesced-invocations")
		p.deliverInvocations(s, st, msgs)
		return
	}
	for _, m := range msgs {
		p.deliver(s, st, m)
	}
}

// pack queues the events in one or two packed messages, as the batch route does: each event in
// one of them, some in both, and some also alone (a client that sent it by itself first); each
// message may be delivered twice.
func (p *Events) pack(s *Schedule, st *eventsState) ([]string, error) {
	r := s.Rand
	now := s.Env.Clock.Now().UnixMilli()
	packs := [][]json.RawMessage{nil, nil}
	var alone []string
	for _, id := range st.ids {
		ev, err := event.Parse(st.bodies[id])
		if err != nil {
			return nil, err
		}
		st.queued[id] = true
		switch k := r.IntN(8); {
		case k == 0:
			packs[0], packs[1] = append(packs[0], ev.Canonical), append(packs[1], ev.Canonical)
			s.Count("event-in-two-batches")
		case k == 1:
			body, err := event.EncodeEnvelope(event.Envelope{AccountID: st.acct.ID, EventID: id, ReceivedAtMs: now, Event: ev.Canonical})
			if err != nil {
				return nil, err
			}
			alone = append(alone, body)
			packs[0] = append(packs[0], ev.Canonical)
			s.Count("event-alone-and-batched")
		default:
			packs[k%2] = append(packs[k%2], ev.Canonical)
		}
	}
	var msgs []string
	for _, evs := range packs {
		if len(evs) == 0 {
			continue
		}
		body, err := event.EncodePacked(event.Packed{AccountID: st.acct.ID, ReceivedAtMs: now, Events: evs})
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, body)
		if r.IntN(2) == 0 {
			s.Count("duplicate-delivery")
			msgs = append(msgs, body)
		}
	}
	msgs = append(msgs, alone...)
	r.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	return msgs, nil
}

// produce spawns a client sending one event through ingest, retrying what the front door asks it
// to retry, and delivers whatever reached the queue once it is done.
func (p *Events) produce(ctx context.Context, s *Schedule, st *eventsState, id string) {
	svc := s.Env.Ingest().Ingest
	s.Spawn("client "+id, resources.FunctionIngest, func(ctx context.Context) error {
		for range maxSendAttempts {
			_, err := svc.Accept(s.Invoke(ctx, resources.FunctionIngest), st.acct, st.bodies[id])
			var refused *ingest.RefusedError
			switch {
			case err == nil:
				st.queued[id] = true
				return nil
			case errors.As(err, &refused):
				return nil // a fast 402: the client is told the account is at its limit
			case ActorFrom(ctx).Dead():
				return err
			}
		}
		return fmt.Errorf("the front door kept failing for %s", id)
	}, func(error) {
		p.deliverAll(s, st, p.receive(ctx, s), st.several)
	})
}

// receive takes every message off the queue into the harness's pool, in a stable order.
func (p *Events) receive(ctx context.Context, s *Schedule) []string {
	return takeAll(ctx, s, resources.QueueEvents)
}

// deliver spawns a worker invocation of one message (its own unit). A delivery that fails (or
// whose worker dies) comes back, as SQS redelivers after the visibility timeout; one that
// succeeds may still be delivered again (SQS delivers at least once).
func (p *Events) deliver(s *Schedule, st *eventsState, body string) {
	id, ok := p.count(s, st, body)
	if !ok {
		return
	}
	w := s.Env.Worker().Worker
	s.Spawn(fmt.Sprintf("worker %s d%d", id, st.deliveries[id]), resources.FunctionWorker, func(ctx context.Context) error {
		_, err := w.Process(s.Invoke(ctx, resources.FunctionWorker), body)
		return err
	}, func(err error) {
		st.running[id]--
		switch {
		case err != nil:
			s.Count("redelivery")
			p.deliver(s, st, body)
		case !s.Quiet() && s.Rand.IntN(6) == 0:
			s.Count("duplicate-delivery")
			p.deliver(s, st, body)
		}
	})
}

// count records one delivery of a message, holds the deliveries made once the faults are over
// to their bound, and returns the message's name; false: the bound is broken (a violation).
func (p *Events) count(s *Schedule, st *eventsState, body string) (string, bool) {
	m, err := event.DecodeMessage(body)
	if err != nil {
		s.Violate("harness: a queued message does not decode: %v", err)
		return "", false
	}
	id := m.Envelopes[0].EventID
	if m.Packed {
		id = "batch " + worker.BatchID(m.Raw)[:8]
	}
	st.deliveries[id]++
	if s.Quiet() {
		if st.quiet[id] == 0 {
			// Deliveries still running when the faults ended each lead a chain of their own:
			// one that finds another mid-pipeline answers "retry" and comes back.
			st.chains[id] = st.running[id] + 1
		}
		st.quiet[id]++
		if bound := maxQuietDeliveries * st.chains[id]; st.quiet[id] > bound {
			s.Violate("events: %s needed more than %d deliveries after the faults ended (%d per delivery then running)", id, bound, maxQuietDeliveries)
			return "", false
		}
	}
	st.running[id]++
	return id, true
}

// deliverInvocations hands the messages to the worker's SQS handler in invocations of one or
// more messages (split at random), as Lambda's event source does. Each record carries its
// receive count, so a redelivered unit takes the worker's read-first path. A message the
// handler reports failed, or every message of an invocation whose worker died, comes back in a
// later invocation, grouped anew with the others coming back with it; a message acked may
// still be delivered again.
func (p *Events) deliverInvocations(s *Schedule, st *eventsState, bodies []string) {
	for len(bodies) > 0 {
		n := 1 + s.Rand.IntN(len(bodies))
		p.deliverInvocation(s, st, bodies[:n])
		bodies = bodies[n:]
	}
}

func (p *Events) deliverInvocation(s *Schedule, st *eventsState, bodies []string) {
	var (
		records []events.SQSMessage
		names   []string
	)
	for i, body := range bodies {
		id, ok := p.count(s, st, body)
		if !ok {
			continue
		}
		names = append(names, id)
		records = append(records, events.SQSMessage{
			MessageId: fmt.Sprint(i), Body: body,
			Attributes: map[string]string{"ApproximateReceiveCount": fmt.Sprint(st.deliveries[id])},
		})
	}
	if len(records) == 0 {
		return
	}
	w := s.Env.Worker().Worker
	var failed []string
	s.Spawn(fmt.Sprintf("worker invocation of %d (%s d%d)", len(records), names[0], st.deliveries[names[0]]), resources.FunctionWorker, func(ctx context.Context) error {
		resp, err := w.HandleSQS(s.Invoke(ctx, resources.FunctionWorker), events.SQSEvent{Records: records})
		if err != nil || ActorFrom(ctx).Dead() {
			failed = nil
			for _, r := range records {
				failed = append(failed, r.Body)
			}
			return errKilled
		}
		for _, f := range resp.BatchItemFailures {
			for _, r := range records {
				if r.MessageId == f.ItemIdentifier {
					failed = append(failed, r.Body)
				}
			}
		}
		return nil
	}, func(error) {
		var again []string
		for i, r := range records {
			st.running[names[i]]--
			switch {
			case slices.Contains(failed, r.Body):
				s.Count("redelivery")
				again = append(again, r.Body)
			case !s.Quiet() && s.Rand.IntN(6) == 0:
				s.Count("duplicate-delivery")
				again = append(again, r.Body)
			}
		}
		if len(again) > 0 {
			p.deliverInvocations(s, st, again)
		}
	})
}

// operate spawns an operator who changes the account while its events are billed: raises its
// limit, or reactivates it.
func (p *Events) operate(s *Schedule, st *eventsState) {
	svc := s.Env.API().Accounts
	s.Count("account-change")
	s.Spawn("operator", resources.FunctionAPI, func(ctx context.Context) error {
		var in accounts.UpdateInput
		if st.raised > 0 {
			limits := map[string]plans.Limit{plans.FeatureEvents: plans.Max(st.raised)}
			for f, l := range st.limits {
				limits[f] = plans.Max(l) // the meters' limits stay as they were
			}
			in.Limits = &limits
		}
		if st.reactivate {
			active := accounts.Active
			in.Status = &active
		}
		for range maxSendAttempts {
			if _, err := svc.Update(s.Invoke(ctx, resources.FunctionAPI), st.acct.ID, in); err == nil || ActorFrom(ctx).Dead() {
				return err
			}
		}
		return errors.New("the operator could not change the account")
	}, nil)
}

// watchTerminal holds every committed write of the ledger to "terminal is terminal": once an
// entry is INSERTED, REJECTED or UNINSERTABLE, nothing about it changes again.
func (p *Events) watchTerminal(s *Schedule, st *eventsState) {
	ldg := s.Env.Worker().Ledger
	s.Observe(func(a *Actor, c Call, params any, committed bool) {
		if !committed || c.Service != "DynamoDB" || !strings.Contains(c.Table, resources.TableLedger) {
			return
		}
		for _, w := range instrument.Writes(params, s.Env.tables) {
			if w.Table != resources.TableLedger {
				continue
			}
			for _, id := range st.ids {
				if w.Key != ledger.Key(st.acct.ID, id) {
					continue
				}
				now, err := ldg.Get(context.Background(), st.acct.ID, id)
				if err != nil {
					s.Violate("harness: read %s after a write: %v", id, err)
					continue
				}
				if before, ok := st.entries[id]; ok && before.Status.Terminal() && !reflect.DeepEqual(now, before) {
					s.Violate("events: %s was %s and a write by %s changed it (now %s, reason %q)", id, before.Status, a.Name, now.Status, now.Reason)
				}
				st.entries[id] = now
			}
		}
	})
}

// Idle implements Pipeline: deliveries and their redeliveries are spawned as actors end.
func (*Events) Idle(context.Context, *Schedule) bool { return false }

// installHook makes the worker crash, at random, between any two of its steps: the process dies
// there, and the message is left to its redelivery.
func installHook(env *Env) {
	w := env.Worker().Worker
	if w.Hook != nil {
		return
	}
	w.Hook = func(ctx context.Context, pt worker.Point) error { return crashBetweenSteps(ctx, pt.String()) }
}

// Check implements Pipeline.
func (p *Events) Check(ctx context.Context, s *Schedule) []string {
	st := s.State.(*eventsState)
	wfn := s.Env.Worker()
	var v []string
	bad := func(format string, args ...any) { v = append(v, "events: "+fmt.Sprintf(format, args...)) }
	var billed, queued, refusedElsewhere int64
	refusedForEvents := false
	cycles := map[string]bool{}
	inserted := map[string]bool{}
	var admitted []ledger.Entry
	refused := map[string][]ledger.Entry{} // by the meter whose cap or value refused it
	for _, id := range st.ids {
		e, err := wfn.Ledger.Get(ctx, st.acct.ID, id)
		if errors.Is(err, ledger.ErrNotFound) {
			if st.queued[id] {
				bad("%s was queued and has no ledger entry", id)
			}
			continue
		}
		if err != nil {
			bad("read %s: %v", id, err)
			continue
		}
		queued++
		cycles[e.Cycle] = true
		if e.Billed() {
			billed++
			admitted = append(admitted, e)
		}
		switch e.Status {
		case ledger.Inserted:
			if !e.Billed() {
				bad("%s is INSERTED without its billing checkpoint", id)
			}
			p.checkStored(ctx, s, st, e, bad)
			inserted[id] = true
		case ledger.Rejected:
			if e.Billed() {
				bad("%s is REJECTED and billed", id)
			}
			if e.Reason == "" {
				bad("%s is REJECTED without a reason", id)
			}
			if why := refusedBy(e.Reason); why != "" && why != plans.FeatureEvents {
				refused[why] = append(refused[why], e)
				refusedElsewhere++
			} else if why == plans.FeatureEvents {
				refusedForEvents = true
			}
		case ledger.Uninsertable:
			bad("%s ended UNINSERTABLE (%s), though every row is valid", id, e.Reason)
		default:
			bad("%s is left %s", id, e.Status)
		}
	}
	// Exactly one analytics row per INSERTED event, and none for any other, in the whole table:
	// rows of their own and rows in every unit's rows item.
	rows, err := wfn.Analytics.Rows(ctx, st.acct.ID, 0, analytics.MaxInstantMs)
	if err != nil {
		bad("read the analytics rows: %v", err)
	}
	count := map[string]int{}
	for _, r := range rows {
		count[r.EventID]++
	}
	for _, id := range st.ids {
		if want := map[bool]int{true: 1}[inserted[id]]; count[id] != want {
			bad("%s has %d analytics rows; want %d", id, count[id], want)
		}
	}
	var meter int64
	for c := range cycles {
		t, err := wfn.Usage.Read(ctx, st.acct.ID, plans.FeatureEvents, c)
		if err != nil {
			bad("read the meter: %v", err)
			return v
		}
		meter += t.Used
	}
	if st.meters {
		v = append(v, p.checkMeters(ctx, s, st, cycles, admitted, refused)...)
	}
	v = append(v, p.checkAlerts(ctx, s, st, cycles, refused, refusedForEvents)...)
	// Events another meter refused (a cap, a bad value) are not the events limit's to count.
	queued -= refusedElsewhere
	switch {
	case st.inactive && st.reactivate:
		if billed > queued || meter != billed {
			bad("a reactivated account billed %d of %d events, meter %d", billed, queued, meter)
		}
	case st.inactive:
		if billed != 0 || meter != 0 {
			bad("an inactive account billed %d events, meter %d; want none", billed, meter)
		}
	case st.plan == "free":
		// Every event with room is billed: exactly min(limit, events), or, when the limit was
		// raised meanwhile, between what the first and the raised limit allow.
		lo, hi := min(st.limit, queued), min(max(st.limit, st.raised), queued)
		if billed < lo || billed > hi {
			bad("a free account with limit %d (raised to %d) and %d events billed %d; want %d to %d", st.limit, st.raised, queued, billed, lo, hi)
		}
		if meter != billed {
			bad("the meter is %d and %d events are checkpointed", meter, billed)
		}
		if meter > max(st.limit, st.raised) {
			bad("the meter is %d, past the limit %d", meter, max(st.limit, st.raised))
		}
	case st.plan == "plus":
		if billed != queued || meter != queued {
			bad("a plus account billed %d events, meter %d; want %d and %d", billed, meter, queued, queued)
		}
	case st.plan == "internal":
		if billed != queued || meter != 0 {
			bad("an internal account billed %d events, meter %d; want %d and 0", billed, meter, queued)
		}
	}
	return v
}

// refusedBy names what refused a REJECTED event: the feature whose cap it would have passed,
// "value" for a bad meter value, "" for anything else (an inactive account).
func refusedBy(reason string) string {
	if strings.HasPrefix(reason, "bad meter value: ") {
		return "value"
	}
	if f, ok := strings.CutPrefix(reason, "monthly limit reached: "); ok {
		f, _, _ = strings.Cut(f, " ")
		return f
	}
	return ""
}

// checkMeters holds the meters to the ledger: each figure is what the admitted entries' values
// make it (a sum of tokens, the largest gb, the number of distinct users, each value counted by
// exactly one entry), a capped account's figures stay within their limits and
// are exact (an event refused at a cap needed more than was left, so more than is left now), a
// bad value always refuses its event, and an internal account's meters never move.
func (p *Events) checkMeters(ctx context.Context, s *Schedule, st *eventsState, cycles map[string]bool,
	admitted []ledger.Entry, refused map[string][]ledger.Entry) []string {
	var v []string
	bad := func(format string, args ...any) { v = append(v, "meters: "+fmt.Sprintf(format, args...)) }
	figure := map[string]int64{}
	for c := range cycles {
		for _, f := range []string{meterTokens, meterGB, meterUsers} {
			t, err := s.Env.Worker().Usage.Read(ctx, st.acct.ID, f, c)
			if err != nil {
				bad("read %s: %v", f, err)
				return v
			}
			figure[f] += t.Used
		}
	}
	want := map[string]int64{}
	distinct := map[string]int{}
	for _, e := range admitted {
		for _, mv := range e.MeterValues() {
			switch mv.Meter {
			case meterTokens:
				want[meterTokens] += mv.Value
			case meterGB:
				want[meterGB] = max(want[meterGB], mv.Value)
			case meterUsers:
				if _, seen := distinct[mv.Distinct]; !seen {
					want[meterUsers]++
					distinct[mv.Distinct] = 0
				}
				if mv.New {
					distinct[mv.Distinct]++
				}
			}
		}
	}
	for ev := range maps.Keys(st.bodies) {
		raw := string(st.bodies[ev])
		isBad := strings.Contains(raw, `"type":"llm.call"`) && !tokensOK.MatchString(raw)
		e, err := s.Env.Worker().Ledger.Get(ctx, st.acct.ID, ev)
		if err != nil {
			continue // not queued: Check says so if it was
		}
		switch {
		case isBad && e.Billed():
			bad("%s carries a bad tokens value and was billed", ev)
		case isBad && e.Status == ledger.Rejected && refusedBy(e.Reason) != "value" && !st.inactive:
			bad("%s carries a bad tokens value and was REJECTED for %q", ev, e.Reason)
		case !isBad && refusedBy(e.Reason) == "value":
			bad("%s was REJECTED for a bad value it does not carry: %q", ev, e.Reason)
		}
	}
	internal := st.plan == "internal"
	for _, f := range []string{meterTokens, meterGB, meterUsers} {
		w := want[f]
		if internal || (st.inactive && !st.reactivate) {
			w = 0
		}
		if figure[f] != w {
			bad("the %s figure is %d; the admitted entries make it %d", f, figure[f], w)
		}
	}
	for value, n := range distinct {
		if n != 1 && !internal {
			bad("the distinct user %q is counted by %d entries; want one", value, n)
		}
	}
	if st.plan != "free" || st.inactive {
		for f, es := range refused {
			if f != "value" {
				bad("%d events refused at the %s cap of an uncapped account", len(es), f)
			}
		}
		return v
	}
	lim := st.limits
	if figure[meterTokens] > lim[meterTokens] || figure[meterGB] > lim[meterGB] || figure[meterUsers] > lim[meterUsers] {
		bad("a figure past its limit: %v, limits %v", figure, lim)
	}
	for _, e := range refused[meterTokens] {
		if need := tokensOf(e, st); need <= lim[meterTokens]-figure[meterTokens] {
			bad("%s needed %d tokens and was refused with %d left", e.EventID, need, lim[meterTokens]-figure[meterTokens])
		}
	}
	for _, e := range refused[meterGB] {
		if gb := gbOf(e, st); gb <= lim[meterGB] {
			bad("%s's %d gb is within the limit %d and was refused", e.EventID, gb, lim[meterGB])
		}
	}
	if len(refused[meterUsers]) > 0 && figure[meterUsers] != lim[meterUsers] {
		bad("a new user was refused with %d of %d counted", figure[meterUsers], lim[meterUsers])
	}
	return v
}

var (
	tokensOK = regexp.MustCompile(`"tokens":[0-9]+,`)
	numberIn = regexp.MustCompile(`"(tokens|gb)":([0-9]+)`)
)

func tokensOf(e ledger.Entry, st *eventsState) int64 { return numberOf(st.bodies[e.EventID], "tokens") }
func gbOf(e ledger.Entry, st *eventsState) int64     { return numberOf(st.bodies[e.EventID], "gb") }

func numberOf(body []byte, name string) int64 {
	for _, m := range numberIn.FindAllSubmatch(body, -1) {
		if string(m[1]) == name {
			n, _ := strconv.ParseInt(string(m[2]), 10, 64)
			return n
		}
	}
	return 0
}

// checkStored holds an INSERTED event to "archive before insert": its payload is in the archive
// byte for byte, and it has exactly one analytics row.
func (p *Events) checkStored(ctx context.Context, s *Schedule, st *eventsState, e ledger.Entry, bad func(string, ...any)) {
	wfn := s.Env.Worker()
	ev, err := event.Parse(st.bodies[e.EventID])
	if err != nil {
		bad("parse %s: %v", e.EventID, err)
		return
	}
	got, err := wfn.Archive.Read(ctx, e.ArchiveLocation())
	switch {
	case errors.Is(err, archive.ErrNotFound):
		bad("%s is INSERTED and its payload is not archived", e.EventID)
	case err != nil:
		bad("read the archive of %s: %v", e.EventID, err)
	case !bytes.Equal(got, ev.Canonical):
		bad("%s's archived payload differs from the event", e.EventID)
	}
	ok, err := wfn.Analytics.Exists(ctx, e.RowRef())
	if err != nil {
		bad("read the row of %s: %v", e.EventID, err)
	} else if !ok {
		bad("%s is INSERTED without its analytics row", e.EventID)
	}
	if e.RowInUnit {
		// Its row is in its unit's rows item: exactly one row, so none of its own as well.
		own, err := wfn.Analytics.Exists(ctx, e.RowRef().Own())
		if err != nil {
			bad("read the row of %s: %v", e.EventID, err)
		} else if own {
			bad("%s has two analytics rows: one in unit %s's rows item and one of its own", e.EventID, e.Batch)
		}
	}
}
