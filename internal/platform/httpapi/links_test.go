package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestAccounts_LinkedProviderIdsAreUniqueAndFindTheirAccount(t *testing.T) {
	h := apptest.New(t)
	created := h.Do(t, "POST", "/v1/accounts", apptest.AdminKey, map[string]any{
		"id": "acct_k", "kindeCustomerId": "customer_01a", "stripeCustomerId": "cus_A1",
	})
	if created.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.Status, created.Body)
	}
	if b := created.JSON(t); b["kindeCustomerId"] != "customer_01a" || b["stripeCustomerId"] != "cus_A1" ||
		b["kindeAgreementId"] != nil || b["planChangedAt"] != nil {
		t.Errorf("created %v", b)
	}
	// Each id names one account: another account cannot take it, and nothing of it is stored.
	p := assertProblem(t, h.Do(t, "POST", "/v1/accounts", apptest.AdminKey, map[string]any{
		"id": "acct_other", "stripeCustomerId": "cus_A1",
	}), http.StatusConflict, "conflict")
	if p["field"] != "stripeCustomerId" {
		t.Errorf("problem %v", p)
	}
	assertProblem(t, h.Do(t, "GET", "/v1/accounts/acct_other", apptest.AdminKey, nil), http.StatusNotFound, "not-found")
	h.CreateAccount(t, "acct_other", "free", nil)
	assertProblem(t, h.Do(t, "PATCH", "/v1/accounts/acct_other", apptest.AdminKey, map[string]any{"kindeCustomerId": "customer_01a"}),
		http.StatusConflict, "conflict")

	svc := h.API().Accounts
	ctx := context.Background()
	if a, err := svc.Linked(ctx, accounts.KindeCustomer, "customer_01a"); err != nil || a.ID != "acct_k" {
		t.Fatalf("linked kinde customer → %+v %v", a, err)
	}
	if _, err := svc.Linked(ctx, accounts.KindeAgreement, "customer_01a"); err != accounts.ErrNotFound {
		t.Errorf("an id of another kind found %v", err)
	}

	// Relink, link a third kind and unlink one in one update; the released id is free again.
	patched := h.Do(t, "PATCH", "/v1/accounts/acct_k", apptest.AdminKey, map[string]any{
		"kindeCustomerId": "customer_01b", "kindeAgreementId": "agreement_9", "stripeCustomerId": nil, "status": "past_due",
	})
	if b := patched.JSON(t); patched.Status != 200 || b["kindeCustomerId"] != "customer_01b" || b["kindeAgreementId"] != "agreement_9" ||
		b["stripeCustomerId"] != nil || b["status"] != "past_due" {
		t.Fatalf("patch: %d %s", patched.Status, patched.Body)
	}
	if _, err := svc.Linked(ctx, accounts.KindeCustomer, "customer_01a"); err != accounts.ErrNotFound {
		t.Errorf("the old Kinde customer still finds an account: %v", err)
	}
	if a, err := svc.Linked(ctx, accounts.KindeAgreement, "agreement_9"); err != nil || a.ID != "acct_k" {
		t.Errorf("agreement → %+v %v", a, err)
	}
	if r := h.Do(t, "PATCH", "/v1/accounts/acct_other", apptest.AdminKey, map[string]any{"stripeCustomerId": "cus_A1", "kindeCustomerId": "customer_01a"}); r.Status != 200 {
		t.Errorf("taking the released ids: %d %s", r.Status, r.Body)
	}
	out, err := h.Env.Clients.DynamoDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(h.Env.Names.Table(resources.TableAccountLinks))})
	if err != nil || len(out.Items) != 4 {
		t.Errorf("link items: %d (%v), want 4", len(out.Items), err)
	}

	for name, body := range map[string]any{
		"empty id":       map[string]any{"kindeCustomerId": ""},
		"id with a hash": map[string]any{"stripeCustomerId": "cus#1"},
		"not a string":   map[string]any{"kindeAgreementId": 7},
	} {
		t.Run(name, func(t *testing.T) {
			assertProblem(t, h.Do(t, "PATCH", "/v1/accounts/acct_k", apptest.AdminKey, body), http.StatusBadRequest, "invalid-request")
		})
	}
}
