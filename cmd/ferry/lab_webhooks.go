package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrymeter/ferry/internal/cycle"
	"github.com/ferrymeter/ferry/internal/inbox"
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
	labFreeGrant = 10
	labPlusGrant = 500
	// labSettleWait bounds how long the lab waits for one event to settle: past the dead
	// worker's 30 s lease and the nudge that follows it.
	labSettleWait = 2 * time.Minute
	labPollEvery  = 250 * time.Millisecond
)

// nineEvent is one of the scenario's three events.
type nineEvent struct {
	name  string
	typ   string
	id    string
	at    time.Time
	plan  string
	label string
}

// kindeStamp is a time as Kinde writes it: an offset and nanoseconds.
func kindeStamp(t time.Time) string {
	return t.In(time.FixedZone("", 11*3600)).Format("2006-01-02T15:04:05.000000000Z07:00")
}

// naiveState is the naive handler's account.
type naiveState struct {
	plan    string
	balance int64
	// paid records that the account was ever moved to a paid plan: the naive handler's test of
	// whether a payment earns the paid plan's allowance.
	paid bool
}

// naiveRules are the naive apply-on-arrival handler, stated as the lab prints them.
var naiveRules = []string{
	"every delivery is applied when it arrives: no dedupe, no event-time order, no transaction;",
	"a plan change writes the plan, then (a second write) adds the plan's allowance over free's (+490 for plus);",
	"a worker that stops between the two writes loses the second one (delivery 2);",
	"a cancellation writes the plan back to free;",
	"a payment adds the paid plan's allowance over free's (+490) once the account has been moved to a paid plan.",
}

