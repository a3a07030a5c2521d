package apptest

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	awsevents "github.com/aws/aws-lambda-go/events"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/platform/fanout"
)

// billSerial numbers the events Bill makes, unique in the test binary.
var billSerial atomic.Int64

// billConcurrency is how many events Bill bills at once.
const billConcurrency = 8

// LinkedAccount creates an account on plan through the API, linked to a Kinde agreement
// (agr_<id>) and a Stripe customer (cus_<id>), and returns it as stored with its API key.
func (h *Harness) LinkedAccount(t testing.TB, id, plan string) (accounts.Account, string) {
	t.Helper()
	resp := h.Do(t, http.MethodPost, "/v1/accounts", AdminKey, map[string]any{
		"id": id, "plan": plan, "kindeAgreementId": "agr_" + id, "stripeCustomerId": "cus_" + id,
	})
	if resp.Status != http.StatusCreated {
		t.Fatalf("create %s: %d %s", id, resp.Status, resp.Body)
	}
	key := resp.JSON(t)["apiKey"].(string)
	a, err := h.MeterAPI().Accounts.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a, key
}

// Bill bills n new events for acct at the harness clock's now through the ledger's billing path,
// as the worker does: the claim, then the one transaction that moves the meter with the
// checkpoint. It skips ingest, the archive and the analytics row, which reporting never reads.
func (h *Harness) Bill(t testing.TB, acct accounts.Account, n int) {
	t.Helper()
	ctx := context.Background()
	now := h.Clock.Now().UnixMilli()
	charge := ledger.BillingFor(acct, plans.Default())
	store := h.Worker().Ledger
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_%07d", billSerial.Add(1))
	}
	var errs []error
	fanout.Each(ids, billConcurrency, func(id string) (struct{}, error) {
		e := ledger.Entry{
			AccountID: acct.ID, EventID: id, Status: ledger.Inserting, RowInsertedAtMs: now,
			ReceivedAtMs: now, Cycle: acct.CycleAt(h.Clock.Now()).Label(), CreatedAtMs: now, UpdatedAtMs: now,
		}
		if err := store.Claim(ctx, e); err != nil {
			return struct{}{}, err
		}
		_, err := ledger.AcceptBilling(ctx, store, e, charge, now)
		return struct{}{}, err
	}, func(_ string, _ struct{}, err error) {
		if err != nil {
			errs = append(errs, err)
		}
	})
	for _, err := range errs {
		t.Fatal(err)
	}
}

// Meter runs events (CloudEvents JSON, as clients send them) for accountID through the worker
// as one packed message received at the clock's now, in batch mode, and fails the test unless
// the message is acked: the path every meter moves by.
func (h *Harness) Meter(t testing.TB, accountID string, events ...[]byte) {
	t.Helper()
	p := event.Packed{AccountID: accountID, ReceivedAtMs: h.Clock.Now().UnixMilli()}
	for _, raw := range events {
		ev, err := event.Parse(raw)
		if err != nil {
			t.Fatalf("not an event: %v", err)
		}
		p.Events = append(p.Events, ev.Canonical)
	}
	body, err := event.EncodePacked(p)
	if err != nil {
		t.Fatal(err)
	}
	w := h.Worker().Worker
	coalesce := w.Coalesce
	w.Coalesce = true
	defer func() { w.Coalesce = coalesce }()
	resp, err := w.HandleSQS(context.Background(), awsevents.SQSEvent{Records: []awsevents.SQSMessage{{MessageId: "m", Body: body}}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the worker did not finish the events: %+v %v", resp, err)
	}
}
