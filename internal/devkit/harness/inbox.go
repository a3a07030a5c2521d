package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	signer "github.com/ferrymeter/ferry/internal/devkit/kindesigner"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	webhooks "github.com/ferrymeter/ferry/internal/webhooks/intake"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// Limits of an inbox schedule.
const (
	maxInboxAccounts = 2
	maxBillingEvents = 8
	// maxLinkChanges bounds an operator's unlinks and links of one customer.
	maxLinkChanges = 8
	// maxProviderTries bounds one delivery's attempts in a row (a provider retries on any answer
	// but 200); maxProviderRounds bounds the rounds of retries once faults are over.
	maxProviderTries  = 4
	maxProviderRounds = 3
	// inboxIdleRounds bounds what the environment does once no actor is left (the clock moved
	// to the next nudge, a sweep); inboxLastSweeps bounds the sweeps among them.
	inboxIdleRounds = 60
	inboxLastSweeps = 8
	// inboxSweepOneIn and inboxLeaseJumpOneIn are the chances per step, while faults are on,
	// that the sweep starts and that the clock jumps past every lease.
	inboxSweepOneIn     = 40
	inboxLeaseJumpOneIn = 50
	// sweepEvery is the sweep's schedule (EventBridge, every minute).
	sweepEvery = time.Minute
	// stripeSecret signs the schedules' Stripe deliveries.
	stripeSecret = "whsec_harness_inbox"
	// creditsFeature is the catalog's allowance feature.
	creditsFeature = "credits"
)

// Inbox is the webhook inbox under the harness: accounts linked to Kinde and Stripe customers;
// billing events (plan changes, cancellations, payments, failed payments, overdue invoices, an
// unknown plan, a type Ferry does not handle, a customer no account is linked to), each signed
// as its provider signs it and delivered through the webhooks function's handler once or
// several times, some concurrently and some late (an older event after a newer one); the inbox
// worker consuming the nudges the functions send (delayed ones when the clock reaches them, a
// failed message again after the queue's visibility timeout, some twice), the sweep starting at
// random points and racing the workers, the clock jumping past every lease, invocations
// stopped at their timeout or paused past it, and every call meeting the wire's faults.
//
// The expected end state comes from a model of the events alone. Invariants: every delivery is
// answered 200 in the end, and every event stored; each stored event ends APPLIED or IGNORED
// as the model says (the newest plan change and the newest status change APPLIED, every
// payment APPLIED, an unknown plan, an unhandled type and an unlinked customer IGNORED), or
// DEAD only after its sixth attempt, claimed while faults were on; its seen count and its
// receipts are the deliveries that committed; the account's plan and status are those of the
// newest event by event time (ties by source and provider event id, the greater newer); its
// allowance is what the events grant (one row per plan, each written once, the total the
// largest grant among them); and, held to a model of the record, every status transition moves
// the event from the revision it read, no delivery overwrites a stored event, and no copy
// counts an event that is not stored.
type Inbox struct{}

// Name implements Pipeline.
func (*Inbox) Name() string { return "inbox" }

// billingKind is what a billing event of the schedule does.
type billingKind int

const (
	toPlus billingKind = iota
	toDefault
	paidPlus
	paymentFailed
	invoiceOverdue
	unknownPlan
	unhandledType
	// meterUsage is Kinde's meter change: a mark for the reconciler, which changes nothing on
	// the account and so checks the link on its own.
	meterUsage
)

// billingEvent is one provider event of the schedule.
type billingEvent struct {
	source  inbox.Source
	id      string // the provider's event id
	stored  string // the stored event's id
	kind    billingKind
	at      time.Time
	account int // index of the account whose customer it names; -1: no account is linked
	// body is the Stripe event (a Kinde token is signed at each delivery, with its sending time).
	body     []byte
	claims   map[string]any
	delivery int // copies made so far
}

func (e *billingEvent) String() string { return string(e.source) + ":" + e.id }

// newer orders events as the design does: by event time to the nanosecond, then by source and
// provider event id in byte order, the greater being the newer.
func (e *billingEvent) newer(o *billingEvent) bool {
	if !e.at.Equal(o.at) {
		return e.at.After(o.at)
	}
	if e.source != o.source {
		return e.source > o.source
	}
	return e.id > o.id
}

// planTarget is the plan a plan change moves to ("" for a kind that is no valid plan change).
func (e *billingEvent) planTarget() string {
	switch e.kind {
	case toPlus:
		return "plus"
	case toDefault:
		return "free"
	}
	return ""
}

// statusTarget is the status a status-changing event sets ("" for none).
func (e *billingEvent) statusTarget() accounts.Status {
	switch e.kind {
	case paidPlus:
		return accounts.Active
	case paymentFailed:
		return accounts.PastDue
	case invoiceOverdue:
		return accounts.Inactive
	}
	return ""
}

// delivery is one copy a provider sends.
type delivery struct {
	ev       *billingEvent
	n        int
	answered bool
	running  bool
	rounds   int
	// quietRounds counts the sends once faults were over.
	quietRounds int
}

// nudgeMsg is a message on the inbox queue, due when the clock reaches dueAt.
type nudgeMsg struct {
	body  string
	dueAt time.Time
}

