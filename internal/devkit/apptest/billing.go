package apptest

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	awsevents "github.com/aws/aws-lambda-go/events"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
)

// billSerial numbers the events Bill makes, unique in the test binary.
var billSerial atomic.Int64

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

// Bill bills n new events for acct at the harness clock's now, through the worker as it bills
// them: packed messages of up to event.MaxPackedEvents events, each a unit claimed and metered in
// one transaction (and archived, with its rows, as any unit is).
func (h *Harness) Bill(t testing.TB, acct accounts.Account, n int) {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_%07d", billSerial.Add(1))
	}
	for start := 0; start < n; start += event.MaxPackedEvents {
		p := event.Packed{AccountID: acct.ID, ReceivedAtMs: h.Clock.Now().UnixMilli()}
		for _, id := range ids[start:min(start+event.MaxPackedEvents, n)] {
			p.Events = append(p.Events, []byte(fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/bill","type":"api.call"}`, id)))
		}
		body, err := event.EncodePacked(p)
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.Worker().Worker.Process(ctx, body)
		if err != nil {
			t.Fatalf("bill %d events: %v", len(p.Events), err)
		}
		for id, r := range res.Events {
			if r.Final != ledger.Inserted {
				t.Fatalf("bill: %s ended %s", id, r.Final)
			}
		}
	}
}

// Meter runs events (CloudEvents JSON, as clients send them) for accountID through the worker
// as one packed message received at the clock's now, and fails the test unless the message is
// acked.
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
	resp, err := h.Worker().Worker.HandleSQS(context.Background(), awsevents.SQSEvent{Records: []awsevents.SQSMessage{{MessageId: "m", Body: body}}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the worker did not finish the events: %+v %v", resp, err)
	}
}
