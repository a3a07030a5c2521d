package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/operator/deliver"
	"github.com/ferrymeter/ferry/internal/operator/figures"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// Figures of the seed's nine deliveries (Bottle): its pipeline's outcome and its naive
// apply-on-arrival handler's.
const (
	seedNineDeliveries   = 9
	seedNineStored       = 3
	seedNineSeen         = "5, 3, 1"
	seedNineStopped      = 1
	seedNineBalance      = 500
	seedNineNaiveBalance = 2_950
	// Free's and plus's grant of the allowance the lab reads (the default catalog's credits).
	nineFreeGrant = 10
	ninePlusGrant = 500
	// nineSettleWait bounds how long the lab waits for one event to settle: past the dead
	// worker's 30 s lease and the nudge that follows it.
	nineSettleWait = 2 * time.Minute
	ninePollEvery  = 250 * time.Millisecond
	// nineGrants is the grant rows the seed's outcome comes to.
	nineGrants = "free 10 + plus 490"
)

// nineNotes say what each delivery of the nine is, by its number.
var nineNotes = map[int]string{
	1: "the payment arrives before the plan change it paid for",
	2: "the plan change; Ferry's worker is killed after deciding, before its transaction commits",
	3: "a copy of the plan change; once the dead worker's 30 s lease lapses, the worker runs it to the end",
	4: "a copy of the payment: counted, not applied again",
	5: "a copy of the payment: counted, not applied again",
	6: "a copy of the payment: counted, not applied again",
	7: "the cancellation, three minutes older than the plan change, arrives late",
	8: "a copy of the payment: counted, not applied again",
	9: "a copy of the plan change: counted, not applied again",
}

// nineEvent is one of the scenario's three events.
type nineEvent struct {
	name  string
	typ   string
	id    string
	at    time.Time
	plan  string
	label string
}

// naiveState is the naive handler's account.
type naiveState struct {
	plan    string
	balance int64
	// paid records that the account was ever moved to a paid plan: the naive handler's test of
	// whether a payment earns the paid plan's allowance.
	paid bool
}

// NaiveRules are the naive apply-on-arrival handler the webhooks lab sets beside Ferry.
var NaiveRules = []string{
	"every delivery is applied when it arrives: no dedupe, no event-time order, no transaction;",
	"a plan change writes the plan, then (a second write) adds the plan's allowance over free's (+490 for plus);",
	"a worker that stops between the two writes loses the second one (delivery 2);",
	"a cancellation writes the plan back to free;",
	"a payment adds the paid plan's allowance over free's (+490) once the account has been moved to a paid plan.",
}

// naiveApply runs one delivery through the naive handler; crash stops it after its first write.
func naiveApply(s *naiveState, e nineEvent, crash bool) {
	topUp := int64(ninePlusGrant - nineFreeGrant)
	switch e.name {
	case "PC":
		s.plan, s.paid = "plus", true
		if crash {
			return
		}
		s.balance += topUp
	case "CAN":
		s.plan = "free"
	case "PAY":
		if s.paid {
			s.balance += topUp
		}
	}
}

// billingEvent is a stored billing event as GET /v1/billing-events/{id} shows it.
type billingEvent struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Status    string `json:"status"`
	SeenCount int    `json:"seenCount"`
	Attempts  int    `json:"attempts"`
	Result    string `json:"result"`
	Reason    string `json:"reason"`
	Receipts  []struct {
		Duplicate bool `json:"duplicate"`
	} `json:"receipts"`
}

func (c *labClient) billingEvent(ctx context.Context, id string) (billingEvent, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/billing-events/"+id, nil)
	if err != nil {
		return billingEvent{}, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.adminKey)
	resp, err := c.http.Do(req)
	if err != nil {
		return billingEvent{}, 0, err
	}
	defer resp.Body.Close()
	var e billingEvent
	if resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e)
	}
	return e, resp.StatusCode, err
}

// waitFor polls an event until ok says it is where the step needs it, or nineSettleWait passes.
func (c *labClient) waitFor(ctx context.Context, progress io.Writer, id, what string, ok func(billingEvent) bool) (billingEvent, error) {
	deadline := time.Now().Add(nineSettleWait)
	announced := false
	began := time.Now()
	for {
		e, status, err := c.billingEvent(ctx, id)
		if err != nil {
			return e, err
		}
		if status == http.StatusOK && ok(e) {
			if announced {
				fmt.Fprintf(progress, " done (%.0f s)\n", time.Since(began).Seconds())
			}
			return e, nil
		}
		if time.Now().After(deadline) {
			return e, fmt.Errorf("event %s did not %s within %s (it is %s)", id, what, nineSettleWait, e.Status)
		}
		if !announced && time.Since(began) > 2*time.Second {
			fmt.Fprintf(progress, "  waiting for %s to %s…", id, what)
			announced = true
		}
		select {
		case <-ctx.Done():
			return e, ctx.Err()
		case <-time.After(ninePollEvery):
		}
	}
}

