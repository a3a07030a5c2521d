package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// FailedEventLister lists an account's events in a failure status (ledger.DynamoStore does).
type FailedEventLister interface {
	ListFailed(ctx context.Context, accountID string, status ledger.Status, cursor string, limit int) (ledger.FailedPage, error)
}

// Redriver queues an UNINSERTABLE event again from the archive (worker.Redrive does).
type Redriver interface {
	Run(ctx context.Context, accountID, eventID string) (ledger.Status, error)
}

// HoldLister lists an account's holds in one status (holds.DynamoStore does).
type HoldLister interface {
	List(ctx context.Context, accountID string, status holds.Status, cursor string, limit int) (holds.Page, error)
}

// pageLimit reads the limit query parameter: a whole number from 1 to max, or def when absent.
func pageLimit(r *http.Request, def, maxLimit int) (int, error) {
	raw := r.URL.Query().Get("limit")
	if raw == "" {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || strconv.Itoa(n) != raw || n < 1 || n > maxLimit {
		return 0, badRequest(fmt.Sprintf("limit must be a whole number from 1 to %d.", maxLimit))
	}
	return n, nil
}

// nextCursor is a page's cursor as the API shows it: null at the end.
func nextCursor(next string) *string {
	if next == "" {
		return nil
	}
	return &next
}

// listAccounts is GET /v1/accounts: every account in id order, or those whose id starts with
// prefix, paged by cursor; or, with linkedId, the account a provider id (a Kinde customer, a
// Stripe customer, a Kinde agreement) is linked to.
func (a *API) listAccounts(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, []string{"prefix", "linkedId", "cursor", "limit"}); err != nil {
		return err
	}
	q := r.URL.Query()
	if linked := q.Get("linkedId"); linked != "" {
		if !accounts.ValidLinkID(linked) {
			return badRequest("linkedId is not a provider id (letters, digits, _ . and -, at most 255, starting with a letter or digit).")
		}
		limit, err := pageLimit(r, accounts.DefaultPageSize, accounts.MaxPageSize)
		if err != nil {
			return err
		}
		// The list of the accounts linked to the id — at most one — that the other parameters
		// admit, as they would on the whole list.
		in := accounts.ListInput{Prefix: q.Get("prefix"), Cursor: q.Get("cursor"), Limit: limit}
		if err := in.Validate(); err != nil {
			return err
		}
		items := []accountBody{}
		for _, kind := range accounts.LinkKinds {
			acct, err := a.deps.Accounts.Linked(r.Context(), kind, linked)
			if errors.Is(err, accounts.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if in.Admits(acct.ID) {
				items = append(items, a.accountBody(acct))
			}
			break
		}
		return writeJSON(w, http.StatusOK, map[string]any{"items": items, "next": nil})
	}
	limit, err := pageLimit(r, accounts.DefaultPageSize, accounts.MaxPageSize)
	if err != nil {
		return err
	}
	page, err := a.deps.Accounts.List(r.Context(), accounts.ListInput{Prefix: q.Get("prefix"), Cursor: q.Get("cursor"), Limit: limit})
	if err != nil {
		return err
	}
	items := make([]accountBody, 0, len(page.Accounts))
	for _, acct := range page.Accounts {
		items = append(items, a.accountBody(acct))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"items": items, "next": nextCursor(page.Next)})
}

// Bounds of an account's standing.
const (
	defaultStandingCycles = 6
	maxStandingCycles     = 12
)

// standingCycleBody is one feature's figures in one cycle.
type standingCycleBody struct {
	Cycle     string      `json:"cycle"`
	Limit     plans.Limit `json:"limit"`
	Used      int64       `json:"used"`
	Held      int64       `json:"held"`
	Remaining *int64      `json:"remaining"`
}

type standingFeatureBody struct {
	Feature   string              `json:"feature"`
	Allowance bool                `json:"allowance"`
	Cycles    []standingCycleBody `json:"cycles"`
}

// getStanding is GET /v1/accounts/{id}/standing: the account's usage of every feature of the
// catalog, in its current cycle and the cycles before it (cycles, oldest first): what GET
// /v1/usage shows the account, for each feature and cycle at once.
func (a *API) getStanding(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, []string{"cycles"}); err != nil {
		return err
	}
	n := defaultStandingCycles
	if raw := r.URL.Query().Get("cycles"); raw != "" {
		v, err := strconv.Atoi(raw)
		if err != nil || strconv.Itoa(v) != raw || v < 1 || v > maxStandingCycles {
			return badRequest(fmt.Sprintf("cycles must be a whole number from 1 to %d.", maxStandingCycles))
		}
		n = v
	}
	acct, err := a.deps.Accounts.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	cycles := make([]cycle.Cycle, n)
	c := acct.CycleAt(a.deps.Now())
	for i := n - 1; i >= 0; i-- {
		cycles[i] = c
		c = cycle.At(c.Start.Add(-1), acct.AgreementDay)
	}
	labels := make([]string, n)
	for i, c := range cycles {
		labels[i] = c.Label()
	}
	features := []standingFeatureBody{}
	for _, feature := range a.deps.Catalog.Features() {
		fb := standingFeatureBody{Feature: feature, Allowance: a.deps.Catalog.Allowance(feature), Cycles: make([]standingCycleBody, 0, n)}
		for _, c := range cycles {
			u, err := a.usageOf(r.Context(), acct, feature, c)
			if err != nil {
				return err
			}
			fb.Cycles = append(fb.Cycles, standingCycleBody{Cycle: u.Cycle, Limit: u.Limit, Used: u.Used, Held: u.Held, Remaining: u.Remaining})
		}
		features = append(features, fb)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"account": acct.ID, "cycles": labels, "features": features})
}