// eventModel is the stored event as the model has it, from the writes that committed.
type eventModel struct {
	exists bool
	rev    int64
	// intake counts the deliveries that committed (the insert and every copy).
	intake int
	// lastClaimFaulty: the last claim committed while faults were on.
	lastClaimFaulty bool
}

type inboxState struct {
	accounts []accounts.Account
	events   []*billingEvent
	byStored map[string]*billingEvent
	model    map[string]*eventModel
	// late are the deliveries not sent yet; sent are those sent (or being sent).
	late, sent []*delivery
	pending    []nudgeMsg
	workers    int
	sweeps     int
	lastSweeps int
	// sweepNudged: the last sweep sent a nudge.
	sweepNudged bool
	idleRounds  int
	pauses      bool
	handler     http.Handler
	// unlink, when set, is the link an operator unlinks (and links again) on account 0 while
	// its events are applied; operating: the operator has started.
	unlink    accounts.LinkKind
	operating bool
	// admitted: an admission read account 0's allowance, which opens its cycle (or tops it up
	// to the plan the account is on).
	admitted bool
	// rows counts the committed writes of each grant row; billing counts those of each account
	// change key.
	rows    map[string]int
	billing map[string]int
}

// Start implements Pipeline.
func (p *Inbox) Start(ctx context.Context, s *Schedule) error {
	r := s.Rand
	st := &inboxState{byStored: map[string]*billingEvent{}, model: map[string]*eventModel{}, rows: map[string]int{}, billing: map[string]int{}}
	s.State = st
	if err := p.configure(s.Env); err != nil {
		return err
	}
	api := s.Env.API().Accounts
	// Most schedules put every event on one account, so that its events race one another.
	nAccounts := 1
	if r.IntN(3) == 0 {
		nAccounts = maxInboxAccounts
	}
	for i := range nAccounts {
		acct, _, err := api.Create(ctx, accounts.CreateInput{
			ID: fmt.Sprintf("acct_b%d_%d", s.Seed, i), Plan: "free", Status: accounts.Active,
			Links: map[accounts.LinkKind]string{accounts.StripeCustomer: stripeCustomer(i), accounts.KindeCustomer: kindeCustomer(i)},
		})
		if err != nil {
			return fmt.Errorf("create account: %w", err)
		}
		st.accounts = append(st.accounts, acct)
	}
	n := 3 + r.IntN(maxBillingEvents-2)
	kinds := []billingKind{toPlus, toPlus, toPlus, toDefault, toDefault, paidPlus, paidPlus, paymentFailed, paymentFailed,
		invoiceOverdue, invoiceOverdue, unknownPlan, unhandledType, meterUsage, meterUsage}
	for i := range n {
		e := &billingEvent{kind: kinds[r.IntN(len(kinds))], account: r.IntN(nAccounts)}
		if r.IntN(10) == 0 {
			e.account = -1
		}
		e.source = []inbox.Source{inbox.Kinde, inbox.Stripe}[r.IntN(2)]
		if e.kind == meterUsage {
			e.source = inbox.Kinde // Stripe sends no such event
		}
		// A few distinct instants, so that events tie: Stripe's are whole seconds, and half of
		// Kinde's too.
		e.at = startTime.Add(-time.Duration(r.IntN(5)) * time.Minute)
		if e.source == inbox.Kinde {
			e.id = fmt.Sprintf("event_b%02d", i)
			if r.IntN(2) == 0 {
				e.at = e.at.Add(time.Duration(1 + r.IntN(999_999_999)))
			}
		} else {
			e.id = fmt.Sprintf("evt_b%02d", i)
		}
		e.stored = inbox.ID(e.source, e.id)
		if err := p.render(e); err != nil {
			return err
		}
		st.events = append(st.events, e)
		st.byStored[e.stored] = e
		st.model[e.stored] = &eventModel{}
	}
	// Copies: most events once, some two or three times; the order is shuffled, and some are
	// sent only later, once other work ended: an older event after a newer one.
	var all []*delivery
	for _, e := range st.events {
		copies := []int{1, 1, 1, 2, 2, 3}[r.IntN(6)]
		for range copies {
			e.delivery++
			all = append(all, &delivery{ev: e, n: e.delivery})
			if e.delivery > 1 {
				s.Count("duplicate-webhook")
			}
		}
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	first := 1 + r.IntN(len(all))
	if r.IntN(2) == 0 {
		first = len(all) // a storm: every copy at once
	}
	st.late = all[first:]
	st.pauses = r.IntN(3) == 0
	if r.IntN(4) == 0 {
		// The customer of one of account 0's events, so that the unlink races its effect: a
		// meter change's if it has one (it changes nothing on the account, so its transaction
		// checks the link on its own).
		st.unlink = accounts.StripeCustomer
		for _, e := range st.events {
			if e.account == 0 && e.kind == meterUsage {
				st.unlink = accounts.KindeCustomer
				break
			}
			if e.account == 0 {
				st.unlink = linkOf(e.source)
			}
		}
	}
	if r.IntN(2) == 0 {
		st.admitted = true
		for range 1 + r.IntN(2) {
			p.admit(s, st)
		}
	}
	s.Note("inbox: %d accounts, %d events, %d deliveries (%d late), pauses %v, unlink %q, admissions %v, fault rate %.2f",
		nAccounts, n, len(all), len(st.late), st.pauses, st.unlink, st.admitted, s.FaultRate)
	p.observe(s, st)
	s.beforeStep = leaseJumpsAndSweeps(s, inboxLeaseJumpOneIn, inbox.LeaseDuration, inboxSweepOneIn, "sweep-race", func() { p.sweep(s, st) })
	handler, err := s.Env.Function(resources.FunctionWebhooks).HTTP.Handler()
	if err != nil {
		return fmt.Errorf("the webhooks handler: %w", err)
	}
	st.handler = handler
	for _, d := range all[:first] {
		p.send(s, st, d)
	}
	return nil
}

func stripeCustomer(i int) string { return fmt.Sprintf("cus_b%d", i) }
func kindeCustomer(i int) string  { return fmt.Sprintf("kp_b%d", i) }

// inboxSigner is the Kinde signer every schedule's Kinde deliveries are signed by: one key pair
// for the process, its JWKS on a loopback server the webhooks function fetches it from.
var inboxSigner struct {
	once sync.Once
	s    *signer.Signer
	url  string
	err  error
}

// configure points the webhooks function at the schedules' signing keys.
func (p *Inbox) configure(env *Env) error {
	inboxSigner.once.Do(func() {
		s, err := signer.New()
		if err != nil {
			inboxSigner.err = err
			return
		}
		srv := httptest.NewServer(s.Handler())
		inboxSigner.s, inboxSigner.url = s, srv.URL+signer.JWKSPath
	})
	if inboxSigner.err != nil {
		return fmt.Errorf("the Kinde signer: %w", inboxSigner.err)
	}
	rcv := env.Webhooks().Receiver
	rcv.SetKindeJWKSURL(inboxSigner.url)
	rcv.Config.StripeSecret = stripeSecret
	return nil
}

// kindeTime is how Kinde states a time: an offset, and nanoseconds.
func kindeTime(t time.Time) string {
	return t.In(time.FixedZone("", 11*3600)).Format("2006-01-02T15:04:05.000000000Z07:00")
}

// render writes the event as its provider sends it.
func (p *Inbox) render(e *billingEvent) error {
	customer := "cus_nobody"
	if e.account >= 0 {
		customer = stripeCustomer(e.account)
	}
	if e.source == inbox.Kinde {
		customer = "kp_nobody"
		if e.account >= 0 {
			customer = kindeCustomer(e.account)
		}
		kinde := map[billingKind][2]string{ // the type, and the plan key
			toPlus:         {"customer.plan_changed", "customer_pro_plan"},
			toDefault:      {"customer.agreement_cancelled", ""},
			paidPlus:       {"customer.payment_succeeded", "customer_pro_plan"},
			paymentFailed:  {"customer.payment_failed", ""},
			invoiceOverdue: {"customer.invoice_overdue", ""},
			unknownPlan:    {"customer.plan_changed", "customer_gold_plan"},
			unhandledType:  {"customer.created", ""},
			meterUsage:     {"customer.meter_usage_updated", ""},
		}[e.kind]
		typ, plan := kinde[0], kinde[1]
		data := map[string]any{"customer_id": customer, "user_id": "kp_user", "customer_type": "user"}
		if plan != "" {
			data["plan"] = map[string]any{"key": plan}
		}
		if e.kind == meterUsage {
			data["feature_code"] = plans.FeatureEvents
		}
		e.claims = map[string]any{"type": typ, "event_id": e.id, "source": "api", "data": data, "event_timestamp": kindeTime(e.at)}
		return nil
	}
	items := func(price string) map[string]any {
		return map[string]any{"object": "list", "data": []any{map[string]any{"id": "si_1", "price": map[string]any{"id": price}}}}
	}
	lines := map[string]any{"object": "list", "data": []any{map[string]any{"id": "il_1",
		"pricing": map[string]any{"type": "price_details", "price_details": map[string]any{"price": "price_ferry_plus_monthly"}}}}}
	var typ string
	var object map[string]any
	switch e.kind {
	case toPlus:
		typ, object = "customer.subscription.updated", map[string]any{"id": "sub_1", "object": "subscription", "customer": customer, "status": "active", "items": items("price_ferry_plus_monthly")}
	case toDefault:
		typ, object = "customer.subscription.deleted", map[string]any{"id": "sub_1", "object": "subscription", "customer": customer, "status": "canceled", "items": items("price_ferry_plus_monthly")}
	case unknownPlan:
		typ, object = "customer.subscription.updated", map[string]any{"id": "sub_1", "object": "subscription", "customer": customer, "status": "active", "items": items("price_unknown")}
	case paidPlus:
		typ, object = "invoice.paid", map[string]any{"id": "in_1", "object": "invoice", "customer": customer, "status": "paid", "lines": lines}
	case paymentFailed:
		typ, object = "invoice.payment_failed", map[string]any{"id": "in_1", "object": "invoice", "customer": customer, "status": "open", "lines": lines}
	case invoiceOverdue:
		typ, object = "invoice.overdue", map[string]any{"id": "in_1", "object": "invoice", "customer": customer, "status": "open", "lines": lines}
	case unhandledType:
		typ, object = "customer.created", map[string]any{"id": customer, "object": "customer"}
	}
	body, err := json.Marshal(map[string]any{
		"id": e.id, "object": "event", "api_version": "2025-03-31.basil", "created": e.at.Unix(), "livemode": false,
		"type": typ, "data": map[string]any{"object": object},
	})
	e.body = body
	return err
}

// request is one delivery of the event, signed now as its provider signs it: a Kinde token
// whose timestamp is the schedule's now, a Stripe body under the endpoint's secret at the wall
// clock's now (which stripe-go's verification reads).
func (p *Inbox) request(ctx context.Context, s *Schedule, d *delivery) (*http.Request, error) {
	e := d.ev
	if e.source == inbox.Kinde {
		claims := map[string]any{}
		for k, v := range e.claims {
			claims[k] = v
		}
		claims["timestamp"] = kindeTime(s.Env.Clock.Now())
		token, err := inboxSigner.s.Sign(claims)
		if err != nil {
			return nil, err
		}
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, webhooks.KindePath, strings.NewReader(token))
		req.Header.Set("Content-Type", "application/jwt")
		req.Header.Set(webhooks.HeaderWebhookID, "msg_"+e.id)
		return req, nil
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, webhooks.StripePath, strings.NewReader(string(e.body)))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set(webhooks.HeaderStripeSignature, stripewebhook.Sign(e.body, stripeSecret, time.Now()))
	return req, nil
}

