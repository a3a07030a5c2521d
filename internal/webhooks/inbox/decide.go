package inbox

import (
	"cmp"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
)

// ClaimVerdict is what a worker may do with an event it was nudged about.
type ClaimVerdict int

// Claim verdicts.
const (
	// ClaimIt: the event is due; claim it under a lease.
	ClaimIt ClaimVerdict = iota + 1
	// AlreadyFinal: APPLIED, IGNORED or DEAD; nothing to do.
	AlreadyFinal
	// Leased: another worker holds a live lease; look again when it lapses (RetryAtMs).
	Leased
	// NotDue: a failed event waiting out its backoff; look again at RetryAtMs.
	NotDue
	// GiveUp: the lease of the event's last attempt lapsed (its worker stopped); it is DEAD.
	GiveUp
)

// ClaimDecision is a verdict and, for Leased and NotDue, when to look again.
type ClaimDecision struct {
	Verdict   ClaimVerdict
	RetryAtMs int64
}

// Claim decides whether an event can be claimed at nowMs. It is the lease check: an event
// under a live lease is never claimed, so two workers never apply one event at once.
func Claim(e Event, nowMs int64) ClaimDecision {
	switch e.Status {
	case Applied, Ignored, Dead:
		return ClaimDecision{Verdict: AlreadyFinal}
	case Processing:
		if nowMs < e.LeaseExpiresAtMs {
			return ClaimDecision{Verdict: Leased, RetryAtMs: e.LeaseExpiresAtMs}
		}
		if e.Attempts >= MaxAttempts {
			return ClaimDecision{Verdict: GiveUp}
		}
		return ClaimDecision{Verdict: ClaimIt}
	default: // Received, Failed
		if nowMs < e.NextAttemptAtMs {
			return ClaimDecision{Verdict: NotDue, RetryAtMs: e.NextAttemptAtMs}
		}
		return ClaimDecision{Verdict: ClaimIt}
	}
}

// AfterFailure is where a claimed event goes when its attempt failed: FAILED until the next
// attempt is due, or DEAD after MaxAttempts attempts.
func AfterFailure(claimed Event, nowMs int64) (Status, int64) {
	if claimed.Attempts >= MaxAttempts {
		return Dead, 0
	}
	wait := Backoff[min(max(claimed.Attempts, 1), len(Backoff))-1]
	return Failed, nowMs + wait.Milliseconds()
}

// ApplyInput is everything an event's effect is decided from, read from durable state after
// the claim.
type ApplyInput struct {
	Event   Event
	Facts   Facts
	Catalog plans.Catalog
	// Account is the account the event's customer is linked to (nil: none is); Link is the
	// provider id it was found by.
	Account *accounts.Account
	Link    CustomerRef
	// Cycles holds, per allowance feature, the grant rows of the account's cycle at the event
	// time, read with their version.
	Cycles map[string]allowance.Cycle
	NowMs  int64
}

// GrantWrite is grant rows to add to one cycle, decided from the rows as read.
type GrantWrite struct {
	Cycle allowance.Cycle
	Add   []allowance.Grant
}

// Decision is an event's effect and its mark, committed together.
type Decision struct {
	// Status is Applied or Ignored.
	Status    Status
	Result    string
	Reason    string
	AccountID string
	// Change, Grants and Mark are the effect (any may be empty).
	Change *accounts.BillingChange
	Grants []GrantWrite
	Mark   *MeterMark
	// Link is the provider id the account was resolved through: every effect commits only while
	// the account is still linked to it (Change carries the condition; without a Change, the
	// transaction checks it on its own).
	Link CustomerRef
	// Notes are what the effect tells the platform (account.plan_changed,
	// account.status_changed), put in the same transaction as the change they report, so they
	// are told exactly when it commits.
	Notes []notify.Notification
}

// Reasons an event is IGNORED. The first is the seed's wording, kept as the contract's.
const (
	ReasonNewerPlan   = "a newer plan change is already stored"
	ReasonNewerStatus = "a newer status change is already stored"
)

// statusOutcome is how a status change compares with the one the account carries.
type statusOutcome int

const (
	statusSet statusOutcome = iota
	statusAlreadyApplied
	statusOvertaken
)

