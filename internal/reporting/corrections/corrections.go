// Package corrections appends corrections to the ledger. Nothing is deleted to correct usage: a
// correction is a new row of ± units in the cycle it corrects, stored beside the counters it
// corrects (the cycle's usage partition), marked for the reporter like any write that changes a
// billed total, and kept. A correction names itself by the caller's Idempotency-Key, so a retry
// finds the row it already wrote instead of writing a second one. A correction for a closed cycle
// is stored too — the ledger is the record — but no provider is written for it: it goes to the
// review list.
//
// Two rules bound what a correction may say, both decided from durable state:
//
//   - A negative correction takes back at most the cycle's usage: the ledger's total for the
//     account, feature and cycle — its counted usage plus every earlier correction — may not go
//     below zero. A correction is decided on totals read after the cycle's corrections head, and
//     commits in one transaction with the head only while no other correction has committed
//     since (usage.Table.PutCorrection), so two negative corrections that each fit cannot both
//     commit; the second is decided again on fresh totals.
//   - A correction names a cycle of the account's life: not one that has not started, and not one
//     that ended before the account was created (the earliest is the cycle, under the account's
//     agreement day, that contains its creation). Ferry records usage only for an account that
//     exists, so an earlier cycle holds nothing to correct.
package corrections

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/cycle"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/retry"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

// Limits of a correction.
const (
	// MaxUnits bounds one correction, as holds bound one hold: every sum stays far below 2^53.
	MaxUnits = 1_000_000_000_000
	// MaxReasonLength bounds the reason, in characters.
	MaxReasonLength = 500
)

// Input is one correction as asked for.
type Input struct {
	Account string
	Feature string
	// Units is the signed correction (non-zero).
	Units  int64
	Reason string
	// Cycle names the corrected cycle ("2026-10"); empty means the account's current cycle.
	Cycle string
	// IdempotencyKey is the caller's key; it names the correction.
	IdempotencyKey string
}

