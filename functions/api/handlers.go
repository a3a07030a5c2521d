package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/metering/worker"
	"github.com/ferrymeter/ferry/internal/operator/console"
	"github.com/ferrymeter/ferry/internal/operator/session"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// routes serve the api function's routes.
type routes struct {
	Accounts *accounts.Service
	Usage    usage.Table
	Catalog  plans.Catalog
	// Events reads an event's ledger entry; FailedEvents lists an account's REJECTED and
	// UNINSERTABLE events; Redrive queues an UNINSERTABLE one again from the archive.
	Events       *ledger.Table
	FailedEvents *ledger.Table
	Redrive      *worker.Redrive
	// Limits is where the next admission reads its limit; GET /v1/usage shows that limit.
	Limits limits.Source
	// Allowances shows an allowance feature's grant rows in GET /v1/usage.
	Allowances *allowance.Service
	// BillingEvents reads and replays stored billing events; HoldLister lists an account's holds.
	BillingEvents *inbox.Reader
	HoldLister    *holds.Table
	// UsageQuery answers GET /v1/usage/query over the meters the deployment defines
	// (UsageMeters).
	UsageQuery  UsageQuerier
	UsageMeters rollup.Meters
	// Console serves the operator console's page, its sessions and its labs.
	Console consoleDeps
	Now     func() time.Time
}

// consoleDeps are what the console's routes use.
type consoleDeps struct {
	Assets   *console.Assets
	Sessions *session.Service
	Cookie   session.Cookie
	Labs     *console.LabRunner
}

// handlers are the function's route handlers, by route key.
func (a *routes) handlers() httpapi.Handlers {
	return httpapi.Handlers{
		"POST /v1/accounts":                   a.createAccount,
		"PATCH /v1/accounts/{id}":             a.updateAccount,
		"GET /v1/accounts/{id}":               a.getAccount,
		"GET /v1/accounts":                    a.listAccounts,
		"GET /v1/accounts/{id}/standing":      a.getStanding,
		"GET /v1/events/{id}":                 a.getEvent,
		"GET /v1/events":                      a.listEvents,
		"POST /v1/events/{id}/redrive":        a.redriveEvent,
		"GET /v1/usage":                       a.getUsage,
		"GET /v1/usage/query":                 a.getUsageQuery,
		"GET /v1/holds":                       a.listHolds,
		"GET /v1/billing-events":              a.listBillingEvents,
		"GET /v1/billing-events/{id}":         a.getBillingEvent,
		"POST /v1/billing-events/{id}/replay": a.replayBillingEvent,
		"GET /console":                        a.consolePage,
		"GET /console/{asset}":                a.consoleAsset,
		"POST /v1/sessions":                   a.createSession,
		"GET /v1/sessions/current":            a.getSession,
		"DELETE /v1/sessions/current":         a.deleteSession,
		"POST /v1/labs/{lab}/runs":            a.runLab,
	}
}

// accountBody is an account as the API shows it: effective limits (the plan's, overridden by
// the account's), never the key.
type accountBody struct {
	ID     string                 `json:"id"`
	Plan   string                 `json:"plan"`
	Status accounts.Status        `json:"status"`
	Limits map[string]plans.Limit `json:"limits"`
	// Alerts are each feature's thresholds (the account's overrides or its plan's).
	Alerts         map[string][]plans.Threshold `json:"alerts"`
	AgreementStart *int                         `json:"agreementStart"`
	CreatedAt      string                       `json:"createdAt"`
	// The linked provider ids (null when not linked) and the event time of the provider's
	// plan change the account is on (null when no provider event changed it).
	KindeCustomerID  *string `json:"kindeCustomerId"`
	StripeCustomerID *string `json:"stripeCustomerId"`
	KindeAgreementID *string `json:"kindeAgreementId"`
	PlanChangedAt    *string `json:"planChangedAt"`
	APIKey           string  `json:"apiKey,omitempty"`
}

func (a *routes) accountBody(acct accounts.Account) accountBody {
	b := accountBody{
		ID: acct.ID, Plan: acct.Plan, Status: acct.Status,
		Limits: acct.EffectiveLimits(a.Catalog), Alerts: acct.EffectiveAlerts(a.Catalog), CreatedAt: httpapi.RFC3339(acct.CreatedAtMs),
		KindeCustomerID: nonEmpty(acct.KindeCustomerID), StripeCustomerID: nonEmpty(acct.StripeCustomerID),
		KindeAgreementID: nonEmpty(acct.KindeAgreementID),
	}
	if acct.AgreementDay != 0 {
		day := acct.AgreementDay
		b.AgreementStart = &day
	}
	if acct.PlanChangedAtMs != 0 {
		t := httpapi.RFC3339(acct.PlanChangedAtMs)
		b.PlanChangedAt = &t
	}
	return b
}

