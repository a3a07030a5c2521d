package allowance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// Service answers what an account's allowance is in a cycle.
type Service struct {
	Store   *Table
	Catalog plans.Catalog
	Now     func() time.Time
}

// Limit is the allowance a new admission in the cycle is held to: the sum of the cycle's grant
// rows, read strongly consistent. The rows the account's plan needs are written first (Enter: a
// cycle nobody touched yet is opened with the grant of the plan the account is on; a plan the
// operator moved the account to gets its top-up row), so the limit an admission is held to is
// always a sum of rows that exist. Rows only ever add, so a limit read here is never more
// generous than the rows at the moment the admission commits.
func (s *Service) Limit(ctx context.Context, acct accounts.Account, feature, label string) (plans.Limit, error) {
	limit, err := retry.Do(ctx, retry.Contended, func(ctx context.Context, _ retry.Lap) (plans.Limit, error) {
		c, err := s.Store.Read(ctx, acct.ID, feature, label)
		if err != nil {
			return plans.Limit{}, err
		}
		open := Enter(c, acct.PlanOf(s.Catalog), s.Now().UnixMilli())
		if len(open) == 0 {
			return c.Limit(), nil
		}
		err = s.Store.Add(ctx, c, open, s.Now().UnixMilli())
		if errors.Is(err, ErrCancelled) {
			// Another writer opened or topped up the cycle meanwhile (or conflicted): the next
			// read says which.
			return plans.Limit{}, retry.Again(err)
		}
		if err != nil {
			return plans.Limit{}, err
		}
		c.Grants = append(c.Grants, open...)
		return c.Limit(), nil
	})
	if err != nil {
		return plans.Limit{}, fmt.Errorf("open the %s allowance of %s in %s: %w", feature, acct.ID, label, err)
	}
	return limit, nil
}

// View is a cycle's allowance as it reads: its stored rows, and the rows the account's plan
// needs that nobody has written yet (Enter's, written by the next admission), which count.
type View struct {
	Limit   plans.Limit
	Grants  []Grant
	Pending []Grant
}

// Show reads a cycle's allowance without writing anything.
func (s *Service) Show(ctx context.Context, acct accounts.Account, feature, label string) (View, error) {
	c, err := s.Store.Read(ctx, acct.ID, feature, label)
	if err != nil {
		return View{}, err
	}
	pending := Enter(c, acct.PlanOf(s.Catalog), 0)
	all := Cycle{Feature: feature, Grants: append(append([]Grant(nil), c.Grants...), pending...)}
	return View{Limit: all.Limit(), Grants: c.Grants, Pending: pending}, nil
}
