package meterapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/reporting"
	"github.com/ferrymeter/ferry/internal/reporting/corrections"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/reporting/report"
	"github.com/ferrymeter/ferry/internal/reporting/review"

	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// routes serve the operator routes of reporting and reconciliation on the function's parts.
type routes struct {
	*reporting.Parts
	Catalog plans.Catalog
	Now     func() time.Time
}

// handlers are the function's route handlers, by route key.
func (a *routes) handlers() httpapi.Handlers {
	return httpapi.Handlers{
		"POST /v1/usage/corrections": a.postCorrection,
		"POST /v1/report":            a.postReport,
		"POST /v1/reconcile":         a.postReconcile,
		"GET /v1/reconcile/evidence": a.getEvidence,
		"GET /v1/reconcile/review":   a.getReview,
		"GET /v1/outbox":             a.getOutbox,
	}
}

type correctionRequest struct {
	Account string `json:"account" jsonbody:"required"`
	Feature string `json:"feature" jsonbody:"required"`
	Units   int64  `json:"units" jsonbody:"required"`
	Reason  string `json:"reason" jsonbody:"required"`
	Cycle   string `json:"cycle"`
}
type correctionBody struct {
	ID        string `json:"id"`
	Account   string `json:"account"`
	Feature   string `json:"feature"`
	Cycle     string `json:"cycle"`
	Units     int64  `json:"units"`
	Reason    string `json:"reason"`
	CreatedAt string `json:"createdAt"`
	// ClosedCycle: the cycle had ended; no provider is written for it and it is on the review
	// list.
	ClosedCycle bool `json:"closedCycle"`
}

