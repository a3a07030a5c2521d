package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ferrymeter/ferry/internal/operator/figures"
)

// Figures of the Notch write-up's two runs against a live Kinde account: a match at 6,048 with
// no corrections, then a ledger at 8,457 against a meter at 8,031 (late usage after the last
// report), repaired to 8,457 with an absolute write, read back, and matched on the next run
// without a new evidence row.
const (
	notchFirstMatch = 6_048
	notchMeter      = 8_031
	notchLedger     = 8_457
	notchCause      = "The ledger changed after the last report: a late event or a correction arrived."
)

// Bounds of the reconcile lab.
const (
	// reportWait bounds how long the lab waits for a report to reach the meter (a Kinde pause a
	// previous run left lasts a minute).
	reportWait = 3 * time.Minute
	// reportPoll is the wait between two runs of the reporter while the lab waits.
	reportPoll = 2 * time.Second
	// pauseSeconds is the RateLimit-Reset of the 429 the lab has the Kinde stand-in answer, so
	// that the late usage stays unreported until the reconciler runs.
	pauseSeconds = 60
	// kindeStandIn is where ferry dev serves its Kinde stand-in.
	kindeStandIn = "/standin/kinde"
	// labFeature is the lab's usage: tokens spent by jobs, each a settled hold (a ledger row).
	labFeature = "tokens"
)

