// Package accounts owns Ferry's accounts: their plan, status, limit overrides and agreement day,
// and their API keys, which are stored only as SHA-256 hashes.
package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Status of an account.
type Status string

// Statuses. A past_due account (a payment failed) still spends: the provider retries the
// payment and the customer is in grace. An inactive one (deactivated, or its invoice overdue)
// spends nothing.
const (
	Active   Status = "active"
	PastDue  Status = "past_due"
	Inactive Status = "inactive"
)

// LinkKind names a kind of billing-provider id an account can be linked to. Each id of a kind
// names at most one account.
type LinkKind string

// Link kinds.
const (
	// KindeCustomer is a Kinde customer id (data.customer_id in Kinde's billing webhooks).
	KindeCustomer LinkKind = "kindeCustomer"
	// StripeCustomer is a Stripe customer id (cus_…).
	StripeCustomer LinkKind = "stripeCustomer"
	// KindeAgreement is a Kinde customer agreement id, which Kinde's meter usage is recorded on.
	KindeAgreement LinkKind = "kindeAgreement"
)

// LinkKinds lists every link kind.
var LinkKinds = []LinkKind{KindeCustomer, StripeCustomer, KindeAgreement}

// Field is the link's JSON field name and stored attribute ("kindeCustomerId").
func (k LinkKind) Field() string { return string(k) + "Id" }

// Account is one customer account.
type Account struct {
	ID     string
	Plan   string
	Status Status
	// Limits are the account's overrides of its plan's limits, by feature.
	Limits map[string]plans.Limit
	// Alerts are the account's overrides of its plan's thresholds, by feature (an empty list:
	// none).
	Alerts map[string][]plans.Threshold
	// AgreementDay anchors the account's billing cycles (1–28); 0 means calendar months.
	AgreementDay int
	CreatedAtMs  int64
	UpdatedAtMs  int64
	// UsageStartedAtMs is set once, by the first usage; after it the agreement day is fixed.
	UsageStartedAtMs int64
	// Provider ids linked to the account ("" when not linked); each names at most one account.
	KindeCustomerID  string
	StripeCustomerID string
	KindeAgreementID string
	// PlanChangedAtMs is the provider's event time of the plan change the account is on (0: the
	// plan was never changed by a provider event). A plan change older than it is not applied.
	PlanChangedAtMs int64
	// StatusChangedAtMs is the provider's event time of the last status change applied from a
	// billing event (a failed payment, an overdue invoice, a payment).
	StatusChangedAtMs int64
	// PlanChangeKey and StatusChangeKey order the billing events that changed the plan and the
	// status: the exact event time (nanoseconds) and the event's identity, comparable as
	// strings (see the inbox). A billing event changes either only if its key is greater.
	PlanChangeKey   string
	StatusChangeKey string
	// Known is false for an account Ferry has no record of (it is billed on the default plan).
	Known bool
}

// Link returns the id of a kind the account is linked to ("" if none).
func (a Account) Link(kind LinkKind) string {
	switch kind {
	case KindeCustomer:
		return a.KindeCustomerID
	case StripeCustomer:
		return a.StripeCustomerID
	case KindeAgreement:
		return a.KindeAgreementID
	}
	return ""
}

// setLink sets the id of a kind on the account.
func (a *Account) setLink(kind LinkKind, id string) {
	switch kind {
	case KindeCustomer:
		a.KindeCustomerID = id
	case StripeCustomer:
		a.StripeCustomerID = id
	case KindeAgreement:
		a.KindeAgreementID = id
	}
}

// Unknown is the account Ferry assumes for an id it has no record of: the catalog's default
// plan, active, with no overrides.
func Unknown(id string, catalog plans.Catalog) Account {
	return Account{ID: id, Plan: catalog.Default, Status: Active}
}

// Limit is the account's effective limit for a feature: its override, or its plan's limit.
func (a Account) Limit(feature string, catalog plans.Catalog) plans.Limit {
	if l, ok := a.Limits[feature]; ok {
		return l
	}
	p, ok := catalog.Plan(a.Plan)
	if !ok {
		p, _ = catalog.Plan(catalog.Default)
	}
	return p.Limit(feature)
}