// nonEmpty is nil for "", so an unset id answers null.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

type createAccountRequest struct {
	ID               string                       `json:"id" jsonbody:"required"`
	Plan             string                       `json:"plan"`
	Status           accounts.Status              `json:"status"`
	Limits           map[string]plans.Limit       `json:"limits"`
	Alerts           map[string][]plans.Threshold `json:"alerts"`
	KindeCustomerID  *string                      `json:"kindeCustomerId"`
	StripeCustomerID *string                      `json:"stripeCustomerId"`
	KindeAgreementID *string                      `json:"kindeAgreementId"`
}

// links gathers the linked ids a request sets.
func (r createAccountRequest) links() map[accounts.LinkKind]string {
	links := map[accounts.LinkKind]string{}
	for kind, id := range map[accounts.LinkKind]*string{
		accounts.KindeCustomer: r.KindeCustomerID, accounts.StripeCustomer: r.StripeCustomerID, accounts.KindeAgreement: r.KindeAgreementID,
	} {
		if id != nil {
			links[kind] = *id
		}
	}
	return links
}
func (a *routes) createAccount(w http.ResponseWriter, r *http.Request) error {
	var req createAccountRequest
	if err := httpapi.DecodeJSON(r, &req); err != nil {
		return err
	}
	acct, key, err := a.Accounts.Create(r.Context(), accounts.CreateInput{
		ID: req.ID, Plan: req.Plan, Status: req.Status, Limits: req.Limits, Alerts: req.Alerts, Links: req.links(),
	})
	if err != nil {
		return err
	}
	body := a.accountBody(acct)
	body.APIKey = key
	w.Header().Set("Location", "/v1/accounts/"+acct.ID)
	return httpapi.WriteJSON(w, http.StatusCreated, body)
}

type updateAccountRequest struct {
	Plan           *string                       `json:"plan"`
	Status         *accounts.Status              `json:"status"`
	Limits         *map[string]plans.Limit       `json:"limits"`
	Alerts         *map[string][]plans.Threshold `json:"alerts"`
	AgreementStart *int                          `json:"agreementStart"`
	// A linked id: a string links it, null unlinks, absent leaves it.
	KindeCustomerID  linkField `json:"kindeCustomerId" jsonbody:"nullable"`
	StripeCustomerID linkField `json:"stripeCustomerId" jsonbody:"nullable"`
	KindeAgreementID linkField `json:"kindeAgreementId" jsonbody:"nullable"`
}

// linkField is a linked id in a PATCH body, which tells an absent member (no change) from null
// (unlink) and from a string (link this id).
type linkField struct {
	Set bool
	ID  *string
}