var errNotAnswered = errors.New("the delivery was not answered 200")

// send spawns the provider sending one copy, retrying until it is answered 200 (a provider
// retries any other answer, and a connection that dies).
func (p *Inbox) send(s *Schedule, st *inboxState, d *delivery) {
	handler := st.handler
	if !d.running {
		st.sent = append(st.sent, d)
	}
	d.running = true
	d.rounds++
	s.Spawn(fmt.Sprintf("provider %s c%d r%d", d.ev, d.n, d.rounds), resources.FunctionWebhooks, func(ctx context.Context) error {
		for range maxProviderTries {
			req, err := p.request(s.Invoke(ctx, resources.FunctionWebhooks), s, d)
			if err != nil {
				return err
			}
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if ActorFrom(ctx).Dead() {
				return errKilled
			}
			switch {
			case rec.Code == http.StatusOK:
				d.answered = true
				return nil
			case rec.Code < 500:
				s.Violate("inbox: %s (copy %d) was refused %d: %s", d.ev, d.n, rec.Code, rec.Body.String())
				return nil
			}
		}
		return errNotAnswered
	}, func(err error) {
		d.running = false
		if err != nil && !s.Quiet() {
			s.Count("provider-retry")
			p.send(s, st, d)
		}
		p.moved(s, st)
	})
}