// Levels are the account's thresholds of a feature, resolved against its limit, lowest first:
// its override, or its plan's (plans.Plan.Thresholds). An account on a plan that is not capped
// has none.
func (a Account) Levels(feature string, catalog plans.Catalog) []plans.Level {
	p, ok := catalog.Plan(a.Plan)
	if !ok {
		p, _ = catalog.Plan(catalog.Default)
	}
	ts := p.Thresholds(feature)
	if o, ok := a.Alerts[feature]; ok && ts != nil {
		ts = o
	}
	return plans.Levels(ts, a.Limit(feature, catalog))
}

// EffectiveLimits returns the effective limit of every feature in the catalog but the
// allowance features, whose limit is per cycle, the sum of the cycle's grant rows (GET
// /v1/usage shows it).
func (a Account) EffectiveLimits(catalog plans.Catalog) map[string]plans.Limit {
	out := map[string]plans.Limit{}
	for _, f := range catalog.Features() {
		if catalog.Allowance(f) {
			continue
		}
		out[f] = a.Limit(f, catalog)
	}
	return out
}

// PlanOf returns the account's plan (the default plan if its plan left the catalog).
func (a Account) PlanOf(catalog plans.Catalog) plans.Plan {
	if p, ok := catalog.Plan(a.Plan); ok {
		return p
	}
	p, _ := catalog.Plan(catalog.Default)
	return p
}

// CycleAt returns the account's billing cycle containing t.
func (a Account) CycleAt(t time.Time) cycle.Cycle { return cycle.At(t, a.AgreementDay) }

// ErrInactive is the account status rule, the one place it is stated: an inactive account
// records no new usage (a past_due one still spends, see the statuses). Every way of spending
// asks CanSpend — a new event (the ingest gate, and the worker, which stores the rule's message
// as the reason of the event it rejects), a new hold, a charge step on a running hold, and a
// settlement that reports more usage than the hold's charges recorded. What is recorded stays
// recorded: a hold admitted before the deactivation may still be settled at (or below) its
// recorded usage, which releases the rest, and the sweeper settles such holds when their leases
// lapse, as it settles every hold.
var ErrInactive = problem.New(problem.AccountInactive,
	"the account is inactive, and an inactive account records no new usage",
	"The account is inactive, and an inactive account records no new usage: no new event, hold or charge. "+
		"A running hold can still be settled at the usage its charges recorded.")

// CanSpend applies the status rule: ErrInactive for an inactive account, nil otherwise.
func (a Account) CanSpend() error {
	if a.Status == Inactive {
		return ErrInactive
	}
	return nil
}

// Errors. Adapters translate DynamoDB outcomes into these; each carries its kind and what a
// caller is told, which the HTTP layer maps to a problem document.
var (
	ErrNotFound = problem.New(problem.NotFound, "account not found", "No such resource.")
	// ErrLinkContended: the account's links kept changing under a concurrent update.
	ErrLinkContended = problem.New(problem.Unavailable, "the account's links changed concurrently",
		"The account's linked ids changed while this request ran, so nothing was changed; retry it.")
	ErrExists          = problem.New(problem.Conflict, "account already exists", "An account with this id already exists.")
	ErrAgreementLocked = problem.New(problem.AgreementLocked, "the agreement start cannot change after the first usage",
		"The agreement start cannot change after the account's first usage.")
	ErrUnauthenticated = problem.New(problem.Unauthenticated, "unknown API key", "The API key is not valid.")
)

// LinkTakenError is a provider id that already names another account. Nothing was changed.
type LinkTakenError struct {
	Link LinkKind
	ID   string
}

func (e *LinkTakenError) Error() string {
	return fmt.Sprintf("%s %q is linked to another account", e.Link.Field(), e.ID)
}

// Kind implements problem.Error: an id names at most one account.
func (e *LinkTakenError) Kind() problem.Kind { return problem.Conflict }

