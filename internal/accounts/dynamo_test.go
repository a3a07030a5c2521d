package accounts_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	. "github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// An update decided on links it read before another update changed them must not commit: it
// would delete a link item that is no longer the account's and leave the other update's link
// item behind, naming the account under an id it no longer has.
func TestTable_RelinkDecidedOnStaleLinks_IsRefusedAndLeavesNoStrayLink(t *testing.T) {
	env := testenv.New(t)
	s := &Table{
		DB: env.Clients.DynamoDB, AccountsTable: env.Names.Table(resources.TableAccounts),
		KeysTable: env.Names.Table(resources.TableAPIKeys), LinksTable: env.Names.Table(resources.TableAccountLinks),
	}
	ctx := context.Background()
	if err := s.Create(ctx, Account{ID: "acct_a", Plan: "free", Status: Active, KindeCustomerID: "cust_x"}, "hash_a"); err != nil {
		t.Fatal(err)
	}
	stale, err := s.Get(ctx, "acct_a")
	if err != nil {
		t.Fatal(err)
	}
	y, z := "cust_y", "cust_z"
	if _, err := s.UpdateDecidedOn(ctx, "acct_a", UpdateInput{Links: map[LinkKind]*string{KindeCustomer: &y}}, 2, stale); err != nil {
		t.Fatalf("first relink: %v", err)
	}
	if _, err := s.UpdateDecidedOn(ctx, "acct_a", UpdateInput{Links: map[LinkKind]*string{KindeCustomer: &z}}, 3, stale); !errors.Is(err, ErrLinksMoved) {
		t.Fatalf("relink on stale links: %v, want ErrLinksMoved", err)
	}
	out, err := env.Clients.DynamoDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.LinksTable)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 1 {
		t.Fatalf("%d link items, want only cust_y's", len(out.Items))
	}
	if id, err := s.AccountIDForLink(ctx, KindeCustomer, "cust_y"); err != nil || id != "acct_a" {
		t.Errorf("cust_y → %q %v", id, err)
	}
	// The same holds for a kind the account had no id of when the update read it.
	b1, b2 := "stripe_1", "stripe_2"
	if _, err := s.UpdateDecidedOn(ctx, "acct_a", UpdateInput{Links: map[LinkKind]*string{StripeCustomer: &b1}}, 5, stale); err != nil {
		t.Fatalf("first link: %v", err)
	}
	if _, err := s.UpdateDecidedOn(ctx, "acct_a", UpdateInput{Links: map[LinkKind]*string{StripeCustomer: &b2}}, 6, stale); !errors.Is(err, ErrLinksMoved) {
		t.Fatalf("link on a stale absence: %v, want ErrLinksMoved", err)
	}
	if _, err := s.AccountIDForLink(ctx, StripeCustomer, b2); !errors.Is(err, ErrNotFound) {
		t.Errorf("stripe_2 was linked: %v", err)
	}
	// The public path re-reads and succeeds.
	if a, err := s.Update(ctx, "acct_a", UpdateInput{Links: map[LinkKind]*string{KindeCustomer: &z}}, 4); err != nil || a.KindeCustomerID != "cust_z" {
		t.Errorf("relink: %+v %v", a, err)
	}
}