// errOtherAccount answers an account key that names another account on a list or a read of
// its own resources: not found, as that account's resources are.
var errOtherAccount = problem.New(problem.NotFound, "account not found", "No such account for this key; an account key reads its own.")

// eventScope is whose events a caller reads: an account its own (naming another is
// errOtherAccount), the operator the account it names with account= (which it must).
func eventScope(r *http.Request) (string, error) {
	p, _ := PrincipalFrom(r.Context())
	named := r.URL.Query().Get("account")
	if !p.Operator {
		if named != "" && named != p.Account.ID {
			// Another account is not found, as its resources are; nothing says whether it exists.
			return "", errOtherAccount
		}
		return p.Account.ID, nil
	}
	if named == "" {
		return "", badRequest("The operator names the account whose events to read: account=<id>.")
	}
	if !accounts.ValidID(named) {
		return "", badRequest("account is not an account id.")
	}
	return named, nil
}

// newEventBody is a ledger entry as the API shows it; the reason only of a failed event.
func newEventBody(e ledger.Entry) eventBody {
	body := eventBody{ID: e.EventID, Status: e.Status, Cycle: e.Cycle, ReceivedAt: rfc3339(e.ReceivedAtMs), Reason: e.Reason}
	if e.Billed() {
		body.BillingAcceptedAt = rfc3339(e.BillingAcceptedAtMs)
	}
	if !e.Status.Failed() {
		body.Reason = ""
	}
	return body
}

// listEvents is GET /v1/events?status=REJECTED|UNINSERTABLE: an account's events that ended in a
// failure status, newest first, paged by cursor. An account lists its own; the operator names the
// account.
func (a *API) listEvents(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, []string{"status", "account", "cursor", "limit"}); err != nil {
		return err
	}
	accountID, err := eventScope(r)
	if err != nil {
		return err
	}
	status := ledger.Status(r.URL.Query().Get("status"))
	if !status.Failed() {
		return badRequest(fmt.Sprintf("status is %s or %s: the statuses that end an event without storing it.", ledger.Rejected, ledger.Uninsertable))
	}
	limit, err := pageLimit(r, ledger.DefaultPageSize, ledger.MaxPageSize)
	if err != nil {
		return err
	}
	page, err := a.deps.FailedEvents.ListFailed(r.Context(), accountID, status, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return err
	}
	items := make([]eventBody, 0, len(page.Entries))
	for _, e := range page.Entries {
		items = append(items, newEventBody(e))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"items": items, "next": nextCursor(page.Next)})
}

type redriveRequest struct {
	Account string `json:"account" jsonbody:"required"`
}

// errNoEvent is the answer for an unknown event, or another account's.
var errNoEvent = notFound("No event with this id has been processed for this account (a queued event appears once the worker claims it).")

// redriveEvent is POST /v1/events/{id}/redrive {"account"}: the operator's path back for an
// UNINSERTABLE event once the cause of its refused row is fixed. The entry goes back to
// INSERTING and its archived payload is queued again; the worker stores and marks it without
// billing it a second time. 202, since the work is queued; 409 for an event that is finished.
func (a *API) redriveEvent(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, nil); err != nil {
		return err
	}
	var req redriveRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if !accounts.ValidID(req.Account) {
		return badRequest("account is not an account id.")
	}
	id := r.PathValue("id")
	before, err := a.deps.Redrive.Run(r.Context(), req.Account, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return errNoEvent
	case errors.Is(err, worker.ErrNotRedrivable):
		return failure(problem.Conflict, fmt.Sprintf("The event is %s: only an UNINSERTABLE event (or one still INSERTING) is redriven.", before))
	case err != nil:
		return err
	}
	return writeJSON(w, http.StatusAccepted, map[string]string{"id": id, "status": string(ledger.Inserting), "was": string(before)})
}

// listHolds is GET /v1/holds?status=RUNNING|EXPIRED|SETTLED: an account's holds in one status,
// newest first, paged by cursor. An account lists its own; the operator names the account.
func (a *API) listHolds(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, []string{"status", "account", "cursor", "limit"}); err != nil {
		return err
	}
	p, _ := PrincipalFrom(r.Context())
	accountID, err := eventScope(r)
	if err != nil {
		if p.Operator && r.URL.Query().Get("account") == "" {
			return badRequest("The operator names the account whose holds to list: account=<id>.")
		}
		return err
	}
	status := holds.Status(r.URL.Query().Get("status"))
	if !status.Valid() {
		return badRequest(fmt.Sprintf("status is %s, %s or %s.", holds.Running, holds.Expired, holds.Settled))
	}
	limit, err := pageLimit(r, holds.DefaultPageSize, holds.MaxPageSize)
	if err != nil {
		return err
	}
	page, err := a.deps.HoldLister.List(r.Context(), accountID, status, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return err
	}
	items := make([]holdBody, 0, len(page.Holds))
	for _, h := range page.Holds {
		items = append(items, newHoldBody(h))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"items": items, "next": nextCursor(page.Next)})
}