// Public implements problem.Describer: the caller learns which field is taken.
func (e *LinkTakenError) Public() problem.Public {
	return problem.Public{
		Detail: "The " + e.Link.Field() + " " + strconv.Quote(e.ID) + " is linked to another account; unlink it there first.",
		Facts:  map[string]any{"field": e.Link.Field()},
	}
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// prefixPattern is what the start of an account id may look like (a search).
var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ValidID reports whether id can name an account: 1–64 letters, digits, '_' or '-', starting with
// a letter or digit. Event ledger keys rely on ids never containing '#'.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// linkPattern is what a provider id may look like: Stripe's (cus_…) and Kinde's
// (customer_…, agreement_…) ids are letters, digits and underscores; '-' and '.' are allowed for
// other providers' shapes. Never '#', which the link store's keys are built with.
var linkPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$`)

// ValidLinkID reports whether id can be a linked provider id.
func ValidLinkID(id string) bool { return linkPattern.MatchString(id) }

// CreateInput creates an account.
type CreateInput struct {
	ID     string
	Plan   string
	Status Status
	Limits map[string]plans.Limit
	// Alerts are the account's overrides of its plan's thresholds, by feature.
	Alerts map[string][]plans.Threshold
	// Links are the provider ids to link, by kind (absent or "": not linked).
	Links map[LinkKind]string
}

// Validate returns every problem with the input at once.
func (in CreateInput) Validate(catalog plans.Catalog) error {
	var problems []string
	if !ValidID(in.ID) {
		problems = append(problems, "id must be 1–64 letters, digits, '_' or '-', starting with a letter or digit")
	}
	problems = append(problems, validPlan(in.Plan, catalog)...)
	problems = append(problems, validStatus(in.Status)...)
	problems = append(problems, validLimits(in.Limits, catalog)...)
	problems = append(problems, validAlerts(in.Alerts, catalog)...)
	problems = append(problems, validLinks(refs(in.Links), false)...)
	return problem.Fields(problems)
}

// UpdateInput changes an account; nil fields stay as they are.
type UpdateInput struct {
	Plan   *string
	Status *Status
	// Limits replaces the account's overrides when set.
	Limits *map[string]plans.Limit
	// Alerts replaces the account's threshold overrides when set.
	Alerts       *map[string][]plans.Threshold
	AgreementDay *int
	// Links changes the linked provider ids, by kind: an id links it, nil unlinks.
	Links map[LinkKind]*string
}

// Validate returns every problem with the input at once.
func (in UpdateInput) Validate(catalog plans.Catalog) error {
	var problems []string
	if in.Plan != nil {
		problems = append(problems, validPlan(*in.Plan, catalog)...)
	}
	if in.Status != nil {
		problems = append(problems, validStatus(*in.Status)...)
	}
	if in.Limits != nil {
		problems = append(problems, validLimits(*in.Limits, catalog)...)
	}
	if in.Alerts != nil {
		problems = append(problems, validAlerts(*in.Alerts, catalog)...)
	}
	if in.AgreementDay != nil && !cycle.ValidAnchor(*in.AgreementDay) {
		problems = append(problems, fmt.Sprintf("agreementStart must be a day of the month from %d to %d", cycle.MinAnchorDay, cycle.MaxAnchorDay))
	}
	problems = append(problems, validLinks(in.Links, true)...)
	if in.Plan == nil && in.Status == nil && in.Limits == nil && in.Alerts == nil && in.AgreementDay == nil && len(in.Links) == 0 {
		problems = append(problems, "nothing to change: send plan, status, limits, alerts, agreementStart or a linked id")
	}
	return problem.Fields(problems)
}

func validPlan(plan string, catalog plans.Catalog) []string {
	if _, ok := catalog.Plan(plan); !ok {
		return []string{fmt.Sprintf("plan must be one of %s", strings.Join(catalog.Names(), ", "))}
	}
	return nil
}

func validStatus(s Status) []string {
	if s != Active && s != PastDue && s != Inactive {
		return []string{`status must be "active", "past_due" or "inactive"`}
	}
	return nil
}

// validLinks checks the linked ids of a request; nil (unlink) is allowed in an update only.
func validLinks(links map[LinkKind]*string, update bool) []string {
	var problems []string
	for _, kind := range LinkKinds {
		ref, ok := links[kind]
		if !ok || (ref == nil && update) {
			continue
		}
		id := ""
		if ref != nil {
			id = *ref
		}
		if !ValidLinkID(id) {
			problems = append(problems, fmt.Sprintf("%s must be 1–255 letters, digits, '_', '-' or '.', starting with a letter or digit", kind.Field()))
		}
	}
	for kind := range links {
		if !knownLink(kind) {
			// A programmer error: handlers build links from named fields only.
			problems = append(problems, fmt.Sprintf("unknown link kind %q", kind))
		}
	}
	return problems
}

// refs turns a create's links into the update form, for validLinks.
func refs(in map[LinkKind]string) map[LinkKind]*string {
	out := make(map[LinkKind]*string, len(in))
	for k, v := range in {
		out[k] = &v
	}
	return out
}

func knownLink(kind LinkKind) bool {
	for _, k := range LinkKinds {
		if k == kind {
			return true
		}
	}
	return false
}

func validLimits(limits map[string]plans.Limit, catalog plans.Catalog) []string {
	var problems []string
	features := make([]string, 0, len(limits))
	for f := range limits {
		features = append(features, f)
	}
	sort.Strings(features)
	for _, f := range features {
		switch {
		case !catalog.HasFeature(f):
			problems = append(problems, fmt.Sprintf("limits.%s: unknown feature (known: %s)", f, strings.Join(catalog.Features(), ", ")))
		case catalog.Allowance(f):
			problems = append(problems, fmt.Sprintf("limits.%s: an allowance's limit is the sum of its cycle's grant rows and cannot be overridden", f))
		}
	}
	return problems
}

// validAlerts checks an account's threshold overrides: per feature a plan has and that is not an
// allowance, thresholds as plans.CheckThresholds takes them (an empty list: none).
func validAlerts(alerts map[string][]plans.Threshold, catalog plans.Catalog) []string {
	var problems []string
	features := make([]string, 0, len(alerts))
	for f := range alerts {
		features = append(features, f)
	}
	sort.Strings(features)
	for _, f := range features {
		switch {
		case !catalog.HasFeature(f):
			problems = append(problems, fmt.Sprintf("alerts.%s: unknown feature (known: %s)", f, strings.Join(catalog.Features(), ", ")))
		case catalog.Allowance(f):
			problems = append(problems, fmt.Sprintf("alerts.%s: an allowance has no thresholds", f))
		}
		if err := plans.CheckThresholds(alerts[f]); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				problems = append(problems, fmt.Sprintf("alerts.%s: %s", f, line))
			}
		}
	}
	return problems
}

// EffectiveAlerts are the thresholds of every feature that has any: the account's overrides or
// its plan's (plans.Plan.Thresholds; only a capped plan's features have thresholds).
func (a Account) EffectiveAlerts(catalog plans.Catalog) map[string][]plans.Threshold {
	p, ok := catalog.Plan(a.Plan)
	if !ok {
		p, _ = catalog.Plan(catalog.Default)
	}
	out := map[string][]plans.Threshold{}
	for _, f := range catalog.Features() {
		ts := p.Thresholds(f)
		if ts == nil {
			continue
		}
		if o, ok := a.Alerts[f]; ok {
			ts = append([]plans.Threshold{}, o...) // an empty override reads back as none, not null
		}
		out[f] = ts
	}
	return out
}

// Store persists accounts and keys. The DynamoDB adapter implements it.
type Store interface {
	// Create stores the account and its key hash together, or neither (ErrExists).
	Create(ctx context.Context, a Account, keyHash string) error
	Get(ctx context.Context, id string) (Account, error)
	Update(ctx context.Context, id string, in UpdateInput, nowMs int64) (Account, error)
	AccountIDForKey(ctx context.Context, keyHash string) (string, error)
	// AccountIDForLink returns the account a provider id is linked to (ErrNotFound if none).
	AccountIDForLink(ctx context.Context, kind LinkKind, id string) (string, error)
	// MarkUsageStarted records the first usage once and returns the account as stored after it.
	// It is called only for an account that was read (Known), and accounts are never deleted,
	// so it carries no condition that the account exists.
	MarkUsageStarted(ctx context.Context, id string, nowMs int64) (Account, error)
	// List returns a page of accounts in id order, those whose id starts with prefix.
	List(ctx context.Context, prefix, cursor string, limit int) (Page, error)
}

// Service is the accounts use cases.
type Service struct {
	Store   Store
	Catalog plans.Catalog
	Now     func() time.Time
}

// Create creates an account and returns it with its API key, which is shown only this once.
func (s *Service) Create(ctx context.Context, in CreateInput) (Account, string, error) {
	if in.Status == "" {
		in.Status = Active
	}
	if in.Plan == "" {
		in.Plan = s.Catalog.Default
	}
	if err := in.Validate(s.Catalog); err != nil {
		return Account{}, "", err
	}
	key, err := NewAPIKey()
	if err != nil {
		return Account{}, "", err
	}
	now := s.Now().UnixMilli()
	a := Account{
		ID: in.ID, Plan: in.Plan, Status: in.Status, Limits: in.Limits, Alerts: in.Alerts,
		CreatedAtMs: now, UpdatedAtMs: now, Known: true,
	}
	for kind, id := range in.Links {
		a.setLink(kind, id)
	}
	if err := s.Store.Create(ctx, a, HashKey(key)); err != nil {
		return Account{}, "", err
	}
	return a, key, nil
}

// Get returns a stored account (ErrNotFound if none).
func (s *Service) Get(ctx context.Context, id string) (Account, error) {
	if !ValidID(id) {
		return Account{}, ErrNotFound
	}
	return s.Store.Get(ctx, id)
}

// GetOrUnknown returns the stored account, or the default-plan account for an unknown id.
func (s *Service) GetOrUnknown(ctx context.Context, id string) (Account, error) {
	a, err := s.Store.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Unknown(id, s.Catalog), nil
	}
	return a, err
}

// Update applies a change. The agreement day cannot change after the first usage.
func (s *Service) Update(ctx context.Context, id string, in UpdateInput) (Account, error) {
	if err := in.Validate(s.Catalog); err != nil {
		return Account{}, err
	}
	if !ValidID(id) {
		return Account{}, ErrNotFound
	}
	return s.Store.Update(ctx, id, in, s.Now().UnixMilli())
}

// Linked returns the account a provider id is linked to (ErrNotFound if none).
func (s *Service) Linked(ctx context.Context, kind LinkKind, id string) (Account, error) {
	if !knownLink(kind) || !ValidLinkID(id) {
		return Account{}, ErrNotFound
	}
	accountID, err := s.Store.AccountIDForLink(ctx, kind, id)
	if err != nil {
		return Account{}, err
	}
	a, err := s.Store.Get(ctx, accountID)
	if err != nil {
		return Account{}, err
	}
	if a.Link(kind) != id {
		// The link item and the account are written in one transaction, so they agree; an
		// account that disagrees was changed by hand and names no account for this id.
		return Account{}, ErrNotFound
	}
	return a, nil
}

// Authenticate returns the account an API key belongs to.
func (s *Service) Authenticate(ctx context.Context, key string) (Account, error) {
	if !strings.HasPrefix(key, keyPrefix) || len(key) > maxKeyLength {
		return Account{}, ErrUnauthenticated
	}
	id, err := s.Store.AccountIDForKey(ctx, HashKey(key))
	if err != nil {
		return Account{}, err
	}
	a, err := s.Store.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Account{}, ErrUnauthenticated
	}
	return a, err
}

// EnsureUsageStarted fixes the account's agreement day at its first usage and returns the
// account as stored: after this, the cycle an instant falls in can no longer change. Only the
// first usage pays for the write.
func (s *Service) EnsureUsageStarted(ctx context.Context, a Account, now time.Time) (Account, error) {
	if !a.Known || a.UsageStartedAtMs != 0 {
		return a, nil
	}
	return s.Store.MarkUsageStarted(ctx, a.ID, now.UnixMilli())
}

// API keys are "fk_" and 43 characters of base64url: 256 random bits, so a fast hash is enough
// to store them (there is nothing to brute-force).
const (
	keyPrefix    = "fk_"
	keyBytes     = 32
	maxKeyLength = 128
)

// NewAPIKey returns a fresh random API key.
func NewAPIKey() (string, error) {
	b := make([]byte, keyBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate API key: %w", err)
	}
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// HashKey is the stored form of an API key.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}