// UnmarshalJSON reads null or a string; any other JSON type is an error.
func (f *linkField) UnmarshalJSON(data []byte) error {
	f.Set = true
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(data, &f.ID); err != nil {
		return errors.New("a linked id is a string, or null to unlink it")
	}
	return nil
}
func (r updateAccountRequest) links() map[accounts.LinkKind]*string {
	links := map[accounts.LinkKind]*string{}
	for kind, f := range map[accounts.LinkKind]linkField{
		accounts.KindeCustomer: r.KindeCustomerID, accounts.StripeCustomer: r.StripeCustomerID, accounts.KindeAgreement: r.KindeAgreementID,
	} {
		if f.Set {
			links[kind] = f.ID
		}
	}
	return links
}
func (a *routes) updateAccount(w http.ResponseWriter, r *http.Request) error {
	var req updateAccountRequest
	if err := httpapi.DecodeJSON(r, &req); err != nil {
		return err
	}
	acct, err := a.Accounts.Update(r.Context(), r.PathValue("id"), accounts.UpdateInput{
		Plan: req.Plan, Status: req.Status, Limits: req.Limits, Alerts: req.Alerts, AgreementDay: req.AgreementStart, Links: req.links(),
	})
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, a.accountBody(acct))
}
func (a *routes) getAccount(w http.ResponseWriter, r *http.Request) error {
	acct, err := a.Accounts.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, a.accountBody(acct))
}
func (a *routes) getUsage(w http.ResponseWriter, r *http.Request) error {
	acct := httpapi.AccountOf(r)
	q := r.URL.Query()
	feature, sent, err := httpapi.QueryParam(q, "feature")
	if err != nil {
		return err
	}
	if !sent {
		feature = plans.FeatureEvents
	}
	if !a.Catalog.HasFeature(feature) {
		return httpapi.BadRequest(fmt.Sprintf("Unknown feature %q; known: %s.", feature, strings.Join(a.Catalog.Features(), ", ")))
	}
	c := acct.CycleAt(a.Now())
	label, sent, err := httpapi.QueryParam(q, "cycle")
	if err != nil {
		return err
	}
	if sent {
		parsed, err := cycle.Parse(label, acct.AgreementDay)
		if err != nil {
			return httpapi.BadRequest(err.Error())
		}
		c = parsed
	}
	body, err := a.usageOf(r.Context(), acct, feature, c)
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// usageOf is an account's usage of a feature in a cycle, as GET /v1/usage shows it.
func (a *routes) usageOf(ctx context.Context, acct accounts.Account, feature string, c cycle.Cycle) (usageBody, error) {
	totals, err := a.Usage.Read(ctx, acct.ID, feature, c.Label())
	if err != nil {
		return usageBody{}, err
	}
	// The limit the next admission is held to: the plan's, or the provider's entitlement when
	// limits come from the provider (FERRY_LIMITS_SOURCE=kinde).
	limit := acct.Limit(feature, a.Catalog)
	if a.Limits != nil {
		if limit, err = a.Limits.Limit(ctx, acct, feature); err != nil {
			return usageBody{}, err
		}
	}
	var grants []grantBody
	if a.Catalog.Allowance(feature) {
		// An allowance's limit is the sum of the cycle's grant rows. The rows the account's plan
		// still needs (a cycle's opening, the top-up of a plan the operator set) show as pending.
		view, err := a.Allowances.Show(ctx, acct, feature, c.Label())
		if err != nil {
			return usageBody{}, err
		}
		limit = view.Limit
		grants = make([]grantBody, 0, len(view.Grants)+len(view.Pending))
		for i, g := range append(append([]allowance.Grant(nil), view.Grants...), view.Pending...) {
			b := grantBody{Plan: g.Plan, Amount: g.Amount, Reason: string(g.Reason), EventID: g.EventID, Pending: i >= len(view.Grants)}
			if g.GrantedAtMs != 0 {
				b.GrantedAt = httpapi.RFC3339(g.GrantedAtMs)
			}
			grants = append(grants, b)
		}
	}
	body := usageBody{
		Feature: feature, Cycle: c.Label(), Limit: limit, Used: totals.Used, Held: totals.Held,
		Remaining: limit.Remaining(totals.Used + totals.Held), Corrections: totals.Corrections, Grants: grants,
	}
	if m, ok := a.Catalog.MeterFor(feature); ok {
		body.Meter, body.Aggregation = m.Name, m.Aggregation
	}
	return body, nil
}

// grantBody is one grant row of an allowance's cycle.
type grantBody struct {
	Plan      string `json:"plan"`
	Amount    int64  `json:"amount"`
	Reason    string `json:"reason"`
	EventID   string `json:"eventId,omitempty"`
	GrantedAt string `json:"grantedAt,omitempty"`
	// Pending marks a row the account's plan needs that is not stored yet (it counts; the next
	// admission writes it).
	Pending bool `json:"pending,omitempty"`
}

// listAccounts is GET /v1/accounts: every account in id order, or those whose id starts with
// prefix, paged by cursor; or, with linkedId, the account a provider id (a Kinde customer, a
// Stripe customer, a Kinde agreement) is linked to.
func (a *routes) listAccounts(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, []string{"prefix", "linkedId", "cursor", "limit"}); err != nil {
		return err
	}
	q := r.URL.Query()
	if linked := q.Get("linkedId"); linked != "" {
		if !accounts.ValidLinkID(linked) {
			return httpapi.BadRequest("linkedId is not a provider id (letters, digits, _ . and -, at most 255, starting with a letter or digit).")
		}
		limit, err := httpapi.PageLimit(r, accounts.DefaultPageSize, accounts.MaxPageSize)
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
			acct, err := a.Accounts.Linked(r.Context(), kind, linked)
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
		return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "next": nil})
	}
	limit, err := httpapi.PageLimit(r, accounts.DefaultPageSize, accounts.MaxPageSize)
	if err != nil {
		return err
	}
	page, err := a.Accounts.List(r.Context(), accounts.ListInput{Prefix: q.Get("prefix"), Cursor: q.Get("cursor"), Limit: limit})
	if err != nil {
		return err
	}
	items := make([]accountBody, 0, len(page.Accounts))
	for _, acct := range page.Accounts {
		items = append(items, a.accountBody(acct))
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "next": httpapi.NextCursor(page.Next)})
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
func (a *routes) getStanding(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, []string{"cycles"}); err != nil {
		return err
	}
	n := defaultStandingCycles
	if raw := r.URL.Query().Get("cycles"); raw != "" {
		v, err := strconv.Atoi(raw)
		if err != nil || strconv.Itoa(v) != raw || v < 1 || v > maxStandingCycles {
			return httpapi.BadRequest(fmt.Sprintf("cycles must be a whole number from 1 to %d.", maxStandingCycles))
		}
		n = v
	}
	acct, err := a.Accounts.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	cycles := make([]cycle.Cycle, n)
	c := acct.CycleAt(a.Now())
	for i := n - 1; i >= 0; i-- {
		cycles[i] = c
		c = cycle.At(c.Start.Add(-1), acct.AgreementDay)
	}
	labels := make([]string, n)
	for i, c := range cycles {
		labels[i] = c.Label()
	}
	features := []standingFeatureBody{}
	for _, feature := range a.Catalog.Features() {
		fb := standingFeatureBody{Feature: feature, Allowance: a.Catalog.Allowance(feature), Cycles: make([]standingCycleBody, 0, n)}
		for _, c := range cycles {
			u, err := a.usageOf(r.Context(), acct, feature, c)
			if err != nil {
				return err
			}
			fb.Cycles = append(fb.Cycles, standingCycleBody{Cycle: u.Cycle, Limit: u.Limit, Used: u.Used, Held: u.Held, Remaining: u.Remaining})
		}
		features = append(features, fb)
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"account": acct.ID, "cycles": labels, "features": features})
}