// naiveApply runs one delivery through the naive handler; crash stops it after its first write.
func naiveApply(s *naiveState, e nineEvent, crash bool) {
	topUp := int64(labPlusGrant - labFreeGrant)
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

// labEvent is a stored billing event as GET /v1/billing-events/{id} shows it.
type labEvent struct {
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

func (c *labClient) billingEvent(ctx context.Context, id string) (labEvent, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/billing-events/"+id, nil)
	if err != nil {
		return labEvent{}, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.adminKey)
	resp, err := c.http.Do(req)
	if err != nil {
		return labEvent{}, 0, err
	}
	defer resp.Body.Close()
	var e labEvent
	if resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(&e)
	}
	return e, resp.StatusCode, err
}

// waitFor polls an event until ok says it is where the step needs it, or labSettleWait passes.
func (c *labClient) waitFor(ctx context.Context, stderr io.Writer, id, what string, ok func(labEvent) bool) (labEvent, error) {
	deadline := time.Now().Add(labSettleWait)
	announced := false
	began := time.Now()
	for {
		e, status, err := c.billingEvent(ctx, id)
		if err != nil {
			return e, err
		}
		if status == http.StatusOK && ok(e) {
			if announced {
				fmt.Fprintf(stderr, " done (%.0f s)\n", time.Since(began).Seconds())
			}
			return e, nil
		}
		if time.Now().After(deadline) {
			return e, fmt.Errorf("event %s did not %s within %s (it is %s)", id, what, labSettleWait, e.Status)
		}
		if !announced && time.Since(began) > 2*time.Second {
			fmt.Fprintf(stderr, "  waiting for %s to %s…", id, what)
			announced = true
		}
		select {
		case <-ctx.Done():
			return e, ctx.Err()
		case <-time.After(labPollEvery):
		}
	}
}

func final(e labEvent) bool {
	return e.Status == string(inbox.Applied) || e.Status == string(inbox.Ignored) || e.Status == string(inbox.Dead)
}

func runWebhooksNine(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, url := labFlags("webhooks-nine", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := newLabClient(*url, 1)
	hooks := newWebhookClient(*url)
	info, err := hooks.devInfo(ctx)
	if err != nil {
		return fmt.Errorf("the lab signs Kinde deliveries with ferry dev's local signer: %w", err)
	}
	if info.Kinde == nil || !info.CrashInjector {
		return errors.New("the lab needs ferry dev's local Kinde signer and its crash injector (start ferry dev without FERRY_KINDE_WEBHOOK_JWKS_URL)")
	}

	suffix := randomID("")[:8]
	accountID, customer := "lab-nine-"+suffix, "customer_lab_"+suffix
	a, err := c.do(ctx, http.MethodPost, "/v1/accounts", c.adminKey, map[string]any{"id": accountID, "plan": "free", "kindeCustomerId": customer})
	if err != nil {
		return fmt.Errorf("create the lab account at %s (is ferry dev running?): %w", c.base, err)
	}
	if a.status != http.StatusCreated {
		return fmt.Errorf("create the lab account: %d %s (is FERRY_ADMIN_KEY the operator key?)", a.status, a.str("detail"))
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

	fmt.Fprintf(stdout, "Nine Kinde deliveries of three events to account %s (Kinde customer %s):\n", accountID, customer)
	fmt.Fprintf(stdout, "  PC  customer.plan_changed to customer_pro_plan   at %s (T+3 min)\n", kindeStamp(pc.at))
	fmt.Fprintf(stdout, "  PAY customer.payment_succeeded for that plan     at %s (T+3 min 10 s)\n", kindeStamp(pay.at))
	fmt.Fprintf(stdout, "  CAN customer.agreement_cancelled (older than PC) at %s (T)\n", kindeStamp(can.at))
	fmt.Fprintln(stdout, "  order: 1 PAY, 2 PC (the worker is killed after deciding, before its commit), 3 PC, 4 PAY, 5 PAY, 6 PAY, 7 CAN, 8 PAY, 9 PC")
	fmt.Fprintln(stdout)

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
	naive := naiveState{plan: "free", balance: labFreeGrant}
	var naiveAfter2, naiveAfter7 naiveState
	var ferryPlan2, ferryPlan7 string
	var ferryCredits2, ferryCredits7 int64
	seen := map[string]bool{}
	for i, e := range nine {
		n := i + 1
		if n == 2 {
			status, body, err := hooks.post(ctx, devCrashPath, []byte(`{"event":"`+e.label+`"}`), map[string]string{"Content-Type": "application/json"})
			if err != nil || status != http.StatusNoContent {
				return fmt.Errorf("arm the crash of delivery 2: %v %d %s", err, status, body)
			}
		}
		claims := kindeClaims(e.typ, e.id, e.at, time.Now(), customer, e.plan, nil)
		claims["event_timestamp"], claims["timestamp"] = kindeStamp(e.at), kindeStamp(time.Now())
		token, err := hooks.sign(ctx, info.Kinde.Signer, claims)
		if err != nil {
			return err
		}
		status, body, err := hooks.post(ctx, "/v1/webhooks/kinde", []byte(token), map[string]string{"Content-Type": "application/jwt", "webhook-id": "msg_" + e.id})
		if err != nil {
			return err
		}
		var stored struct {
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &stored) != nil || stored.ID != e.label || stored.Duplicate != seen[e.id] {
			return fmt.Errorf("delivery %d (%s): %d %s; want 200 with id %s and duplicate %v", n, e.name, status, body, e.label, seen[e.id])
		}
		seen[e.id] = true
		naiveApply(&naive, e, n == 2)
		fmt.Fprintf(stdout, "  delivery %d %-3s -> 200 %s\n", n, e.name, strings.TrimSpace(string(body)))
		switch n {
		case 1:
			if _, err := c.waitFor(ctx, stderr, pay.label, "be applied", final); err != nil {
				return err
			}
		case 2:
			naiveAfter2 = naive
			// The worker claims the plan change and is killed before its commit: the event stays
			// PROCESSING under the dead worker's lease, and nothing of its effect is durable.
			if _, err := c.waitFor(ctx, stderr, pc.label, "be claimed by the worker that dies", func(e labEvent) bool {
				return e.Status == string(inbox.Processing) || final(e)
			}); err != nil {
				return err
			}
			if ferryPlan2, ferryCredits2, err = standing(); err != nil {
				return err
			}
		case 3:
			// The copy finds the event stored; once the dead worker's lease lapses the worker
			// claims it again and runs it to the end.
			if _, err := c.waitFor(ctx, stderr, pc.label, "be applied once the dead worker's 30 s lease lapses", final); err != nil {
				return err
			}
		case 7:
			naiveAfter7 = naive
			if _, err := c.waitFor(ctx, stderr, can.label, "be decided", final); err != nil {
				return err
			}
			if ferryPlan7, ferryCredits7, err = standing(); err != nil {
				return err
			}
		}
	}

	// Ferry's figures, as the API shows them.
	events := map[string]labEvent{}
	receipts := 0
	for _, e := range []nineEvent{pc, pay, can} {
		got, err := c.waitFor(ctx, stderr, e.label, "settle", final)
		if err != nil {
			return err
		}
		events[e.name] = got
		receipts += len(got.Receipts)
	}
	counts := []int{events["PC"].SeenCount, events["PAY"].SeenCount, events["CAN"].SeenCount}
	sort.Sort(sort.Reverse(sort.IntSlice(counts)))
	seenText := fmt.Sprintf("%d, %d, %d", counts[0], counts[1], counts[2])
	acct, err := c.do(ctx, http.MethodGet, "/v1/accounts/"+accountID, c.adminKey, nil)
	if err != nil {
		return err
	}
	usage, err := c.do(ctx, http.MethodGet, "/v1/usage?feature=credits&cycle="+cycleLabel, apiKey, nil)
	if err != nil {
		return err
	}
	if usage.status != http.StatusOK {
		return fmt.Errorf("GET /v1/usage?feature=credits: %d %s", usage.status, usage.str("detail"))
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

	tw := tabwriter.NewWriter(stdout, 0, 0, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintln(stdout)
	fmt.Fprintln(tw, "\tseed (Bottle)\tFerry\tseed: naive\tnaive, this run\t")
	fmt.Fprintf(tw, "deliveries (receipts)\t%d\t%d\t%d\t%d\t\n", seedNineDeliveries, receipts, seedNineDeliveries, len(nine))
	fmt.Fprintf(tw, "events stored\t%d\t%d\t–\t–\t\n", seedNineStored, len(events))
	fmt.Fprintf(tw, "seen counts\t%s\t%s\t–\t–\t\n", seedNineSeen, seenText)
	fmt.Fprintf(tw, "plan changes stopped half way\t%d\t%d\t1\t1\t\n", seedNineStopped, stopped)
	fmt.Fprintf(tw, "plan after delivery 2\t–\t%s\tPro\t%s\t\n", ferryPlan2, naiveAfter2.plan)
	fmt.Fprintf(tw, "credits after delivery 2\t–\t%s\t10\t%s\t\n", thousands(ferryCredits2), thousands(naiveAfter2.balance))
	fmt.Fprintf(tw, "plan after delivery 7\t–\t%s\tFree\t%s\t\n", ferryPlan7, naiveAfter7.plan)
	fmt.Fprintf(tw, "credits after delivery 7\t–\t%s\t–\t%s\t\n", thousands(ferryCredits7), thousands(naiveAfter7.balance))
	fmt.Fprintf(tw, "plan at the end\tPro\t%s\tPro\t%s\t\n", acct.str("plan"), naive.plan)
	fmt.Fprintf(tw, "credits at the end\t%s\t%s\t%s\t%s\t\n", thousands(seedNineBalance), thousands(usage.num("limit")), thousands(seedNineNaiveBalance), thousands(naive.balance))
	fmt.Fprintf(tw, "allowance grants\tonce\t%s\t–\t%d\t\n", grantText, (naive.balance-labFreeGrant)/(labPlusGrant-labFreeGrant))
	fmt.Fprintf(tw, "the old cancellation\tignored\t%s\twon\tapplied\t\n", strings.ToLower(events["CAN"].Status))
	_ = tw.Flush()
	fmt.Fprintf(stdout, "\nFerry's cancellation: %s (%q).\n", events["CAN"].Status, events["CAN"].Reason)
	fmt.Fprintf(stdout, "Ferry's plan change: %s after %d attempts (%s).\n", events["PC"].Status, events["PC"].Attempts, events["PC"].Result)
	fmt.Fprintln(stdout, "\nThe naive handler, on the same nine deliveries:")
	for _, r := range naiveRules {
		fmt.Fprintln(stdout, "  - "+r)
	}
	fmt.Fprintf(stdout, "It ends on %s with %s credits: %s over the plan's %s, with no record of how.\n",
		naive.plan, thousands(naive.balance), thousands(naive.balance-labPlusGrant), thousands(labPlusGrant))
	fmt.Fprintln(stdout, "The seed's figures come from its own run (Bottle, Postgres); Ferry's from the stack at "+c.base+".")
	fmt.Fprintf(stdout, "Account %s, API key %s (GET /v1/usage?feature=credits, GET /v1/billing-events).\n", accountID, apiKey)

	var problems []string
	if receipts != seedNineDeliveries || len(events) != seedNineStored || seenText != seedNineSeen {
		problems = append(problems, fmt.Sprintf("%d receipts, %d events seen %s; expected 9, 3 seen 5, 3, 1", receipts, len(events), seenText))
	}
	if acct.str("plan") != "plus" || usage.num("limit") != seedNineBalance || grantText != "free 10 + plus 490" {
		problems = append(problems, fmt.Sprintf("plan %s, credits limit %d, grants %q; expected plus, 500, free 10 + plus 490",
			acct.str("plan"), usage.num("limit"), grantText))
	}
	if events["CAN"].Status != string(inbox.Ignored) || events["CAN"].Reason != inbox.ReasonNewerPlan {
		problems = append(problems, fmt.Sprintf("the cancellation is %s (%q); expected IGNORED: %s", events["CAN"].Status, events["CAN"].Reason, inbox.ReasonNewerPlan))
	}
	if events["PC"].Status != string(inbox.Applied) || events["PAY"].Status != string(inbox.Applied) || stopped != 1 {
		problems = append(problems, fmt.Sprintf("the plan change is %s after %d attempts, the payment %s; expected both APPLIED, the plan change on its second attempt",
			events["PC"].Status, events["PC"].Attempts, events["PAY"].Status))
	}
	if naive.balance == seedNineBalance {
		problems = append(problems, "the naive handler ended right, so the lab shows nothing")
	}
	return labVerdict(stdout, problems, nil)
}