// Validate returns every problem with the input at once.
func (in Input) Validate(catalog plans.Catalog) error {
	var problems []string
	if !accounts.ValidID(in.Account) {
		problems = append(problems, "account must be an account id")
	}
	if in.Feature == "" {
		problems = append(problems, "feature is required")
	} else if !catalog.HasFeature(in.Feature) {
		problems = append(problems, fmt.Sprintf("feature %q is unknown (known: %s)", in.Feature, strings.Join(catalog.Features(), ", ")))
	}
	if in.Units == 0 || in.Units > MaxUnits || in.Units < -MaxUnits {
		problems = append(problems, fmt.Sprintf("units must be a non-zero integer from -%d to %d", int64(MaxUnits), int64(MaxUnits)))
	}
	switch n := utf8.RuneCountInString(in.Reason); {
	case strings.TrimSpace(in.Reason) == "":
		problems = append(problems, "reason is required: say why the usage is corrected")
	case n > MaxReasonLength:
		problems = append(problems, fmt.Sprintf("reason must be at most %d characters", MaxReasonLength))
	case !utf8.ValidString(in.Reason) || strings.IndexFunc(in.Reason, func(r rune) bool { return unicode.IsControl(r) && r != '\n' }) >= 0:
		problems = append(problems, "reason must be valid UTF-8 without control characters")
	}
	if in.Cycle != "" {
		if _, err := cycle.Parse(in.Cycle, 0); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if in.IdempotencyKey == "" {
		problems = append(problems, "an Idempotency-Key is required: a retried correction without one would be applied twice")
	}
	return problem.Fields(problems)
}

// ErrKeyReused: the Idempotency-Key already names a different correction of this cycle.
var ErrKeyReused = problem.New(problem.IdempotencyKeyReused, "this Idempotency-Key already names a different correction",
	"This Idempotency-Key already names a different correction of this cycle; send a new key for a new correction.")

// ErrContended: the cycle's corrections kept changing under this one through every bounded try.
var ErrContended = problem.New(problem.Unavailable, "the cycle's corrections kept changing",
	"Other corrections of this cycle kept landing while this one was decided, so nothing was stored; retry it.")

// BelowZero is the rule for a negative correction, a pure decision: it may take back at most what
// the cycle holds (its usage plus earlier corrections), so the billed total never goes below
// zero. It returns the refusal (a *BelowZeroError), or nil. A positive correction is never
// refused by it.
func BelowZero(t usage.Totals, cycleLabel, feature string, units int64) error {
	if units >= 0 || t.Billed()+units >= 0 {
		return nil
	}
	return &BelowZeroError{Totals: t, Cycle: cycleLabel, Feature: feature, Units: units}
}

// BelowZeroError refuses a negative correction larger than what its cycle holds. It is a conflict
// with the cycle's state, not a malformed request: the same correction fits once the cycle holds
// enough, so it answers 409 (`conflict`) with the cycle's totals as `usage`, `used` and
// `corrections`.
type BelowZeroError struct {
	Totals  usage.Totals
	Cycle   string
	Feature string
	Units   int64
}

func (e *BelowZeroError) Error() string {
	return fmt.Sprintf("a correction of %d would take the %s usage of cycle %s below zero: the cycle holds %d "+
		"(used %d, corrections %+d), so a negative correction can take back at most %d", e.Units, e.Feature, e.Cycle,
		e.Totals.Billed(), e.Totals.Used, e.Totals.Corrections, max(e.Totals.Billed(), 0))
}

// Kind is Conflict: the refusal depends on the cycle's totals, not on the request's shape.
func (e *BelowZeroError) Kind() problem.Kind { return problem.Conflict }

// Public names the cycle's totals so the caller can correct by what it holds.
func (e *BelowZeroError) Public() problem.Public {
	return problem.Public{Detail: e.Error(), Facts: map[string]any{
		"usage": e.Totals.Billed(), "used": e.Totals.Used, "corrections": e.Totals.Corrections}}
}

// Earliest is the first cycle of the account that a correction may name: the cycle, under its
// agreement day, that contains the account's creation (or its first usage, for a record kept
// without its creation time). ok is false when the account records neither: nothing of it can
// be corrected.
func Earliest(acct accounts.Account) (c cycle.Cycle, ok bool) {
	startMs := acct.CreatedAtMs
	if acct.UsageStartedAtMs != 0 && (startMs == 0 || acct.UsageStartedAtMs < startMs) {
		startMs = acct.UsageStartedAtMs
	}
	if startMs == 0 {
		return cycle.Cycle{}, false
	}
	return acct.CycleAt(time.UnixMilli(startMs)), true
}

// beforeAccount refuses a cycle that ended before the account's first cycle began.
func beforeAccount(acct accounts.Account, c cycle.Cycle) error {
	first, ok := Earliest(acct)
	switch {
	case !ok:
		return problem.Input(fmt.Sprintf("account %s records neither its creation nor a first usage, so no cycle of it can be corrected", acct.ID))
	case c.Start.Before(first.Start):
		return &problem.InputError{
			Problems: []string{fmt.Sprintf("cycle %s ended before account %s existed: its first cycle is %s", c.Label(), acct.ID, first.Label())},
			Facts:    map[string]any{"earliestCycle": first.Label()},
		}
	}
	return nil
}

// Correction is a stored correction.
type Correction struct {
	ID          string
	Account     string
	Feature     string
	Cycle       string
	Units       int64
	Reason      string
	CreatedAtMs int64
	// Closed: the cycle had ended; no provider is written for it and it is on the review list.
	Closed bool
}

// Service appends corrections.
type Service struct {
	Usage    usage.Table
	Accounts interface {
		Get(ctx context.Context, id string) (accounts.Account, error)
	}
	Catalog plans.Catalog
	Review  interface {
		Add(ctx context.Context, e review.Entry) (bool, error)
	}
	Now func() time.Time
}

// ID names the correction an Idempotency-Key asks for: 26 characters of base32 of its SHA-256.
func ID(idempotencyKey string) string {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
}

// Apply appends the correction, or returns the one its key already wrote (created false). A
// correction that breaks a rule of the package is refused, and nothing is stored.
func (s *Service) Apply(ctx context.Context, in Input) (c Correction, created bool, err error) {
	if err := in.Validate(s.Catalog); err != nil {
		return Correction{}, false, err
	}
	acct, err := s.Accounts.Get(ctx, in.Account)
	if err != nil {
		return Correction{}, false, err
	}
	now := s.Now()
	cy := acct.CycleAt(now)
	if in.Cycle != "" {
		if cy, err = cycle.Parse(in.Cycle, acct.AgreementDay); err != nil {
			return Correction{}, false, problem.Input(err.Error())
		}
		if cy.Start.After(now) {
			return Correction{}, false, problem.Input(fmt.Sprintf("cycle %s has not started: only usage that happened can be corrected", in.Cycle))
		}
	}
	if err := beforeAccount(acct, cy); err != nil {
		return Correction{}, false, err
	}
	c = Correction{
		ID: ID(in.IdempotencyKey), Account: acct.ID, Feature: in.Feature, Cycle: cy.Label(), Units: in.Units,
		Reason: in.Reason, CreatedAtMs: now.UnixMilli(), Closed: cy.Closed(now),
	}
	keyHash := sha256.Sum256([]byte(in.IdempotencyKey))
	row := usage.Correction{
		AccountID: c.Account, Feature: c.Feature, Cycle: c.Cycle, ID: c.ID, Units: c.Units, Reason: c.Reason,
		KeyHash: fmt.Sprintf("%x", keyHash[:8]), CreatedAtMs: c.CreatedAtMs,
	}
	// Each lap reads the totals, decides, and writes on what it read; a correction that landed in
	// between cancels the write, and the next lap decides again.
	replayed, err := retry.Do(ctx, retry.Contended, func(ctx context.Context, _ retry.Lap) (bool, error) {
		basis, err := s.Usage.ReadCorrectionBasis(ctx, c.Account, c.Feature, c.Cycle)
		if err != nil {
			return false, err
		}
		if refusal := BelowZero(basis.Totals, c.Cycle, c.Feature, c.Units); refusal != nil {
			// A retry of a correction already stored reads totals that include it: answer it
			// as stored, not as a new correction past the usage.
			if _, ok, err := s.prior(ctx, c); err != nil || ok {
				return ok, err
			}
			return false, refusal
		}
		err = s.Usage.PutCorrection(ctx, row, basis)
		switch {
		case errors.Is(err, usage.ErrCorrectionExists):
			_, ok, err := s.prior(ctx, c)
			if err == nil && !ok {
				err = fmt.Errorf("correction %s: refused as existing, and not found", c.ID)
			}
			return true, err
		case errors.Is(err, usage.ErrCorrectionsChanged):
			return false, retry.Again(err)
		}
		return false, err
	})
	if errors.Is(err, retry.ErrExhausted) {
		return Correction{}, false, fmt.Errorf("%w: %w", ErrContended, err)
	}
	if err != nil {
		return Correction{}, false, err
	}
	if replayed {
		prior, _, err := s.prior(ctx, c)
		if err != nil {
			return Correction{}, false, err
		}
		return prior, false, nil
	}
	if c.Closed {
		totals, err := s.Usage.Read(ctx, c.Account, c.Feature, c.Cycle)
		if err != nil {
			return Correction{}, false, err
		}
		if _, err := s.Review.Add(ctx, review.Entry{
			Account: c.Account, Feature: c.Feature, Cycle: c.Cycle, Reason: review.ClosedCycleChanged,
			Ledger: totals.Billed(), AtMs: c.CreatedAtMs,
			Detail: fmt.Sprintf("A correction of %+d (%s) arrived after the cycle closed; no provider is written for a closed cycle.", c.Units, c.Reason),
		}); err != nil {
			return Correction{}, false, err
		}
	}
	return c, true, nil
}

// prior reads the correction c's key already stored: ok false when there is none, and
// ErrKeyReused when the stored one says something else.
func (s *Service) prior(ctx context.Context, c Correction) (Correction, bool, error) {
	stored, ok, err := s.Usage.GetCorrection(ctx, c.Account, c.Feature, c.Cycle, c.ID)
	if err != nil || !ok {
		return Correction{}, false, err
	}
	if stored.Units != c.Units || stored.Reason != c.Reason {
		return Correction{}, false, ErrKeyReused
	}
	c.CreatedAtMs = stored.CreatedAtMs
	return c, true, nil
}