// errOtherAccount answers an account key that names another account on a list or a read of
// its own resources: not found, as that account's resources are.
var errOtherAccount = problem.New(problem.NotFound, "account not found", "No such account for this key; an account key reads its own.")

// eventScope is whose events a caller reads: an account its own (naming another is
// errOtherAccount), the operator the account it names with account= (which it must).
func eventScope(r *http.Request) (string, error) {
	p, _ := httpapi.PrincipalFrom(r.Context())
	named := r.URL.Query().Get("account")
	if !p.Operator {
		if named != "" && named != p.Account.ID {
			// Another account is not found, as its resources are; nothing says whether it exists.
			return "", errOtherAccount
		}
		return p.Account.ID, nil
	}
	if named == "" {
		return "", httpapi.BadRequest("The operator names the account whose events to read: account=<id>.")
	}
	if !accounts.ValidID(named) {
		return "", httpapi.BadRequest("account is not an account id.")
	}
	return named, nil
}

// newEventBody is a ledger entry as the API shows it; the reason only of a failed event, the
// values its meters moved only of a billed one.
func (a *routes) newEventBody(e ledger.Entry) eventBody {
	body := eventBody{ID: e.EventID, Status: e.Status, Cycle: e.Cycle, ReceivedAt: httpapi.RFC3339(e.ReceivedAtMs), Reason: e.Reason}
	if e.Billed() {
		body.BillingAcceptedAt = httpapi.RFC3339(e.BillingAcceptedAtMs)
		for _, mv := range e.MeterValues() {
			body.Meters = append(body.Meters, a.meterValueBody(mv))
		}
	}
	if !e.Status.Failed() {
		body.Reason = ""
	}
	return body
}

// listEvents is GET /v1/events?status=REJECTED|UNINSERTABLE: an account's events that ended in a
// failure status, newest first, paged by cursor. An account lists its own; the operator names the
// account.
func (a *routes) listEvents(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, []string{"status", "account", "cursor", "limit"}); err != nil {
		return err
	}
	accountID, err := eventScope(r)
	if err != nil {
		return err
	}
	status := ledger.Status(r.URL.Query().Get("status"))
	if !status.Failed() {
		return httpapi.BadRequest(fmt.Sprintf("status is %s or %s: the statuses that end an event without storing it.", ledger.Rejected, ledger.Uninsertable))
	}
	limit, err := httpapi.PageLimit(r, ledger.DefaultPageSize, ledger.MaxPageSize)
	if err != nil {
		return err
	}
	page, err := a.FailedEvents.ListFailed(r.Context(), accountID, status, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return err
	}
	items := make([]eventBody, 0, len(page.Entries))
	for _, e := range page.Entries {
		items = append(items, a.newEventBody(e))
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "next": httpapi.NextCursor(page.Next)})
}

type redriveRequest struct {
	Account string `json:"account" jsonbody:"required"`
}

// errNoEvent is the answer for an unknown event, or another account's.
var errNoEvent = httpapi.NotFound("No event with this id has been processed for this account (a queued event appears once the worker claims it).")