// moved runs as an actor ends: a late delivery may go now, and the nudges due are delivered.
func (p *Inbox) moved(s *Schedule, st *inboxState) {
	if len(st.late) > 0 && s.Rand.IntN(2) == 0 {
		d := st.late[0]
		st.late = st.late[1:]
		s.Count("late-webhook")
		p.send(s, st, d)
	}
	p.dispatch(s, st)
}

// dispatch delivers every nudge that is due, in the order they were sent.
func (p *Inbox) dispatch(s *Schedule, st *inboxState) {
	now := s.Env.Clock.Now()
	var keep []nudgeMsg
	var due []nudgeMsg
	for _, m := range st.pending {
		if m.dueAt.After(now) {
			keep = append(keep, m)
		} else {
			due = append(due, m)
		}
	}
	st.pending = keep
	for _, m := range due {
		p.work(s, st, m.body)
	}
}

// work spawns the inbox worker handling one delivery of a nudge, through its queue handler. A
// message it reports failed (or whose worker died) comes back after the queue's visibility
// timeout; one it handled may still come again (SQS delivers at least once).
func (p *Inbox) work(s *Schedule, st *inboxState, body string) {
	fn := s.Env.Function(resources.FunctionInbox)
	st.workers++
	msgID := fmt.Sprintf("m%d", st.workers)
	var id struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal([]byte(body), &id)
	name := id.ID
	if e := st.byStored[id.ID]; e != nil {
		name = e.String()
	}
	if e := st.byStored[id.ID]; e != nil && st.unlink != "" && !st.operating && e.account == 0 && linkOf(e.source) == st.unlink {
		// The operator starts as the first of the customer's events is worked on.
		st.operating = true
		p.operate(s, st)
	}
	pause := st.pauses && !s.Quiet() && s.Rand.IntN(4) == 0
	s.Spawn(fmt.Sprintf("inbox %s w%d", name, st.workers), resources.FunctionInbox, func(ctx context.Context) error {
		ictx := s.Invoke(ctx, resources.FunctionInbox)
		if pause {
			s.Pause(ictx)
		}
		resp, err := fn.Consume(ictx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: msgID, Body: body}}})
		switch {
		case ActorFrom(ctx).Dead():
			return errKilled
		case err != nil:
			return err
		case len(resp.BatchItemFailures) > 0:
			return errors.New("the message was reported failed")
		}
		return nil
	}, func(err error) {
		switch {
		case err != nil:
			s.Count("redelivery")
			st.pending = append(st.pending, nudgeMsg{body: body, dueAt: s.Env.Clock.Now().Add(6 * resources.InboxWorkerTimeout)})
		case !s.Quiet() && s.Rand.IntN(6) == 0:
			s.Count("duplicate-delivery")
			st.pending = append(st.pending, nudgeMsg{body: body, dueAt: s.Env.Clock.Now()})
		}
		p.moved(s, st)
	})
}