// Decide decides what an event does: a pure function of the event, what it says and the
// durable state read for it.
func Decide(in ApplyInput) Decision {
	f := in.Facts
	ignore := func(reason string) Decision {
		d := Decision{Status: Ignored, Reason: reason}
		if in.Account != nil {
			d.AccountID = in.Account.ID
		}
		return d
	}
	switch {
	case f.Problem != "":
		return ignore(f.Problem)
	case f.Kind == Unhandled:
		return ignore(fmt.Sprintf("Ferry does not handle %s events", f.Type))
	case len(f.Customers) == 0:
		return ignore("the event names no customer")
	case in.Account == nil:
		return ignore(fmt.Sprintf("no account is linked to %s %q; link one (PATCH /v1/accounts/{id}) and replay the event",
			f.Customers[0].Kind.Field(), f.Customers[0].ID))
	case !f.Time.Known():
		return ignore("the event's time cannot be read")
	}
	acct := *in.Account
	key := OrderKey(f.Time, in.Event.Source, in.Event.EventID)
	d := Decision{Status: Applied, AccountID: acct.ID, Link: in.Link}
	change := accounts.BillingChange{AccountID: acct.ID, LinkKind: in.Link.Kind, LinkID: in.Link.ID, NowMs: in.NowMs}
	// setStatus decides a status change by its order key against the one the account carries:
	// newer sets it; the same key is this very event, already applied (an operator's replay);
	// an older one is overtaken. The same key must not be written again: the status condition
	// (a strictly newer key) would refuse it on every attempt.
	setStatus := func(s accounts.Status) statusOutcome {
		switch {
		case acct.StatusChangeKey == key:
			return statusAlreadyApplied
		case acct.StatusChangeKey > key:
			return statusOvertaken
		}
		change.Status, change.FromStatus, change.StatusChangedAtMs, change.StatusChangeKey = s, acct.Status, f.Time.Ms(), key
		return statusSet
	}
	cycleLabel := acct.CycleAt(f.Time.Time()).Label()
	from := acct.PlanOf(in.Catalog)

	switch f.Kind {
	case PlanChange:
		to, problem := targetPlan(in.Event.Source, f, in.Catalog)
		if problem != "" {
			return ignore(problem)
		}
		switch {
		case acct.PlanChangeKey == key:
			d.Result = fmt.Sprintf("already applied: the account's plan (%s) comes from this event", acct.Plan)
			return d
		case acct.PlanChangeKey > key:
			return ignore(ReasonNewerPlan)
		}
		change.Plan, change.FromPlan, change.PlanChangedAtMs, change.PlanChangeKey = to.Name, acct.Plan, f.Time.Ms(), key
		d.Change = &change
		// The plan as stored is what the account showed before (a plan the catalog no longer
		// has included); an event that sets the plan the account is on changes nothing to tell.
		if was := cmp.Or(acct.Plan, from.Name); was != to.Name {
			d.Notes = append(d.Notes, accountChanged(in, notify.PlanChanged, was, to.Name))
		}
		d.Grants = topUps(in, from, to, allowance.Entered)
		d.Result = fmt.Sprintf("plan set to %s", to.Name) + describe(d.Grants, cycleLabel)
	case Payment:
		var parts []string
		switch setStatus(accounts.Active) {
		case statusSet:
			d.Change = &change
			d.Notes = statusNote(in, d.Notes, accounts.Active)
			parts = append(parts, "status active")
		case statusAlreadyApplied:
			parts = append(parts, "status already applied: the account's status ("+string(acct.Status)+") comes from this event")
		default:
			parts = append(parts, "status unchanged ("+ReasonNewerStatus+")")
		}
		switch to, problem := targetPlan(in.Event.Source, f, in.Catalog); {
		case len(f.PlanKeys) == 0:
			parts = append(parts, "the payment names no plan, so it grants nothing")
		case problem != "":
			parts = append(parts, problem+", so it grants nothing")
		default:
			d.Grants = topUps(in, from, to, allowance.Paid)
			if len(d.Grants) == 0 {
				parts = append(parts, fmt.Sprintf("the %s allowance of %s is already granted", to.Name, cycleLabel))
			}
		}
		d.Result = "payment: " + strings.Join(parts, "; ") + describe(d.Grants, cycleLabel)
	case PaymentFailed, InvoiceOverdue:
		status := accounts.PastDue
		if f.Kind == InvoiceOverdue {
			status = accounts.Inactive
		}
		switch setStatus(status) {
		case statusAlreadyApplied:
			d.Result = fmt.Sprintf("already applied: the account's status (%s) comes from this event", acct.Status)
			return d
		case statusOvertaken:
			return ignore(ReasonNewerStatus)
		}
		d.Change = &change
		d.Notes = statusNote(in, d.Notes, status)
		d.Result = "status set to " + string(status)
	case MeterUsage:
		feature := featureForKinde(f.FeatureCode, in.Catalog)
		d.Mark = &MeterMark{AccountID: acct.ID, Feature: feature, Cycle: cycleLabel, EventID: in.Event.ID, MarkedAtMs: in.NowMs}
		what := "every feature"
		if feature != "" {
			what = feature
		}
		d.Result = fmt.Sprintf("provider meter change recorded; %s of %s marked for the reconciler", what, cycleLabel)
	}
	return d
}