// redriveEvent is POST /v1/events/{id}/redrive {"account"}: the operator's path back for an
// UNINSERTABLE event once the cause of its refused row is fixed. The entry goes back to
// INSERTING and its archived payload is queued again; the worker stores and marks it without
// billing it a second time. 202, since the work is queued; 409 for an event that is finished.
func (a *routes) redriveEvent(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	var req redriveRequest
	if err := httpapi.DecodeJSON(r, &req); err != nil {
		return err
	}
	if !accounts.ValidID(req.Account) {
		return httpapi.BadRequest("account is not an account id.")
	}
	id := r.PathValue("id")
	before, err := a.Redrive.Run(r.Context(), req.Account, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return errNoEvent
	case errors.Is(err, worker.ErrNotRedrivable):
		return httpapi.Failure(problem.Conflict, fmt.Sprintf("The event is %s: only an UNINSERTABLE event (or one still INSERTING) is redriven.", before))
	case err != nil:
		return err
	}
	return httpapi.WriteJSON(w, http.StatusAccepted, map[string]string{"id": id, "status": string(ledger.Inserting), "was": string(before)})
}

// listHolds is GET /v1/holds?status=RUNNING|EXPIRED|SETTLED: an account's holds in one status,
// newest first, paged by cursor. An account lists its own; the operator names the account.
func (a *routes) listHolds(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, []string{"status", "account", "cursor", "limit"}); err != nil {
		return err
	}
	p, _ := httpapi.PrincipalFrom(r.Context())
	accountID, err := eventScope(r)
	if err != nil {
		if p.Operator && r.URL.Query().Get("account") == "" {
			return httpapi.BadRequest("The operator names the account whose holds to list: account=<id>.")
		}
		return err
	}
	status := holds.Status(r.URL.Query().Get("status"))
	if !status.Valid() {
		return httpapi.BadRequest(fmt.Sprintf("status is %s, %s or %s.", holds.Running, holds.Expired, holds.Settled))
	}
	limit, err := httpapi.PageLimit(r, holds.DefaultPageSize, holds.MaxPageSize)
	if err != nil {
		return err
	}
	page, err := a.HoldLister.List(r.Context(), accountID, status, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return err
	}
	items := make([]holds.Body, 0, len(page.Holds))
	for _, h := range page.Holds {
		items = append(items, holds.BodyOf(h))
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "next": httpapi.NextCursor(page.Next)})
}

// billingEventBody is a stored billing event as the API shows it.
type billingEventBody struct {
	ID              string  `json:"id"`
	Source          string  `json:"source"`
	ProviderEventID string  `json:"providerEventId"`
	Type            string  `json:"type"`
	OccurredAt      *string `json:"occurredAt"`
	FirstSeenAt     string  `json:"firstSeenAt"`
	LastSeenAt      string  `json:"lastSeenAt"`
	SeenCount       int     `json:"seenCount"`
	Status          string  `json:"status"`
	Attempts        int     `json:"attempts"`
	AccountID       *string `json:"accountId"`
	Result          string  `json:"result,omitempty"`
	Reason          string  `json:"reason,omitempty"`
	NextAttemptAt   string  `json:"nextAttemptAt,omitempty"`
	// Receipts are shown by GET /v1/billing-events/{id} only.
	Receipts []receiptBody `json:"receipts,omitempty"`
}
type receiptBody struct {
	ReceivedAt    string `json:"receivedAt"`
	Duplicate     bool   `json:"duplicate"`
	WebhookID     string `json:"webhookId,omitempty"`
	KeyID         string `json:"keyId,omitempty"`
	PayloadSHA256 string `json:"payloadSha256"`
}

func newBillingEventBody(e inbox.Event) billingEventBody {
	b := billingEventBody{
		ID: e.ID, Source: string(e.Source), ProviderEventID: e.EventID, Type: e.Type,
		FirstSeenAt: httpapi.RFC3339(e.FirstSeenAtMs), LastSeenAt: httpapi.RFC3339(e.LastSeenAtMs), SeenCount: e.SeenCount,
		Status: string(e.Status), Attempts: e.Attempts, AccountID: nonEmpty(e.AccountID), Result: e.Result, Reason: e.Reason,
	}
	if e.OccurredAtMs != 0 {
		t := httpapi.RFC3339(e.OccurredAtMs)
		b.OccurredAt = &t
	}
	if e.Status == inbox.Failed {
		b.NextAttemptAt = httpapi.RFC3339(e.NextAttemptAtMs)
	}
	return b
}

// scope is who the caller may see events of.
func scope(r *http.Request) inbox.Scope {
	p, _ := httpapi.PrincipalFrom(r.Context())
	if p.Operator {
		return inbox.Scope{Operator: true}
	}
	return inbox.Scope{AccountID: p.Account.ID}
}

// listParams are the query parameters GET /v1/billing-events takes.
var listParams = []string{"account", "status", "cursor", "limit"}