func settled(e billingEvent) bool {
	return e.Status == string(inbox.Applied) || e.Status == string(inbox.Ignored) || e.Status == string(inbox.Dead)
}

// WebhooksNine is the seed's reference scenario 3 (Bottle): nine Kinde deliveries of three
// events — a plan change, its payment and an older cancellation — with copies, late arrivals and
// a worker killed half way through the plan change, against a fresh account. It needs ferry dev:
// its local Kinde signer signs the deliveries and its crash injector kills delivery 2's apply
// after the effect is decided and before its transaction commits. The result sets Ferry's
// figures beside the seed's and beside a naive apply-on-arrival handler's (NaiveRules) on the
// same nine deliveries.
func WebhooksNine(ctx context.Context, cfg Config) (Result, error) {
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	c := newLabClient(cfg, 1)
	hooks := deliver.NewClient(cfg.BaseURL, requestTimeout)
	info, err := hooks.DevInfo(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("%w: it signs Kinde deliveries with ferry dev's local signer, and %s has none (%v)", ErrNeedsDev, cfg.BaseURL, err)
	}
	if info.Kinde == nil || !info.CrashInjector {
		return Result{}, fmt.Errorf("%w: its local Kinde signer and its crash injector (start ferry dev without FERRY_KINDE_WEBHOOK_JWKS_URL)", ErrNeedsDev)
	}

	suffix := deliver.RandomID("")[:8]
	accountID, customer := "lab-nine-"+suffix, "customer_lab_"+suffix
	a, err := c.do(ctx, http.MethodPost, "/v1/accounts", c.adminKey, map[string]any{"id": accountID, "plan": "free", "kindeCustomerId": customer})
	if err != nil {
		return Result{}, fmt.Errorf("create the lab account at %s (is ferry dev running?): %w", c.base, err)
	}
	if a.status != http.StatusCreated {
		return Result{}, fmt.Errorf("create the lab account: %d %s (is FERRY_ADMIN_KEY the operator key?)", a.status, a.str("detail"))
	}
	apiKey := a.str("apiKey")

	t := time.Now().Add(-10 * time.Minute).Truncate(time.Microsecond)
	mk := func(name, typ string, at time.Time, plan string) nineEvent {
		id := "event_" + strings.ToLower(name) + "_" + suffix
		return nineEvent{name: name, typ: typ, id: id, at: at, plan: plan, label: inbox.ID(inbox.Kinde, id)}
	}
	pc := mk("PC", "customer.plan_changed", t.Add(3*time.Minute), "customer_pro_plan")
	pay := mk("PAY", "customer.payment_succeeded", t.Add(3*time.Minute+10*time.Second), "customer_pro_plan")
	can := mk("CAN", "customer.agreement_cancelled", t, "")
	nine := []nineEvent{pay, pc, pc, pay, pay, pay, can, pay, pc}

	intro := []string{
		fmt.Sprintf("Nine Kinde deliveries of three events to account %s (Kinde customer %s):", accountID, customer),
		fmt.Sprintf("  PC  customer.plan_changed to customer_pro_plan   at %s (T+3 min)", deliver.KindeStamp(pc.at)),
		fmt.Sprintf("  PAY customer.payment_succeeded for that plan     at %s (T+3 min 10 s)", deliver.KindeStamp(pay.at)),
		fmt.Sprintf("  CAN customer.agreement_cancelled (older than PC) at %s (T)", deliver.KindeStamp(can.at)),
		"  order: 1 PAY, 2 PC (the worker is killed after deciding, before its commit), 3 PC, 4 PAY, 5 PAY, 6 PAY, 7 CAN, 8 PAY, 9 PC",
		"",
	}

	cycleLabel := cycle.At(pc.at, 0).Label()
	// standing reads Ferry's plan and credits limit for the checkpoints the seed reports.
	standing := func() (string, int64, error) {
		acct, err := c.do(ctx, http.MethodGet, "/v1/accounts/"+accountID, c.adminKey, nil)
		if err != nil {
			return "", 0, err
		}
		usage, err := c.do(ctx, http.MethodGet, "/v1/usage?feature=credits&cycle="+cycleLabel, apiKey, nil)
		if err != nil {
			return "", 0, err
		}
		return acct.str("plan"), usage.num("limit"), nil
	}
	naive := naiveState{plan: "free", balance: nineFreeGrant}
	var naiveAfter2, naiveAfter7 naiveState
	var ferryPlan2, ferryPlan7 string
	var ferryCredits2, ferryCredits7 int64
	seen := map[string]bool{}
	var steps []Step
	for i, e := range nine {
		n := i + 1
		if n == 2 {
			status, body, err := hooks.Post(ctx, deliver.DevCrashPath, []byte(`{"event":"`+e.label+`"}`), map[string]string{"Content-Type": "application/json"})
			if err != nil || status != http.StatusNoContent {
				return Result{}, fmt.Errorf("arm the crash of delivery 2: %v %d %s", err, status, body)
			}
		}
		token, err := hooks.Sign(ctx, info.Kinde.Signer, deliver.KindeClaims(e.typ, e.id, e.at, time.Now(), customer, e.plan, nil))
		if err != nil {
			return Result{}, err
		}
		status, body, err := hooks.PostKinde(ctx, token, "msg_"+e.id)
		if err != nil {
			return Result{}, err
		}
		var stored struct {
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &stored) != nil || stored.ID != e.label || stored.Duplicate != seen[e.id] {
			return Result{}, fmt.Errorf("delivery %d (%s): %d %s; want 200 with id %s and duplicate %v", n, e.name, status, body, e.label, seen[e.id])
		}
		duplicate := seen[e.id]
		seen[e.id] = true
		naiveApply(&naive, e, n == 2)
		intro = append(intro, fmt.Sprintf("  delivery %d %-3s -> 200 %s", n, e.name, strings.TrimSpace(string(body))))
		switch n {
		case 1:
			if _, err := c.waitFor(ctx, progress, pay.label, "be applied", settled); err != nil {
				return Result{}, err
			}
		case 2:
			naiveAfter2 = naive
			// The worker claims the plan change and is killed before its commit: the event stays
			// PROCESSING under the dead worker's lease, and nothing of its effect is durable.
			if _, err := c.waitFor(ctx, progress, pc.label, "be claimed by the worker that dies", func(e billingEvent) bool {
				return e.Status == string(inbox.Processing) || settled(e)
			}); err != nil {
				return Result{}, err
			}
			if ferryPlan2, ferryCredits2, err = standing(); err != nil {
				return Result{}, err
			}
		case 3:
			// The copy finds the event stored; once the dead worker's lease lapses the worker
			// claims it again and runs it to the end.
			if _, err := c.waitFor(ctx, progress, pc.label, "be applied once the dead worker's 30 s lease lapses", settled); err != nil {
				return Result{}, err
			}
		case 7:
			naiveAfter7 = naive
			if _, err := c.waitFor(ctx, progress, can.label, "be decided", settled); err != nil {
				return Result{}, err
			}
			if ferryPlan7, ferryCredits7, err = standing(); err != nil {
				return Result{}, err
			}
		}
		// The step as the Engine Room shows it: Ferry's account once its worker has done what
		// it does with this delivery (the waits above), beside the naive handler's.
		plan, credits, err := standing()
		if err != nil {
			return Result{}, err
		}
		now, _, err := c.billingEvent(ctx, e.label)
		if err != nil {
			return Result{}, err
		}
		steps = append(steps, Step{
			N: n, Event: e.name, Type: e.typ, BillingEventID: e.label, Duplicate: duplicate, Note: nineNotes[n],
			Ferry: Standing{Plan: plan, Credits: credits}, Naive: Standing{Plan: naive.plan, Credits: naive.balance},
			Status: now.Status,
		})
	}

	// Ferry's figures, as the API shows them.
	events := map[string]billingEvent{}
	receipts := 0
	for _, e := range []nineEvent{pc, pay, can} {
		got, err := c.waitFor(ctx, progress, e.label, "settle", settled)
		if err != nil {
			return Result{}, err
		}
		events[e.name] = got
		receipts += len(got.Receipts)
	}
	counts := []int{events["PC"].SeenCount, events["PAY"].SeenCount, events["CAN"].SeenCount}
	sort.Sort(sort.Reverse(sort.IntSlice(counts)))
	seenText := fmt.Sprintf("%d, %d, %d", counts[0], counts[1], counts[2])
	acct, err := c.do(ctx, http.MethodGet, "/v1/accounts/"+accountID, c.adminKey, nil)
	if err != nil {
		return Result{}, err
	}
	usage, err := c.do(ctx, http.MethodGet, "/v1/usage?feature=credits&cycle="+cycleLabel, apiKey, nil)
	if err != nil {
		return Result{}, err
	}
	if usage.status != http.StatusOK {
		return Result{}, fmt.Errorf("GET /v1/usage?feature=credits: %d %s", usage.status, usage.str("detail"))
	}
	var rows []string
	grants, _ := usage.body["grants"].([]any)
	for _, g := range grants {
		row, _ := g.(map[string]any)
		rows = append(rows, fmt.Sprintf("%s %v", row["plan"], row["amount"]))
	}
	grantText := strings.Join(rows, " + ")
	stopped := 0
	if events["PC"].Attempts >= 2 {
		stopped = 1
	}

	k := figures.Thousands
	itoa := strconv.Itoa
	res := Result{
		Lab: "webhooks-nine", AccountID: accountID, APIKey: apiKey, Intro: strings.Join(intro, "\n"),
		Columns: []string{"seed (Bottle)", "Ferry", "seed: naive", "naive, this run"},
		Steps:   steps,
	}
	add := func(name, seed, ferry, seedNaive, naiveRun string) {
		res.Rows = append(res.Rows, Row{Name: name, Seed: seed, Ferry: ferry})
		res.More = append(res.More, []string{seedNaive, naiveRun})
	}
	add("deliveries (receipts)", itoa(seedNineDeliveries), itoa(receipts), itoa(seedNineDeliveries), itoa(len(nine)))
	add("events stored", itoa(seedNineStored), itoa(len(events)), "–", "–")
	add("seen counts", seedNineSeen, seenText, "–", "–")
	add("plan changes stopped half way", itoa(seedNineStopped), itoa(stopped), "1", "1")
	add("plan after delivery 2", "–", ferryPlan2, "Pro", naiveAfter2.plan)
	add("credits after delivery 2", "–", k(ferryCredits2), "10", k(naiveAfter2.balance))
	add("plan after delivery 7", "–", ferryPlan7, "Free", naiveAfter7.plan)
	add("credits after delivery 7", "–", k(ferryCredits7), "–", k(naiveAfter7.balance))
	add("plan at the end", "Pro", acct.str("plan"), "Pro", naive.plan)
	add("credits at the end", k(seedNineBalance), k(usage.num("limit")), k(seedNineNaiveBalance), k(naive.balance))
	add("allowance grants", "once", grantText, "–", itoa(int((naive.balance-nineFreeGrant)/(ninePlusGrant-nineFreeGrant))))
	add("the old cancellation", "ignored", strings.ToLower(events["CAN"].Status), "won", "applied")

	res.Notes = []string{
		fmt.Sprintf("\nFerry's cancellation: %s (%q).", events["CAN"].Status, events["CAN"].Reason),
		fmt.Sprintf("Ferry's plan change: %s after %d attempts (%s).", events["PC"].Status, events["PC"].Attempts, events["PC"].Result),
		"\nThe naive handler, on the same nine deliveries:",
	}
	for _, r := range NaiveRules {
		res.Notes = append(res.Notes, "  - "+r)
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("It ends on %s with %s credits: %s over the plan's %s, with no record of how.",
			naive.plan, k(naive.balance), k(naive.balance-ninePlusGrant), k(ninePlusGrant)),
		"The seed's figures come from its own run (Bottle, Postgres); Ferry's from the stack at "+c.base+".",
		fmt.Sprintf("Account %s, API key %s (GET /v1/usage?feature=credits, GET /v1/billing-events).", accountID, apiKey),
	)

	if receipts != seedNineDeliveries || len(events) != seedNineStored || seenText != seedNineSeen {
		res.Problems = append(res.Problems, fmt.Sprintf("%d receipts, %d events seen %s; expected 9, 3 seen 5, 3, 1", receipts, len(events), seenText))
	}
	if acct.str("plan") != "plus" || usage.num("limit") != seedNineBalance || grantText != nineGrants {
		res.Problems = append(res.Problems, fmt.Sprintf("plan %s, credits limit %d, grants %q; expected plus, 500, %s",
			acct.str("plan"), usage.num("limit"), grantText, nineGrants))
	}
	if events["CAN"].Status != string(inbox.Ignored) || events["CAN"].Reason != inbox.ReasonNewerPlan {
		res.Problems = append(res.Problems, fmt.Sprintf("the cancellation is %s (%q); expected IGNORED: %s", events["CAN"].Status, events["CAN"].Reason, inbox.ReasonNewerPlan))
	}
	if events["PC"].Status != string(inbox.Applied) || events["PAY"].Status != string(inbox.Applied) || stopped != 1 {
		res.Problems = append(res.Problems, fmt.Sprintf("the plan change is %s after %d attempts, the payment %s; expected both APPLIED, the plan change on its second attempt",
			events["PC"].Status, events["PC"].Attempts, events["PAY"].Status))
	}
	if naive.balance == seedNineBalance {
		res.Problems = append(res.Problems, "the naive handler ended right, so the lab shows nothing")
	}
	return res, nil
}