// accountChanged is the notification of a change the event makes to the account (kind is
// notify.PlanChanged or notify.StatusChanged): from is the plan or status as read, to what the
// event sets. The transaction's conditions hold the plan (or status) to the value it was read at
// (accounts.BillingChange's FromPlan and FromStatus), so an operator's update landing between the
// read and the commit cancels it, and the decision made again from the account read again tells
// the value the change does replace.
//
// Its key is the event AND the account, so the Put that writes it, in the transaction that
// makes the change, never meets one already there: that transaction commits the change only if
// the event's order key is strictly newer than the account's plan (or status) change key and
// sets that key to the event's, and no other write ever lowers the key (the operator's updates
// leave it alone; accounts are never deleted). So an event changes one account's plan, and its
// status, at most once, however often it is redelivered or replayed (the kind is in the key too,
// so an event that changed both would tell two). Keyed by the event alone,
// a replay after the customer was linked to another account would change that account and meet
// the first account's notification; the condition would then cancel the transaction on every
// attempt, and the event would end DEAD for nothing.
func accountChanged(in ApplyInput, kind notify.Kind, from, to string) notify.Notification {
	return notify.Notification{
		Kind: kind, Account: in.Account.ID, AtMs: in.NowMs, Subject: in.Event.ID + "#" + in.Account.ID,
		Detail: notify.Detail{Event: in.Event.ID, EventType: in.Event.Type, From: from, To: to},
	}
}

// statusNote adds account.status_changed to notes when setting status changes the account's
// status as read: a payment for an account that is already active tells nothing.
func statusNote(in ApplyInput, notes []notify.Notification, status accounts.Status) []notify.Notification {
	if in.Account.Status == status {
		return notes
	}
	return append(notes, accountChanged(in, notify.StatusChanged, string(in.Account.Status), string(status)))
}

// deadNote is billing_event.dead for an event about to be written DEAD, told for account (the
// account the event was resolved to; "" when none is known, and the notification names none).
// Its key is the event and how often it was replayed, not the account. The DEAD mark is
// conditioned on the revision read and DEAD is final, so an event goes DEAD at most once between
// two replays: the workers that decide one death (one whose write failed, then the one that
// gives up after its lease, which may know no account where the first knew one) tell one
// notification, and an event that dies again after a replay is told again.
func deadNote(e Event, account string, atMs int64) notify.Notification {
	return notify.Notification{
		Kind: notify.BillingEventDead, Account: account, AtMs: atMs, Subject: e.ID + "#" + strconv.Itoa(e.Replays),
		Detail: notify.Detail{Event: e.ID, EventType: e.Type, Reason: e.Reason},
	}
}

// targetPlan is the catalog plan an event moves to (or pays for).
func targetPlan(source Source, f Facts, catalog plans.Catalog) (plans.Plan, string) {
	if f.ToDefault {
		p, _ := catalog.Plan(catalog.Default)
		return p, ""
	}
	if len(f.PlanKeys) == 0 {
		return plans.Plan{}, "the event names no plan"
	}
	for _, key := range f.PlanKeys {
		var p plans.Plan
		var ok bool
		switch source {
		case Kinde:
			p, ok = catalog.PlanForKindeKey(key)
		case Stripe:
			p, ok = catalog.PlanForStripePrice(key)
		}
		if ok {
			return p, ""
		}
	}
	what := map[Source]string{Kinde: "Kinde plan key", Stripe: "Stripe price"}[source]
	return plans.Plan{}, fmt.Sprintf("the %s %s names no plan in the catalog", what, strings.Join(quoteAll(f.PlanKeys), ", "))
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// featureForKinde maps a Kinde billing feature code to the catalog feature metered under it
// ("" when it names none).
func featureForKinde(code string, catalog plans.Catalog) string {
	if code == "" {
		return ""
	}
	features := make([]string, 0, len(catalog.Definitions))
	for f := range catalog.Definitions {
		features = append(features, f)
	}
	sort.Strings(features)
	for _, f := range features {
		if d := catalog.Definitions[f]; d.Kinde != nil && d.Kinde.FeatureCode == code {
			return f
		}
	}
	return ""
}

// topUps are the grant rows that entering (or paying for) plan to adds, per allowance feature.
func topUps(in ApplyInput, from, to plans.Plan, reason allowance.Reason) []GrantWrite {
	var out []GrantWrite
	for _, feature := range in.Catalog.AllowanceFeatures() {
		c := in.Cycles[feature]
		if add := allowance.TopUp(c, from, to, reason, in.Event.ID, in.NowMs); len(add) > 0 {
			out = append(out, GrantWrite{Cycle: c, Add: add})
		}
	}
	return out
}

// describe says what grant rows an effect writes, for the stored result.
func describe(grants []GrantWrite, cycleLabel string) string {
	var parts []string
	for _, g := range grants {
		for _, row := range g.Add {
			if row.Reason == allowance.Opening {
				parts = append(parts, fmt.Sprintf("%s %s opened with %s %d", g.Cycle.Feature, cycleLabel, row.Plan, row.Amount))
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %s +%d for %s", g.Cycle.Feature, cycleLabel, row.Amount, row.Plan))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// RetryAt is the delay before an event is due again, bounded by what a queue message can be
// delayed (longer waits are left to the sweep).
func RetryAt(nowMs, atMs int64) time.Duration {
	wait := time.Duration(max(0, atMs-nowMs)) * time.Millisecond
	return min(wait, maxDelaySeconds*time.Second)
}