// listBillingEvents is GET /v1/billing-events: an account's own events, or (operator) every
// event or one account's; optionally in one status; newest first, paged by cursor.
func (a *routes) listBillingEvents(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, listParams); err != nil {
		return err
	}
	q := r.URL.Query()
	limit := 0
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || strconv.Itoa(n) != raw {
			return httpapi.BadRequest(fmt.Sprintf("limit must be a whole number from 1 to %d.", inbox.MaxPageSize))
		}
		if n == 0 {
			return httpapi.BadRequest(fmt.Sprintf("limit must be a whole number from 1 to %d.", inbox.MaxPageSize))
		}
		limit = n
	}
	page, err := a.BillingEvents.List(r.Context(), inbox.ListInput{
		Scope: scope(r), AccountID: q.Get("account"), Status: q.Get("status"), Cursor: q.Get("cursor"), Limit: limit,
	})
	if err != nil {
		return err
	}
	items := make([]billingEventBody, 0, len(page.Events))
	for _, e := range page.Events {
		items = append(items, newBillingEventBody(e))
	}
	var next *string
	if page.Next != "" {
		next = &page.Next
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "next": next})
}

// getBillingEvent is GET /v1/billing-events/{id}: the event and its receipts. Another account's
// event answers exactly as an unknown id does.
func (a *routes) getBillingEvent(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	e, receipts, err := a.BillingEvents.Get(r.Context(), scope(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	b := newBillingEventBody(e)
	b.Receipts = make([]receiptBody, 0, len(receipts))
	for _, rc := range receipts {
		b.Receipts = append(b.Receipts, receiptBody{
			ReceivedAt: httpapi.RFC3339(rc.ReceivedAtMs), Duplicate: rc.Duplicate, WebhookID: rc.WebhookID, KeyID: rc.KeyID, PayloadSHA256: rc.PayloadSHA256,
		})
	}
	return httpapi.WriteJSON(w, http.StatusOK, b)
}

// replayBillingEvent is POST /v1/billing-events/{id}/replay: back to RECEIVED, 202. The body,
// if any, must be empty or an empty JSON object.
func (a *routes) replayBillingEvent(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	var none struct{}
	if err := httpapi.DecodeOptionalJSON(r, &none); err != nil {
		return err
	}
	e, err := a.BillingEvents.Replay(r.Context(), scope(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusAccepted, newBillingEventBody(e))
}

// consoleHeaders sets the headers every console answer carries.
func consoleHeaders(w http.ResponseWriter) {
	for k, v := range console.SecurityHeaders {
		w.Header().Set(k, v)
	}
}

// serveAsset answers with an embedded file, or 304 when the client has this version.
func serveAsset(w http.ResponseWriter, r *http.Request, a console.Asset, cache string) error {
	consoleHeaders(w)
	w.Header().Set("Content-Type", a.ContentType)
	w.Header().Set("Cache-Control", cache)
	w.Header().Set("ETag", a.ETag)
	if r.Header.Get("If-None-Match") == a.ETag {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.Body)
	return nil
}

// consolePage is GET /console: the console's one page. It holds no data and no credential, so
// anyone may load it; it shows the sign-in form until a session exists. It is never cached: a
// signed-out page must not come back from a cache.
func (a *routes) consolePage(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	return serveAsset(w, r, a.Console.Assets.Page(), "no-store")
}

// consoleAsset is GET /console/{asset}: a script, style sheet or image of the page. Assets are
// revalidated on every load (their ETag is their hash), so a new build is picked up at once.
func (a *routes) consoleAsset(w http.ResponseWriter, r *http.Request) error {
	asset, ok := a.Console.Assets.Lookup(r.PathValue("asset"))
	if !ok {
		return httpapi.NotFound("The console has no such file.")
	}
	return serveAsset(w, r, asset, "no-cache")
}

// sessionBody is a console session as the API shows it: its expiry and its CSRF token (which the
// page keeps in memory; the session's own token travels only in the HttpOnly cookie).
type sessionBody struct {
	ExpiresAt string `json:"expiresAt"`
	CSRFToken string `json:"csrfToken"`
}

// createSession is POST /v1/sessions: the operator key, as Authorization: Bearer (the route takes
// nothing else), is exchanged for a session. The answer sets the session's cookie and carries its
// CSRF token; the key itself is kept nowhere. Each sign-in makes a new session.
func (a *routes) createSession(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	var none struct{}
	if err := httpapi.DecodeOptionalJSON(r, &none); err != nil {
		return err
	}
	c := a.Console
	token, sess, err := c.Sessions.Create(r.Context())
	if err != nil {
		return err
	}
	http.SetCookie(w, c.Cookie.For(token, sess, a.Now()))
	w.Header().Set("Cache-Control", "no-store")
	return httpapi.WriteJSON(w, http.StatusCreated, sessionBody{ExpiresAt: httpapi.RFC3339(sess.ExpiresAtMs), CSRFToken: sess.CSRF})
}

// errNoSessionHere: the caller is the operator, by key rather than by a console session.
var errNoSessionHere = httpapi.NotFound("There is no console session here: this request came with the operator key, not a session's cookie.")

// getSession is GET /v1/sessions/current: the live session the cookie names, so that a page
// loaded again picks up its CSRF token (a page of another origin cannot read this answer: no
// CORS header allows it, and the SameSite=Strict cookie is not sent with its requests).
func (a *routes) getSession(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	p, _ := httpapi.PrincipalFrom(r.Context())
	if p.Session == nil {
		return errNoSessionHere
	}
	w.Header().Set("Cache-Control", "no-store")
	return httpapi.WriteJSON(w, http.StatusOK, sessionBody{ExpiresAt: httpapi.RFC3339(p.Session.ExpiresAtMs), CSRFToken: p.Session.CSRF})
}

// deleteSession is DELETE /v1/sessions/current: signing out. The session's item is deleted, so its
// cookie stops working in every container at once, and the browser is told to drop the cookie.
func (a *routes) deleteSession(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	p, _ := httpapi.PrincipalFrom(r.Context())
	if p.Session == nil {
		return errNoSessionHere
	}
	c := a.Console
	if err := c.Sessions.End(r.Context(), p.SessionToken); err != nil {
		return err
	}
	http.SetCookie(w, c.Cookie.Cleared())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// labRunBody is one lab run as the console shows it. The lab account's API key is not in it:
// the answer is kept for Idempotency-Key replays, and the operator reaches the account by its id.
type labRunBody struct {
	Lab        string        `json:"lab"`
	OK         bool          `json:"ok"`
	Error      string        `json:"error,omitempty"`
	DurationMs int64         `json:"durationMs"`
	AccountID  string        `json:"accountId,omitempty"`
	Intro      string        `json:"intro"`
	Columns    []string      `json:"columns"`
	Rows       [][]string    `json:"rows"`
	Notes      []string      `json:"notes"`
	Problems   []string      `json:"problems"`
	Failures   []string      `json:"failures"`
	Limit      int64         `json:"limit,omitempty"`
	Jobs       []labJobBody  `json:"jobs,omitempty"`
	Steps      []labStepBody `json:"steps,omitempty"`
}
type labJobBody struct {
	Key        string `json:"key"`
	PlainRan   bool   `json:"plainRan"`
	PlainSpent int64  `json:"plainSpent"`
	Outcome    string `json:"outcome"`
	Spent      int64  `json:"spent"`
	Detail     string `json:"detail,omitempty"`
}
type labStepBody struct {
	N              int          `json:"n"`
	Event          string       `json:"event"`
	Type           string       `json:"type"`
	BillingEventID string       `json:"billingEventId"`
	Duplicate      bool         `json:"duplicate"`
	Note           string       `json:"note"`
	Status         string       `json:"status"`
	Ferry          standingBody `json:"ferry"`
	Naive          standingBody `json:"naive"`
}
type standingBody struct {
	Plan    string `json:"plan"`
	Credits int64  `json:"credits"`
}

func newLabRunBody(run console.Run) labRunBody {
	res := run.Result
	columns := res.Columns
	if len(columns) == 0 {
		columns = []string{"seed (Earmark)", "Ferry"}
	}
	b := labRunBody{
		Lab: run.Lab, OK: run.Err == nil && res.OK(), DurationMs: run.Duration.Milliseconds(), AccountID: res.AccountID,
		Intro: res.Intro, Columns: columns, Rows: [][]string{}, Notes: withoutKey(res.Notes, res.APIKey), Problems: nonNil(res.Problems),
		Failures: nonNil(res.Failures), Limit: res.Limit,
	}
	if run.Err != nil {
		b.Error = run.Err.Error()
	}
	for i, row := range res.Rows {
		cells := []string{row.Name, row.Seed, row.Ferry}
		if i < len(res.More) {
			cells = append(cells, res.More[i]...)
		}
		b.Rows = append(b.Rows, cells)
	}
	for _, j := range res.Jobs {
		b.Jobs = append(b.Jobs, labJobBody{Key: j.Key, PlainRan: j.PlainRan, PlainSpent: j.PlainSpent, Outcome: j.Outcome, Spent: j.Spent, Detail: j.Detail})
	}
	for _, s := range res.Steps {
		b.Steps = append(b.Steps, labStepBody{
			N: s.N, Event: s.Event, Type: s.Type, BillingEventID: s.BillingEventID, Duplicate: s.Duplicate, Note: s.Note, Status: s.Status,
			Ferry: standingBody(s.Ferry), Naive: standingBody(s.Naive),
		})
	}
	return b
}

// withoutKey is the lab's notes with its account's API key withheld.
func withoutKey(notes []string, key string) []string {
	out := make([]string, 0, len(notes))
	for _, n := range notes {
		if key != "" {
			n = strings.ReplaceAll(n, key, "(withheld)")
		}
		out = append(out, n)
	}
	return out
}
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// runLab is POST /v1/labs/{lab}/runs: run one of the console's labs now, against this stack, on a
// fresh account, and answer with what it measured (200 once it ran, whatever its outcome; the
// body says ok or what differs). A lab is bounded in time, and only a few run at once (429).
func (a *routes) runLab(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, nil); err != nil {
		return err
	}
	var none struct{}
	if err := httpapi.DecodeOptionalJSON(r, &none); err != nil {
		return err
	}
	run, err := a.Console.Labs.Run(r.Context(), r.PathValue("lab"))
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, newLabRunBody(run))
}

type eventBody struct {
	ID                string        `json:"id"`
	Status            ledger.Status `json:"status"`
	Cycle             string        `json:"cycle"`
	ReceivedAt        string        `json:"receivedAt"`
	BillingAcceptedAt string        `json:"billingAcceptedAt,omitempty"`
	Reason            string        `json:"reason,omitempty"`
	// Meters are the values a billed event moved, one per meter it matched.
	Meters []meterValueBody `json:"meters,omitempty"`
}

// meterValueBody is what an event moved on one meter.
type meterValueBody struct {
	Meter       string            `json:"meter"`
	Feature     string            `json:"feature,omitempty"`
	Aggregation meter.Aggregation `json:"aggregation,omitempty"`
	Value       int64             `json:"value"`
	Dimensions  map[string]string `json:"dimensions,omitempty"`
	// Distinct is a UNIQUE_COUNT value, and Counted whether this event counted it (its first
	// sighting in the cycle).
	Distinct string `json:"distinct,omitempty"`
	Counted  *bool  `json:"counted,omitempty"`
}

// meterValueBody shows a value as its meter is defined now: its feature, aggregation and the
// names of its dimensions (by position, "1", "2"…, when the definition no longer has as many).
func (a *routes) meterValueBody(mv ledger.MeterValue) meterValueBody {
	b := meterValueBody{Meter: mv.Meter, Value: mv.Value, Distinct: mv.Distinct}
	def, ok := a.Catalog.Meters.Named(mv.Meter)
	if ok {
		b.Feature, b.Aggregation = def.Feature, def.Aggregation
	}
	if len(mv.Group) > 0 {
		b.Dimensions = map[string]string{}
		names := def.Dimensions.Names()
		for i, v := range mv.Group {
			name := fmt.Sprint(i + 1)
			if len(names) == len(mv.Group) {
				name = names[i]
			}
			b.Dimensions[name] = v
		}
	}
	if ok && def.Aggregation == meter.UniqueCount {
		counted := mv.New
		b.Counted = &counted
	}
	return b
}

// getEvent is GET /v1/events/{id}: an account's event (its own; the operator names the account
// with account=). Another account's event answers exactly as an unknown id does.
func (a *routes) getEvent(w http.ResponseWriter, r *http.Request) error {
	if err := httpapi.StrictQuery(r, []string{"account"}); err != nil {
		return err
	}
	accountID, err := eventScope(r)
	if err != nil {
		return err
	}
	e, err := a.Events.Get(r.Context(), accountID, r.PathValue("id"))
	if errors.Is(err, ledger.ErrNotFound) {
		return errNoEvent
	}
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, a.newEventBody(e))
}

type usageBody struct {
	Feature string `json:"feature"`
	// Meter and Aggregation name the meter that moves the feature, if one does (a feature only
	// holds move has none): used is then its figure for the cycle — a sum, a count, the largest
	// value, the number of distinct values, or the latest value.
	Meter       string            `json:"meter,omitempty"`
	Aggregation meter.Aggregation `json:"aggregation,omitempty"`
	Cycle       string            `json:"cycle"`
	Limit       plans.Limit       `json:"limit"`
	Used        int64             `json:"used"`
	Held        int64             `json:"held"`
	Remaining   *int64            `json:"remaining"`
	// Corrections is the sum of the cycle's correction rows: the meter holds used + corrections.
	Corrections int64 `json:"corrections"`
	// Grants are an allowance feature's grant rows in the cycle (allowance features only).
	Grants []grantBody `json:"grants,omitempty"`
}