// operate spawns an operator who unlinks a customer from account 0 while its events are
// applied, and links it again, and so on: what the link condition of every effect is for.
func (p *Inbox) operate(s *Schedule, st *inboxState) {
	svc := s.Env.API().Accounts
	id := stripeCustomer(0)
	if st.unlink == accounts.KindeCustomer {
		id = kindeCustomer(0)
	}
	changes := 1 + s.Rand.IntN(maxLinkChanges)
	s.Count("account-unlinked")
	s.Spawn("operator links "+string(st.unlink), resources.FunctionAPI, func(ctx context.Context) error {
		for n := range changes {
			link := map[accounts.LinkKind]*string{st.unlink: nil}
			if n%2 == 1 {
				link[st.unlink] = &id
			}
			var err error
			for range maxSendAttempts {
				_, err = svc.Update(s.Invoke(ctx, resources.FunctionAPI), st.accounts[0].ID, accounts.UpdateInput{Links: link})
				if err == nil || ActorFrom(ctx).Dead() {
					break
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	}, func(error) { p.moved(s, st) })
}

// admit spawns an admission of account 0 that reads its allowance, as a hold does: the first
// of the cycle opens it, racing the events' grants on the cycle's rows.
func (p *Inbox) admit(s *Schedule, st *inboxState) {
	fn := s.Env.Holds()
	s.Count("admission")
	s.Spawn("admission", resources.FunctionHolds, func(ctx context.Context) error {
		for range maxSendAttempts {
			ictx := s.Invoke(ctx, resources.FunctionHolds)
			acct, err := fn.Accounts.Get(ictx, st.accounts[0].ID)
			if err == nil {
				_, err = fn.Allowances.Limit(ictx, acct, creditsFeature, acct.CycleAt(s.Env.Clock.Now()).Label())
			}
			if err == nil || ActorFrom(ctx).Dead() {
				return err
			}
		}
		return errors.New("the admission could not read the allowance")
	}, func(error) { p.moved(s, st) })
}

// sweep spawns one run of the sweep.
func (p *Inbox) sweep(s *Schedule, st *inboxState) {
	fn := s.Env.Function(resources.FunctionInboxSweep)
	st.sweeps++
	s.Spawn(fmt.Sprintf("inboxsweep %d", st.sweeps), resources.FunctionInboxSweep, func(ctx context.Context) error {
		return fn.Run(s.Invoke(ctx, resources.FunctionInboxSweep))
	}, func(error) { p.moved(s, st) })
}

// Idle implements Pipeline: once faults are over, the late deliveries go, unanswered ones are
// sent again, the clock moves to the next nudge that is due, and the sweep runs every minute
// until it finds nothing.
func (p *Inbox) Idle(ctx context.Context, s *Schedule) bool {
	st := s.State.(*inboxState)
	if st.idleRounds >= inboxIdleRounds {
		return false
	}
	st.idleRounds++
	if len(st.late) > 0 {
		late := st.late
		st.late = nil
		for _, d := range late {
			p.send(s, st, d)
		}
		return true
	}
	spawned := false
	for _, d := range st.sent {
		if !d.answered && !d.running && d.quietRounds < maxProviderRounds {
			d.quietRounds++
			s.Count("provider-retry")
			p.send(s, st, d)
			spawned = true
		}
	}
	if spawned {
		return true
	}
	if len(st.pending) > 0 {
		first := st.pending[0].dueAt
		for _, m := range st.pending {
			if m.dueAt.Before(first) {
				first = m.dueAt
			}
		}
		if wait := first.Sub(s.Env.Clock.Now()); wait > 0 {
			s.Env.Clock.Advance(wait)
			s.Note("clock +%s (the next nudge)", wait)
		}
		p.dispatch(s, st)
		return true
	}
	if st.lastSweeps >= inboxLastSweeps || (st.lastSweeps > 0 && !st.sweepNudged) {
		return false
	}
	st.lastSweeps++
	st.sweepNudged = false
	s.Env.Clock.Advance(sweepEvery)
	s.Note("clock +%s (the sweep)", sweepEvery)
	p.sweep(s, st)
	return true
}

// observe holds every committed write to a model: the queue's nudges become the harness's
// messages; the inbox's event items, the grant rows and the account changes are held to the
// record as it must be.
func (p *Inbox) observe(s *Schedule, st *inboxState) {
	logical := func(name *string) string { return s.Env.tables[aws.ToString(name)] }
	s.Observe(func(a *Actor, c Call, params any, committed bool) {
		if !committed {
			return
		}
		switch in := params.(type) {
		case *sqs.SendMessageInput:
			if c.Table == resources.QueueInbox {
				delay := time.Duration(in.DelaySeconds) * time.Second
				st.pending = append(st.pending, nudgeMsg{body: aws.ToString(in.MessageBody), dueAt: s.Env.Clock.Now().Add(delay)})
			}
		case *sqs.SendMessageBatchInput:
			if c.Table == resources.QueueInbox {
				for _, e := range in.Entries {
					st.pending = append(st.pending, nudgeMsg{body: aws.ToString(e.MessageBody), dueAt: s.Env.Clock.Now().Add(time.Duration(e.DelaySeconds) * time.Second)})
				}
				if a.Function == resources.FunctionInboxSweep {
					st.sweepNudged = true
				}
			}
		case *dynamodb.UpdateItemInput:
			if logical(in.TableName) == resources.TableInbox {
				p.eventWrite(s, st, a, nil, &types.Update{Key: in.Key, UpdateExpression: in.UpdateExpression,
					ConditionExpression: in.ConditionExpression, ExpressionAttributeValues: in.ExpressionAttributeValues})
			}
		case *dynamodb.TransactWriteItemsInput:
			for _, it := range in.TransactItems {
				switch {
				case it.Put != nil && logical(it.Put.TableName) == resources.TableInbox:
					p.eventWrite(s, st, a, it.Put, nil)
				case it.Update != nil && logical(it.Update.TableName) == resources.TableInbox:
					p.eventWrite(s, st, a, nil, it.Update)
				case it.Put != nil && logical(it.Put.TableName) == resources.TableGrants:
					key := dynamo.Str(it.Put.Item, "pk") + " " + dynamo.Str(it.Put.Item, "sk")
					if st.rows[key]++; st.rows[key] > 1 {
						s.Violate("inbox: the grant row %s was written %d times (the last by %s)", key, st.rows[key], a.Name)
					}
				case it.ConditionCheck != nil && logical(it.ConditionCheck.TableName) == resources.TableAccounts:
					p.linked(s, a, it.ConditionCheck.TableName, it.ConditionCheck.Key, it.ConditionCheck.ExpressionAttributeNames, it.ConditionCheck.ExpressionAttributeValues)
				case it.Update != nil && logical(it.Update.TableName) == resources.TableAccounts:
					p.linked(s, a, it.Update.TableName, it.Update.Key, it.Update.ExpressionAttributeNames, it.Update.ExpressionAttributeValues)
					acct := dynamo.Str(it.Update.Key, "id")
					for _, k := range []string{":planKey", ":statusKey"} {
						if v := dynamo.Str(it.Update.ExpressionAttributeValues, k); v != "" {
							key := acct + " " + k + " " + v
							if st.billing[key]++; st.billing[key] > 1 {
								s.Violate("inbox: the %s change %s of %s was applied %d times (the last by %s)", strings.TrimSuffix(k[1:], "Key"), v, acct, st.billing[key], a.Name)
							}
						}
					}
				}
			}
		}
	})
}

// linked holds a committed billing effect to the account's link as it is at the commit: the
// account must still be linked to the customer the event was resolved through. (Calls are
// released one at a time, so nothing has written since.)
func (p *Inbox) linked(s *Schedule, a *Actor, table *string, key map[string]types.AttributeValue, names map[string]string, values map[string]types.AttributeValue) {
	link := dynamo.Str(values, ":link")
	if link == "" {
		return
	}
	var field string
	for _, f := range []accounts.LinkKind{accounts.StripeCustomer, accounts.KindeCustomer, accounts.KindeAgreement} {
		for _, n := range names {
			if n == f.Field() {
				field = n
			}
		}
	}
	out, err := s.Env.Admin.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		s.Violate("harness: read the account after %s's commit: %v", a.Name, err)
		return
	}
	if got := dynamo.Str(out.Item, field); got != link {
		s.Violate("inbox: %s committed an effect on %s through %s %q, which the account is no longer linked to (it has %q)", a.Name, dynamo.Str(key, "id"), field, link, got)
	}
}

// transitionGuard is the inbox's named guard on a status transition, by which eventWrite knows
// one: the condition as the code asked for it (observers see it even when an ablation removes it
// at the wire).
var transitionGuard = func() dynamo.Guard {
	for _, g := range inbox.Guards {
		if g.Name == "inbox.transition.rev" {
			return g
		}
	}
	panic("harness: the inbox has no guard inbox.transition.rev")
}()

// eventWrite holds one committed write of an inbox item to the record's model: an event is
// inserted once; a copy counts only a stored event; every status transition moves the event
// from the revision it read.
func (p *Inbox) eventWrite(s *Schedule, st *inboxState, a *Actor, put *types.Put, u *types.Update) {
	if put != nil {
		if dynamo.Str(put.Item, "sk") != "event" {
			return
		}
		id := dynamo.Str(put.Item, "id")
		m := st.model[id]
		if m == nil {
			return
		}
		if m.exists {
			s.Violate("inbox: a delivery of %s by %s overwrote the stored event (at rev %d)", st.byStored[id], a.Name, m.rev)
		}
		m.exists, m.rev = true, dynamo.Int(put.Item, "rev")
		m.intake++
		return
	}
	pk, sk := dynamo.Str(u.Key, "pk"), dynamo.Str(u.Key, "sk")
	id, ok := strings.CutPrefix(pk, "ev#")
	m := st.model[id]
	if !ok || sk != "event" || m == nil {
		return
	}
	values := u.ExpressionAttributeValues
	switch {
	case strings.HasPrefix(aws.ToString(u.UpdateExpression), "ADD #seenCount"):
		if !m.exists {
			s.Violate("inbox: %s counted a copy of %s, which is not stored", a.Name, st.byStored[id])
		}
		m.intake++
	case strings.HasPrefix(aws.ToString(u.UpdateExpression), transitionGuard.UpdatePrefix) &&
		aws.ToString(u.ConditionExpression) == transitionGuard.Clause:
		read, next := dynamo.Int(values, ":rev"), dynamo.Int(values, ":v_rev")
		status := dynamo.Str(values, ":v_status")
		if !m.exists || read != m.rev {
			s.Violate("inbox: %s moved %s to %s from rev %d, which it had read; the event was at rev %d", a.Name, st.byStored[id], status, read, m.rev)
		}
		m.rev = next
		if status == string(inbox.Processing) {
			m.lastClaimFaulty = !s.Quiet()
		}
	}
}

// Check implements Pipeline.
func (p *Inbox) Check(ctx context.Context, s *Schedule) []string {
	st := s.State.(*inboxState)
	var v []string
	bad := func(format string, args ...any) { v = append(v, "inbox: "+fmt.Sprintf(format, args...)) }
	// The harness delivered every nudge from what was sent; the queue's copies (sent without
	// their delays, see undelayed) go, so that the next schedule starts on an empty queue.
	takeAll(ctx, s, resources.QueueInbox)
	for _, d := range st.sent {
		if !d.answered {
			bad("%s (copy %d) was never answered 200", d.ev, d.n)
		}
	}
	store := s.Env.Inbox().Store
	stored := map[string]inbox.Event{}
	for _, e := range st.events {
		got, err := store.Get(ctx, e.stored)
		if errors.Is(err, inbox.ErrNotFound) {
			bad("%s was delivered and is not stored", e)
			continue
		}
		if err != nil {
			bad("read %s: %v", e, err)
			continue
		}
		stored[e.stored] = got
		m := st.model[e.stored]
		if got.SeenCount != m.intake {
			bad("%s: seen count %d; %d deliveries were stored", e, got.SeenCount, m.intake)
		}
		receipts, err := store.Receipts(ctx, e.stored, 1000)
		if err != nil {
			bad("read the receipts of %s: %v", e, err)
		} else if len(receipts) != m.intake {
			bad("%s: %d receipts; %d deliveries were stored", e, len(receipts), m.intake)
		} else {
			first := 0
			for _, rc := range receipts {
				if !rc.Duplicate {
					first++
				}
			}
			if first != 1 {
				bad("%s: %d receipts say they stored the event; one did", e, first)
			}
		}
		if got.Rev != m.rev {
			bad("%s is at rev %d; its writes left it at %d", e, got.Rev, m.rev)
		}
		switch got.Status {
		case inbox.Applied:
			if got.Result == "" {
				bad("%s is APPLIED without a result", e)
			}
		case inbox.Ignored:
			if got.Reason == "" {
				bad("%s is IGNORED without a reason", e)
			}
		case inbox.Dead:
			if got.Attempts != inbox.MaxAttempts || !m.lastClaimFaulty || got.Reason == "" {
				bad("%s is DEAD (%d attempts, reason %q); only an event whose last of %d attempts was claimed while faults were on may be", e, got.Attempts, got.Reason, inbox.MaxAttempts)
			}
		default:
			bad("%s is left %s (%d attempts, reason %q)", e, got.Status, got.Attempts, got.Reason)
		}
		if e.account < 0 && got.Status != inbox.Ignored && got.Status != inbox.Dead {
			bad("%s names a customer no account is linked to, and is %s", e, got.Status)
		}
		if e.account >= 0 && got.Status == inbox.Applied && got.AccountID != st.accounts[e.account].ID {
			bad("%s is resolved to account %q; its customer is linked to %s", e, got.AccountID, st.accounts[e.account].ID)
		}
	}
	catalog := plans.Default()
	for i, acct := range st.accounts {
		v = append(v, p.checkAccount(ctx, s, st, i, acct, stored, catalog)...)
	}
	return v
}

// checkAccount holds one account to the model of its events.
func (p *Inbox) checkAccount(ctx context.Context, s *Schedule, st *inboxState, i int, acct accounts.Account, stored map[string]inbox.Event, catalog plans.Catalog) []string {
	var v []string
	bad := func(format string, args ...any) {
		v = append(v, fmt.Sprintf("inbox: %s: ", acct.ID)+fmt.Sprintf(format, args...))
	}
	var newestPlan, newestStatus *billingEvent
	allowed := map[string]bool{acct.Plan: true}
	required := map[string]bool{}
	grants := false
	labels, marks := map[string]bool{}, map[string]bool{}
	dead := false
	for _, e := range st.events {
		if e.account != i {
			continue
		}
		got, ok := stored[e.stored]
		if !ok {
			continue
		}
		if i == 0 && st.unlink != "" && linkOf(e.source) == st.unlink && got.Status != inbox.Applied {
			// Its customer was unlinked, perhaps before the event was decided: IGNORED then,
			// with no effect.
			continue
		}
		if got.Status == inbox.Dead {
			// Its effect may or may not be in: the model cannot say what the account holds.
			dead = true
		}
		want := map[inbox.Status]bool{}
		switch {
		case e.planTarget() != "":
			if newestPlan == nil || e.newer(newestPlan) {
				newestPlan = e
			}
			allowed[e.planTarget()], grants = true, true
			labels[acct.CycleAt(e.at).Label()] = true
		case e.kind == paidPlus:
			allowed["plus"], required["plus"], grants = true, true, true
			labels[acct.CycleAt(e.at).Label()] = true
			want[inbox.Applied] = true
		case e.kind == unknownPlan, e.kind == unhandledType:
			want[inbox.Ignored] = true
		case e.kind == meterUsage:
			want[inbox.Applied] = true
			marks[acct.CycleAt(e.at).Label()] = true
		}
		if e.statusTarget() != "" && (newestStatus == nil || e.newer(newestStatus)) {
			newestStatus = e
		}
		if len(want) > 0 && !want[got.Status] && got.Status != inbox.Dead {
			bad("%s is %s (%s%s)", e, got.Status, got.Reason, got.Result)
		}
	}
	for _, e := range []*billingEvent{newestPlan, newestStatus} {
		if got, ok := stored[e0(e)]; ok && e != nil && got.Status != inbox.Applied && got.Status != inbox.Dead {
			bad("%s is the newest of its kind and is %s (%s)", e, got.Status, got.Reason)
		}
	}
	if dead {
		return v
	}
	if len(marks) > 0 {
		list, _, err := s.Env.Inbox().MeterMarks.List(ctx, "", inbox.MaxPageSize)
		if err != nil {
			bad("list the meter marks: %v", err)
		}
		for _, m := range list {
			if m.AccountID == acct.ID && m.Feature == plans.FeatureEvents {
				delete(marks, m.Cycle)
			}
		}
		for label := range marks {
			bad("a meter change of %s was applied, and %s is not marked for the reconciler", label, plans.FeatureEvents)
		}
	}
	now, err := s.Env.API().Accounts.Get(ctx, acct.ID)
	if err != nil {
		bad("read the account: %v", err)
		return v
	}
	wantPlan, wantPlanAt := acct.Plan, int64(0)
	if newestPlan != nil {
		wantPlan, wantPlanAt = newestPlan.planTarget(), newestPlan.at.UnixMilli()
		required[wantPlan] = true
	}
	if now.Plan != wantPlan || now.PlanChangedAtMs != wantPlanAt {
		bad("plan %s (changed at %d); the newest plan change says %s (at %d)", now.Plan, now.PlanChangedAtMs, wantPlan, wantPlanAt)
	}
	wantStatus := acct.Status
	if newestStatus != nil {
		wantStatus = newestStatus.statusTarget()
	}
	if now.Status != wantStatus {
		bad("status %s; the newest status change says %s", now.Status, wantStatus)
	}
	// The allowance: rows only of plans the account was on or an event names, every payment's
	// plan and the plan the account ends on among them, each row topping the allowance up to its
	// plan's grant, so the total is the largest grant among the rows.
	grant := func(plan string) int64 {
		pl, _ := catalog.Plan(plan)
		return pl.Grant(creditsFeature)
	}
	fn := s.Env.Inbox()
	labels[acct.CycleAt(startTime).Label()] = true
	for label := range labels {
		c, err := fn.Allowances.Store.Read(ctx, acct.ID, creditsFeature, label)
		if err != nil {
			bad("read the grants of %s: %v", label, err)
			continue
		}
		var rows []string
		var most int64
		for _, g := range c.Grants {
			rows = append(rows, fmt.Sprintf("%s %d", g.Plan, g.Amount))
			most = max(most, grant(g.Plan))
			if !allowed[g.Plan] {
				bad("%s has a row for %s, which neither the account was on nor an event names", label, g.Plan)
			}
		}
		sort.Strings(rows)
		if !grants && !(i == 0 && st.admitted) {
			if len(c.Grants) > 0 {
				bad("%s has rows [%s], and no event grants", label, strings.Join(rows, ", "))
			}
			continue
		}
		for plan := range required {
			if !c.Has(plan) {
				bad("%s has rows [%s]; the %s row is missing", label, strings.Join(rows, ", "), plan)
			}
		}
		if c.Total() != most {
			bad("%s's allowance is %d (rows [%s]); a cycle's rows top it up to the largest grant among them, %d", label, c.Total(), strings.Join(rows, ", "), most)
		}
	}
	return v
}

// linkOf is the link a source's events are resolved through.
func linkOf(source inbox.Source) accounts.LinkKind {
	if source == inbox.Kinde {
		return accounts.KindeCustomer
	}
	return accounts.StripeCustomer
}

// e0 is the stored id of an event, or "" for none.
func e0(e *billingEvent) string {
	if e == nil {
		return ""
	}
	return e.stored
}