// postCorrection is POST /v1/usage/corrections: an append-only ± row in the corrected cycle.
func (a *routes) postCorrection(w http.ResponseWriter, r *http.Request) error {
	var req correctionRequest
	if err := httpapi.DecodeJSON(r, &req); err != nil {
		return err
	}
	c, created, err := a.Corrections.Apply(r.Context(), corrections.Input{
		Account: req.Account, Feature: req.Feature, Units: req.Units, Reason: req.Reason, Cycle: req.Cycle,
		IdempotencyKey: r.Header.Get(httpapi.HeaderIdempotencyKey),
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return httpapi.WriteJSON(w, status, correctionBody{
		ID: c.ID, Account: c.Account, Feature: c.Feature, Cycle: c.Cycle, Units: c.Units, Reason: c.Reason,
		CreatedAt: httpapi.RFC3339(c.CreatedAtMs), ClosedCycle: c.Closed,
	})
}

// reportBody is what a run of the reporter (and of the drainer after it) did.
type reportBody struct {
	Report report.Result `json:"report"`
	Drain  drainBody     `json:"drain"`
}
type drainBody struct {
	Due      int `json:"due"`
	Sent     int `json:"sent"`
	Retrying int `json:"retrying"`
	Dead     int `json:"dead"`
	Review   int `json:"review"`
	Skipped  int `json:"skipped"`
	Failed   int `json:"failed"`
}

// postReport is POST /v1/report: run the reporter now, then drain the Stripe outbox once.
func (a *routes) postReport(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.DecodeOptionalEmpty(r); err != nil {
		return err
	}
	m := a
	res, err := m.Reporter.Run(r.Context())
	if err != nil {
		return reportUnavailable(err, "The reporter could not read or write its state; every cycle it did not finish stays marked for the next run.")
	}
	drained, err := m.Drainer.Run(r.Context())
	if err != nil {
		return reportUnavailable(err, "The reporter ran, but the Stripe outbox could not be drained; its rows stay due for the next run.")
	}
	return httpapi.WriteJSON(w, http.StatusOK, reportBody{Report: res, Drain: drainBody{
		Due: drained.Due, Sent: drained.Sent, Retrying: drained.Retrying, Dead: drained.Dead, Review: drained.Review,
		Skipped: drained.Skipped, Failed: drained.Failed,
	}})
}

// reportUnavailable is a run that could not read or write Ferry's own state: what it did not
// finish stays marked (or due) for the next run. The cause is logged, never shown.
func reportUnavailable(cause error, detail string) error {
	return fmt.Errorf("%w: %w", problem.New(problem.Unavailable, "reporting run failed", detail), cause)
}

type reconcileRequest struct {
	Account string `json:"account"`
	Cycle   string `json:"cycle"`
	After   string `json:"after"`
}
type reconcileBody struct {
	Results  []reconcile.Result `json:"results"`
	Accounts int                `json:"accounts"`
	Next     string             `json:"next,omitempty"`
	// OK is false when a cycle could not be compared or a repair was not confirmed (the
	// results say which).
	OK bool `json:"ok"`
}

// postReconcile is POST /v1/reconcile: reconcile one account (and cycle) now, or one page of
// every account.
func (a *routes) postReconcile(w http.ResponseWriter, r *http.Request) error {
	var req reconcileRequest
	if err := httpapi.DecodeOptionalJSON(r, &req); err != nil {
		return err
	}
	var problems []string
	if req.Account != "" && !accounts.ValidID(req.Account) {
		problems = append(problems, "account must be an account id")
	}
	if req.After != "" && (!accounts.ValidID(req.After) || req.Account != "") {
		problems = append(problems, "after must be an account id, and only without account")
	}
	if req.Cycle != "" {
		if _, err := cycle.Parse(req.Cycle, 0); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if err := problem.Fields(problems); err != nil {
		return err
	}
	if req.Account != "" {
		if _, err := a.Accounts.Get(r.Context(), req.Account); err != nil {
			return err
		}
	}
	page, err := a.Reconciler.Run(r.Context(), reconcile.Input{Account: req.Account, Cycle: req.Cycle, After: req.After})
	ok := err == nil
	if err != nil && len(page.Results) == 0 {
		return reportUnavailable(err, "The reconciler could not run; nothing was repaired. Retry it.")
	}
	if page.Results == nil {
		page.Results = []reconcile.Result{}
	}
	for i := range page.Results {
		if page.Results[i].Checks == nil {
			page.Results[i].Checks = []reconcile.Check{}
		}
	}
	return httpapi.WriteJSON(w, http.StatusOK, reconcileBody{Results: page.Results, Accounts: page.Accounts, Next: page.Next, OK: ok})
}

type evidenceRecord struct {
	Feature     string            `json:"feature"`
	Provider    string            `json:"provider"`
	Ledger      int64             `json:"ledger"`
	Sent        int64             `json:"sent"`
	Meter       *int64            `json:"meter"`
	Verdict     reconcile.Verdict `json:"verdict"`
	Cause       string            `json:"cause"`
	Repair      *int64            `json:"repair"`
	ReadBack    *int64            `json:"readBack"`
	Confirmed   bool              `json:"confirmed"`
	Rebuilt     int               `json:"rebuilt"`
	Corrections int64             `json:"corrections"`
	At          string            `json:"at"`
}
type evidenceBody struct {
	Account  string           `json:"account"`
	Cycle    string           `json:"cycle"`
	Evidence []evidenceRecord `json:"evidence"`
}

// evidenceParams are the query parameters of GET /v1/reconcile/evidence.
var evidenceParams = []string{"account", "cycle"}

// getEvidence is GET /v1/reconcile/evidence?account=&cycle=: the stored proof of a cycle.
func (a *routes) getEvidence(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, evidenceParams); err != nil {
		return err
	}
	q := r.URL.Query()
	id := q.Get("account")
	if id == "" {
		return httpapi.BadRequest("account is required: GET /v1/reconcile/evidence?account=<id>&cycle=YYYY-MM.")
	}
	acct, err := a.Accounts.Get(r.Context(), id)
	if err != nil {
		return err
	}
	label := acct.CycleAt(a.Now()).Label()
	if v := q.Get("cycle"); v != "" {
		c, err := cycle.Parse(v, acct.AgreementDay)
		if err != nil {
			return httpapi.BadRequest(err.Error())
		}
		label = c.Label()
	}
	records, err := a.Evidence.List(r.Context(), acct.ID, label)
	if err != nil {
		return err
	}
	body := evidenceBody{Account: acct.ID, Cycle: label, Evidence: []evidenceRecord{}}
	for _, rec := range records {
		body.Evidence = append(body.Evidence, evidenceRecord{
			Feature: rec.Feature, Provider: rec.Provider, Ledger: rec.Ledger, Sent: rec.Sent, Meter: rec.Meter,
			Verdict: rec.Verdict, Cause: rec.Cause, Repair: rec.Repair, ReadBack: rec.ReadBack, Confirmed: rec.Confirmed,
			Rebuilt: rec.Rebuilt, Corrections: rec.Corrections, At: httpapi.RFC3339(rec.AtMs),
		})
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

type reviewEntry struct {
	Account  string        `json:"account"`
	Feature  string        `json:"feature"`
	Cycle    string        `json:"cycle"`
	Provider string        `json:"provider"`
	Reason   review.Reason `json:"reason"`
	Ledger   int64         `json:"ledger"`
	Sent     int64         `json:"sent"`
	Meter    *int64        `json:"meter"`
	Detail   string        `json:"detail"`
	At       string        `json:"at"`
}

// getReview is GET /v1/reconcile/review: what a person must settle.
func (a *routes) getReview(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	entries, err := a.Review.List(r.Context())
	if err != nil {
		return err
	}
	out := []reviewEntry{}
	for _, e := range entries {
		out = append(out, reviewEntry{
			Account: e.Account, Feature: e.Feature, Cycle: e.Cycle, Provider: e.Provider, Reason: e.Reason,
			Ledger: e.Ledger, Sent: e.Sent, Meter: e.Meter, Detail: e.Detail, At: httpapi.RFC3339(e.AtMs),
		})
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"entries": out})
}

// outboxRow is one row of the Stripe outbox as the API shows it.
type outboxRow struct {
	Feature       string `json:"feature"`
	Cycle         string `json:"cycle"`
	Key           string `json:"key"`
	Kind          string `json:"kind"`
	Status        string `json:"status"`
	Total         int64  `json:"total"`
	Delta         int64  `json:"delta"`
	Attempts      int    `json:"attempts"`
	NextAttemptAt string `json:"nextAttemptAt,omitempty"`
	LastError     string `json:"lastError,omitempty"`
	SentAt        string `json:"sentAt,omitempty"`
	CreatedAt     string `json:"createdAt"`
	// Identifier is the meter event's identifier as Stripe sees it.
	Identifier string `json:"identifier"`
}

// outboxState groups a row as an operator reads the outbox: still to send and never tried
// (pending), tried and failed or being sent (retrying), out of attempts (dead), or done.
func outboxState(r outbox.Row) string {
	switch {
	case r.Status == outbox.Pending && r.Attempts == 0:
		return "pending"
	case r.Status.Due():
		return "retrying"
	case r.Status == outbox.Dead:
		return "dead"
	}
	return "done"
}

// getOutbox is GET /v1/outbox?account=&cycle=: the account's Stripe outbox rows of one cycle
// (its current one by default), for every feature, grouped pending, retrying, dead and done.
func (a *routes) getOutbox(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, []string{"account", "cycle"}); err != nil {
		return err
	}
	q := r.URL.Query()
	id := q.Get("account")
	if id == "" {
		return httpapi.BadRequest("account is required: GET /v1/outbox?account=<id>&cycle=YYYY-MM.")
	}
	if !accounts.ValidID(id) {
		return httpapi.BadRequest("account is not an account id.")
	}
	acct, err := a.Accounts.Get(r.Context(), id)
	if err != nil {
		return err
	}
	label := acct.CycleAt(a.Now()).Label()
	if v := q.Get("cycle"); v != "" {
		c, err := cycle.Parse(v, acct.AgreementDay)
		if err != nil {
			return httpapi.BadRequest(err.Error())
		}
		label = c.Label()
	}
	groups := map[string][]outboxRow{"pending": {}, "retrying": {}, "dead": {}, "done": {}}
	for _, feature := range a.Catalog.Features() {
		rows, err := a.Outbox.Cycle(r.Context(), acct.ID, feature, label)
		if err != nil {
			return err
		}
		for _, row := range rows {
			b := outboxRow{
				Feature: row.Feature, Cycle: row.Cycle, Key: row.Key, Kind: string(row.Kind), Status: string(row.Status),
				Total: row.Total, Delta: row.Delta, Attempts: row.Attempts, LastError: row.LastError,
				CreatedAt: httpapi.RFC3339(row.CreatedAtMs), Identifier: row.Identifier(),
			}
			if row.Status.Due() && row.NextAttemptAtMs != 0 {
				b.NextAttemptAt = httpapi.RFC3339(row.NextAttemptAtMs)
			}
			if row.SentAtMs != 0 {
				b.SentAt = httpapi.RFC3339(row.SentAtMs)
			}
			state := outboxState(row)
			groups[state] = append(groups[state], b)
		}
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"account": acct.ID, "cycle": label, "rows": groups})
}
