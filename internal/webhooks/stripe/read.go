package stripe

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// Stripe's billing event types Ferry acts on.
const (
	TypeSubscriptionCreated = "customer.subscription.created"
	TypeSubscriptionUpdated = "customer.subscription.updated"
	TypeSubscriptionDeleted = "customer.subscription.deleted"
	TypeInvoicePaid         = "invoice.paid"
	TypeInvoicePaymentFail  = "invoice.payment_failed"
	TypeInvoiceOverdue      = "invoice.overdue"
)

var kinds = map[string]inbox.Kind{
	TypeSubscriptionCreated: inbox.PlanChange,
	TypeSubscriptionUpdated: inbox.PlanChange,
	TypeSubscriptionDeleted: inbox.PlanChange,
	TypeInvoicePaid:         inbox.Payment,
	TypeInvoicePaymentFail:  inbox.PaymentFailed,
	TypeInvoiceOverdue:      inbox.InvoiceOverdue,
}

// Object types a re-fetch reads again, by event type.
const (
	ObjectSubscription = "subscription"
	ObjectInvoice      = "invoice"
)

// endedStatuses are the subscription statuses that leave the customer on no paid plan.
var endedStatuses = map[string]bool{"canceled": true, "incomplete_expired": true}

// object is the part of a subscription or an invoice Ferry reads. Fields moved between API
// versions are read from each place:
//   - customer: an id, or an expanded object with an id;
//   - a subscription's prices: items.data[].price.id (items.data[].plan.id before prices);
//   - an invoice's prices: lines.data[].price.id up to 2025-02, then
//     lines.data[].pricing.price_details.price (and lines.data[].plan.id on old versions).
type object struct {
	ID       string     `json:"id"`
	Object   string     `json:"object"`
	Customer idOrObject `json:"customer"`
	Status   string     `json:"status"`
	Items    struct {
		Data []line `json:"data"`
	} `json:"items"`
	Lines struct {
		Data []line `json:"data"`
	} `json:"lines"`
}

type line struct {
	Price   idOrObject `json:"price"`
	Plan    idOrObject `json:"plan"`
	Pricing struct {
		PriceDetails struct {
			Price idOrObject `json:"price"`
		} `json:"price_details"`
	} `json:"pricing"`
}

// prices are the line's price ids, in the order the versions put them.
func (l line) prices() []string {
	var out []string
	for _, id := range []string{l.Price.ID, l.Pricing.PriceDetails.Price.ID, l.Plan.ID} {
		if id != "" {
			out = append(out, id)
		}
	}
	return out
}

// idOrObject is a field Stripe sends as an id or, expanded, as an object with an id.
type idOrObject struct{ ID string }

// UnmarshalJSON reads a string or an object's "id"; null reads as empty.
func (r *idOrObject) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		r.ID = s
		return nil
	}
	var o struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(data, &o); err == nil {
		r.ID = o.ID
	}
	return nil
}

// Fetcher re-reads an object from Stripe's API by id (see package objects).
type Fetcher interface {
	Object(ctx context.Context, objectType, id string) (json.RawMessage, error)
}

// Interpreter reads stored Stripe events for the inbox. With Refetch set, it reads the event's
// subscription or invoice again from Stripe by id and reads that instead of the payload's copy
// (seed 003: the stored event is a pointer to the authoritative object); ordering still follows
// the event's created time.
type Interpreter struct {
	Refetch Fetcher
}

// Interpret implements inbox.Interpreter. A re-fetch that fails is an error (the attempt is
// retried); a payload that does not read is a Facts with a Problem.
func (i Interpreter) Interpret(ctx context.Context, raw []byte) (inbox.Facts, error) {
	var ev envelope
	if err := json.Unmarshal(raw, &ev); err != nil {
		return inbox.Facts{Problem: "the payload is not a Stripe event: " + err.Error()}, nil
	}
	f := inbox.Facts{Type: ev.Type, Kind: kinds[ev.Type]}
	if f.Kind == inbox.Unhandled {
		return f, nil
	}
	obj := ev.Data.Object
	if i.Refetch != nil {
		var o object
		if err := json.Unmarshal(obj, &o); err != nil || o.ID == "" {
			return inbox.Facts{Type: ev.Type, Kind: f.Kind, Problem: "the event's object has no id to re-fetch it by"}, nil
		}
		fresh, err := i.Refetch.Object(ctx, objectTypeOf(ev.Type), o.ID)
		if err != nil {
			return inbox.Facts{}, fmt.Errorf("re-fetch %s %s: %w", objectTypeOf(ev.Type), o.ID, err)
		}
		obj, f.Refetched = fresh, true
	}
	read(&f, ev, obj)
	return f, nil
}

// Read reads what a Stripe event says from its payload alone.
func Read(raw []byte) inbox.Facts {
	f, _ := Interpreter{}.Interpret(context.Background(), raw)
	return f
}

func objectTypeOf(eventType string) string {
	if kinds[eventType] == inbox.PlanChange {
		return ObjectSubscription
	}
	return ObjectInvoice
}

func read(f *inbox.Facts, ev envelope, raw json.RawMessage) {
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		f.Problem = "the event's object does not read: " + err.Error()
		return
	}
	if o.Customer.ID != "" {
		f.Customers = []inbox.CustomerRef{{Kind: accounts.StripeCustomer, ID: o.Customer.ID}}
	}
	var lines []line
	switch f.Kind {
	case inbox.PlanChange:
		lines = o.Items.Data
		f.ToDefault = ev.Type == TypeSubscriptionDeleted || endedStatuses[o.Status]
	case inbox.Payment:
		lines = o.Lines.Data
	}
	for _, l := range lines {
		f.PlanKeys = append(f.PlanKeys, l.prices()...)
	}
	t, err := inbox.UnixSeconds(ev.Created)
	if err != nil || ev.Created == 0 {
		f.Problem = fmt.Sprintf("the event's created time %d cannot be read", ev.Created)
		return
	}
	f.Time = t
}