// Reconcile runs the reference scenario of reporting and reconciliation (DESIGN §3 scenario 5)
// against ferry dev: a plus account linked to a Kinde agreement spends tokens; the reporter sends
// Kinde the absolute total and the reconciler proves a match at 6,048; more usage brings the
// meter to 8,031; then a 429 from Kinde (its stand-in, told to answer one) keeps 426 late units
// from being reported, and the reconciler finds the ledger at 8,457 under a meter at 8,031, says
// under_billed, repairs to 8,457, reads it back and stores the evidence; the next run matches at
// 8,457 and adds no evidence row. It needs ferry dev's Kinde stand-in (at /standin/kinde).
func Reconcile(ctx context.Context, cfg Config) (Result, error) {
	c := newLabClient(cfg, 4)
	res := Result{Lab: "reconcile", Columns: []string{"seed (Notch)", "Ferry"}}
	if a, err := c.do(ctx, http.MethodGet, kindeStandIn+"/standin/meter-usage/probe/"+labFeature, "", nil); err != nil || a.status != http.StatusOK {
		return res, fmt.Errorf("%w: it steers ferry dev's Kinde stand-in at %s%s, which does not answer (%v): run it against ferry dev (make run) with no provider configured", ErrNeedsDev, c.base, kindeStandIn, err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	id, agreement := "lab-notch-"+suffix, "agreement_lab_"+suffix
	a, err := c.do(ctx, http.MethodPost, "/v1/accounts", c.adminKey, map[string]any{"id": id, "plan": "plus", "kindeAgreementId": agreement})
	if err != nil {
		return res, fmt.Errorf("create the lab account at %s (is ferry dev running?): %w", c.base, err)
	}
	if a.status != http.StatusCreated {
		return res, fmt.Errorf("create the lab account: %d %s (is FERRY_ADMIN_KEY the operator key?)", a.status, a.str("detail"))
	}
	res.AccountID, res.APIKey = id, a.str("apiKey")
	res.Intro = fmt.Sprintf("A plus account (%s) linked to Kinde agreement %s spends tokens; the reporter sends Kinde absolute totals and the reconciler proves them.", id, agreement)
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	meter := func() (int64, error) {
		a, err := c.do(ctx, http.MethodGet, kindeStandIn+"/standin/meter-usage/"+agreement+"/"+labFeature, "", nil)
		if err != nil {
			return 0, err
		}
		return a.num("total"), nil
	}
	// reportUntil runs the reporter until Kinde holds want.
	reportUntil := func(want int64) error {
		deadline := time.Now().Add(reportWait)
		for {
			if _, err := c.do(ctx, http.MethodPost, "/v1/report", c.adminKey, map[string]any{}); err != nil {
				return err
			}
			got, err := meter()
			if err != nil {
				return err
			}
			if got == want {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("Kinde holds %d after %s of reports; want %d", got, reportWait, want)
			}
			progress("  waiting for the report to reach Kinde (%d of %d)…", got, want)
			if err := sleep(ctx, reportPoll); err != nil {
				return err
			}
		}
	}
	spend := func(amount int64) error {
		job := fmt.Sprintf("job-%d-%s", amount, suffix)
		if r := c.runJob(ctx, res.APIKey, job, amount, 1); r.outcome != jobAdmitted {
			return fmt.Errorf("spend %d tokens: %v %s", amount, r.err, r.refusal)
		}
		return nil
	}

	progress("spending %s tokens and reporting them…", figures.Thousands(notchFirstMatch))
	if err := spend(notchFirstMatch); err != nil {
		return res, err
	}
	if err := reportUntil(notchFirstMatch); err != nil {
		return res, err
	}
	first, err := c.reconcile(ctx, id)
	if err != nil {
		return res, err
	}

	progress("spending %s more and reporting them…", figures.Thousands(notchMeter-notchFirstMatch))
	if err := spend(notchMeter - notchFirstMatch); err != nil {
		return res, err
	}
	if err := reportUntil(notchMeter); err != nil {
		return res, err
	}
	// Late usage: Kinde answers the next report 429, and the reporter honours RateLimit-Reset.
	if a, err := c.do(ctx, http.MethodPut, kindeStandIn+"/standin/meter-faults", "", map[string]any{
		"writes": []string{"ratelimit"}, "rateLimitResetSeconds": pauseSeconds,
	}); err != nil || a.status != http.StatusOK {
		return res, fmt.Errorf("tell the Kinde stand-in to answer 429: %v", err)
	}
	progress("spending %s late tokens; Kinde rate-limits their report…", figures.Thousands(notchLedger-notchMeter))
	if err := spend(notchLedger - notchMeter); err != nil {
		return res, err
	}
	if _, err := c.do(ctx, http.MethodPost, "/v1/report", c.adminKey, map[string]any{}); err != nil {
		return res, err
	}
	held, err := meter()
	if err != nil {
		return res, err
	}
	progress("reconciling…")
	second, err := c.reconcile(ctx, id)
	if err != nil {
		return res, err
	}
	before, err := c.evidenceCount(ctx, id)
	if err != nil {
		return res, err
	}
	next, err := c.reconcile(ctx, id)
	if err != nil {
		return res, err
	}
	after, err := c.evidenceCount(ctx, id)
	if err != nil {
		return res, err
	}

	n := func(v int64) string { return figures.Thousands(v) }
	res.Rows = []Row{
		{"first run: ledger", n(notchFirstMatch), n(first.num("ledger"))},
		{"first run: last sent", n(notchFirstMatch), n(first.num("sent"))},
		{"first run: meter (Kinde)", n(notchFirstMatch), n(first.num("meter"))},
		{"first run: corrections", "0", n(first.corrections)},
		{"first run: verdict", "match", first.str("verdict")},
		{"second run: ledger", n(notchLedger), n(second.num("ledger"))},
		{"second run: meter before the repair", n(notchMeter), n(second.num("meter"))},
		{"second run: gap", n(notchLedger - notchMeter), n(second.num("ledger") - second.num("meter"))},
		{"second run: verdict", "under_billed", second.str("verdict")},
		{"second run: repaired to", n(notchLedger), n(second.num("repair"))},
		{"second run: read back", n(notchLedger), n(second.num("readBack"))},
		{"second run: confirmed", "yes", yes(second.flag("confirmed"))},
		{"next run: verdict", "match", next.str("verdict")},
		{"next run: meter", n(notchLedger), n(next.num("meter"))},
		{"next run: evidence rows added", "0", n(after - before)},
	}
	res.Notes = []string{
		"",
		"The cause the reconciler stored: " + second.str("cause"),
		fmt.Sprintf("The evidence: curl -H 'Authorization: Bearer <operator key>' '%s/v1/reconcile/evidence?account=%s'", c.base, id),
	}
	for _, row := range res.Rows {
		if row.Seed != row.Ferry {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: %s, want %s", row.Name, row.Ferry, row.Seed))
		}
	}
	if held != notchMeter {
		res.Problems = append(res.Problems, fmt.Sprintf("Kinde held %d when the reconciler ran; want %d (the late usage must stay unreported)", held, notchMeter))
	}
	if second.str("cause") != notchCause {
		res.Problems = append(res.Problems, fmt.Sprintf("cause %q, want %q", second.str("cause"), notchCause))
	}
	if next.flag("newEvidence") {
		res.Problems = append(res.Problems, "the next run stored new evidence")
	}
	return res, nil
}

// check is one provider check of a reconcile result, with the result's corrections.
type check struct {
	answer
	corrections int64
}

func (k check) flag(field string) bool {
	v, _ := k.body[field].(bool)
	return v
}

// reconcile reconciles one account now and returns its tokens result's Kinde check.
func (c *labClient) reconcile(ctx context.Context, account string) (check, error) {
	a, _, _, err := c.doRetrying(ctx, http.MethodPost, "/v1/reconcile", c.adminKey, map[string]any{"account": account})
	if err != nil {
		return check{}, err
	}
	if a.status != http.StatusOK {
		return check{}, fmt.Errorf("POST /v1/reconcile: %d %s", a.status, a.str("detail"))
	}
	results, _ := a.body["results"].([]any)
	for _, r := range results {
		res, _ := r.(map[string]any)
		if res["feature"] != labFeature {
			continue
		}
		corrections, _ := res["corrections"].(float64)
		checks, _ := res["checks"].([]any)
		for _, ch := range checks {
			m, _ := ch.(map[string]any)
			if m["provider"] == "kinde" {
				return check{answer: answer{status: a.status, body: m}, corrections: int64(corrections)}, nil
			}
		}
	}
	return check{}, errors.New("POST /v1/reconcile: no Kinde check of the tokens cycle in the answer")
}

// evidenceCount counts the account's evidence rows for its current cycle.
func (c *labClient) evidenceCount(ctx context.Context, account string) (int64, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/reconcile/evidence?account="+account, c.adminKey, nil)
	if err != nil {
		return 0, err
	}
	if a.status != http.StatusOK {
		return 0, fmt.Errorf("GET /v1/reconcile/evidence: %d %s", a.status, a.str("detail"))
	}
	rows, _ := a.body["evidence"].([]any)
	return int64(len(rows)), nil
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
