package accounts_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	. "github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func storeOn(env *testenv.Env, db *dynamodb.Client) *Table {
	return &Table{DB: db, AccountsTable: env.Names.Table(resources.TableAccounts),
		KeysTable: env.Names.Table(resources.TableAPIKeys), LinksTable: env.Names.Table(resources.TableAccountLinks)}
}

// Creating an account whose id exists is refused (409), and the account that was there keeps
// its plan and its key.
func TestGuard_CreateNeverOverwritesAnAccount(t *testing.T) {
	testenv.NeedsGuard(t, "accounts.create.absent", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := storeOn(env, db), context.Background()
		if err := s.Create(ctx, Account{ID: "acct_a", Plan: "plus", Status: Active}, "hash_1"); err != nil {
			return err
		}
		if err := s.Create(ctx, Account{ID: "acct_a", Plan: "free", Status: Active}, "hash_2"); !errors.Is(err, ErrExists) {
			return fmt.Errorf("the second creation: %v, want ErrExists", err)
		}
		a, err := s.Get(ctx, "acct_a")
		if err != nil || a.Plan != "plus" {
			return fmt.Errorf("the account is now %+v (%v); want the first one, on plus", a, err)
		}
		return nil
	})
}

// A provider id links one account: a second account naming it is refused, and the link still
// finds the first.
func TestGuard_ALinkNamesOneAccount(t *testing.T) {
	testenv.NeedsGuard(t, "accounts.link.absent", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := storeOn(env, db), context.Background()
		if err := s.Create(ctx, Account{ID: "acct_a", Plan: "free", Status: Active, KindeCustomerID: "cust_1"}, "hash_1"); err != nil {
			return err
		}
		var taken *LinkTakenError
		if err := s.Create(ctx, Account{ID: "acct_b", Plan: "free", Status: Active, KindeCustomerID: "cust_1"}, "hash_2"); !errors.As(err, &taken) {
			return fmt.Errorf("a second account with cust_1: %v, want LinkTakenError", err)
		}
		if id, err := s.AccountIDForLink(ctx, KindeCustomer, "cust_1"); err != nil || id != "acct_a" {
			return fmt.Errorf("cust_1 names %q (%v); want acct_a", id, err)
		}
		return nil
	})
}

// Updating an account that does not exist is a 404 and creates nothing.
func TestGuard_UpdateNeverCreatesAnAccount(t *testing.T) {
	testenv.NeedsGuard(t, "accounts.update.exists", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := storeOn(env, db), context.Background()
		plan := "plus"
		if _, err := s.Update(ctx, "acct_none", UpdateInput{Plan: &plan}, 2); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("updating a missing account: %v, want ErrNotFound", err)
		}
		if _, err := s.Get(ctx, "acct_none"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("the update created the account (%v)", err)
		}
		return nil
	})
}

// Once the first usage fixed the billing cycle, the agreement day no longer changes.
func TestGuard_AgreementDayIsFixedByTheFirstUsage(t *testing.T) {
	testenv.NeedsGuard(t, "accounts.update.agreement-open", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		s, ctx := storeOn(env, db), context.Background()
		if err := s.Create(ctx, Account{ID: "acct_a", Plan: "free", Status: Active}, "hash_1"); err != nil {
			return err
		}
		day := 5
		if _, err := s.Update(ctx, "acct_a", UpdateInput{AgreementDay: &day}, 2); err != nil {
			return err
		}
		if _, err := s.MarkUsageStarted(ctx, "acct_a", 3); err != nil {
			return err
		}
		other := 20
		if _, err := s.Update(ctx, "acct_a", UpdateInput{AgreementDay: &other}, 4); !errors.Is(err, ErrAgreementLocked) {
			return fmt.Errorf("changing the day after the first usage: %v, want ErrAgreementLocked", err)
		}
		if a, _ := s.Get(ctx, "acct_a"); a.AgreementDay != day {
			return fmt.Errorf("the agreement day is %d; it was fixed at %d", a.AgreementDay, day)
		}
		return nil
	})
}

// An update decided when the account had no id of a kind must not link one over an id another
// update linked meanwhile; one decided on an id must not replace an id changed meanwhile. Either
// would leave a link item naming the account under an id it no longer has.
func TestGuard_LinksAreChangedOnlyFromWhatWasRead(t *testing.T) {
	for _, kind := range LinkKinds {
		for _, guard := range []string{".was-absent", ".unchanged"} {
			name := "accounts.update." + kind.Field() + guard
			t.Run(name, func(t *testing.T) {
				testenv.NeedsGuard(t, name, func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
					s, ctx := storeOn(env, db), context.Background()
					a := Account{ID: "acct_a", Plan: "free", Status: Active}
					if guard == ".unchanged" {
						a = withLink(a, kind, "id_0")
					}
					if err := s.Create(ctx, a, "hash_1"); err != nil {
						return err
					}
					stale, err := s.Get(ctx, "acct_a")
					if err != nil {
						return err
					}
					one, two := "id_1", "id_2"
					if _, err := s.UpdateDecidedOn(ctx, "acct_a", UpdateInput{Links: map[LinkKind]*string{kind: &one}}, 2, stale); err != nil {
						return fmt.Errorf("the first update: %w", err)
					}
					if _, err := s.UpdateDecidedOn(ctx, "acct_a", UpdateInput{Links: map[LinkKind]*string{kind: &two}}, 3, stale); !errors.Is(err, ErrLinksMoved) {
						return fmt.Errorf("an update decided on stale links: %v, want ErrLinksMoved", err)
					}
					if id, err := s.AccountIDForLink(ctx, kind, "id_1"); err != nil || id != "acct_a" {
						return fmt.Errorf("id_1 names %q (%v); want acct_a", id, err)
					}
					if _, err := s.AccountIDForLink(ctx, kind, "id_2"); !errors.Is(err, ErrNotFound) {
						return fmt.Errorf("id_2 was linked too (%v): two link items name the account", err)
					}
					return nil
				})
			})
		}
	}
}

func withLink(a Account, kind LinkKind, id string) Account {
	switch kind {
	case KindeCustomer:
		a.KindeCustomerID = id
	case StripeCustomer:
		a.StripeCustomerID = id
	case KindeAgreement:
		a.KindeAgreementID = id
	}
	return a
}
