// Package corrections appends corrections to the ledger. Nothing is deleted to correct usage: a
// correction is a new row of ± units in the cycle it corrects, stored beside the counters it
// corrects (the cycle's usage partition), marked for the reporter like any write that changes a
// billed total, and kept. A correction names itself by the caller's Idempotency-Key, so a retry
// finds the row it already wrote instead of writing a second one. A correction for a closed cycle
// is stored too — the ledger is the record — but no provider is written for it: it goes to the
// review list.
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

// Apply appends the correction, or returns the one its key already wrote (created false).
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
	c = Correction{
		ID: ID(in.IdempotencyKey), Account: acct.ID, Feature: in.Feature, Cycle: cy.Label(), Units: in.Units,
		Reason: in.Reason, CreatedAtMs: now.UnixMilli(), Closed: cy.Closed(now),
	}
	keyHash := sha256.Sum256([]byte(in.IdempotencyKey))
	err = s.Usage.PutCorrection(ctx, usage.Correction{
		AccountID: c.Account, Feature: c.Feature, Cycle: c.Cycle, ID: c.ID, Units: c.Units, Reason: c.Reason,
		KeyHash: fmt.Sprintf("%x", keyHash[:8]), CreatedAtMs: c.CreatedAtMs,
	})
	if errors.Is(err, usage.ErrCorrectionExists) {
		prior, ok, gerr := s.Usage.GetCorrection(ctx, c.Account, c.Feature, c.Cycle, c.ID)
		if gerr != nil {
			return Correction{}, false, gerr
		}
		if !ok || prior.Units != c.Units || prior.Reason != c.Reason {
			return Correction{}, false, ErrKeyReused
		}
		c.CreatedAtMs = prior.CreatedAtMs
		return c, false, nil
	}
	if err != nil {
		return Correction{}, false, err
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
