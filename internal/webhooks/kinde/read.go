package kinde

import (
	"context"
	"encoding/json"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// Kinde's billing event types.
const (
	TypePlanAssigned       = "customer.plan_assigned"
	TypePlanChanged        = "customer.plan_changed"
	TypeAgreementCreated   = "customer.agreement_created"
	TypeAgreementCancelled = "customer.agreement_cancelled"
	TypePaymentSucceeded   = "customer.payment_succeeded"
	TypePaymentFailed      = "customer.payment_failed"
	TypeInvoiceOverdue     = "customer.invoice_overdue"
	TypeMeterUsageUpdated  = "customer.meter_usage_updated"
)

// kinds maps Kinde's billing event types to what they mean to Ferry.
var kinds = map[string]inbox.Kind{
	TypePlanAssigned:       inbox.PlanChange,
	TypePlanChanged:        inbox.PlanChange,
	TypeAgreementCreated:   inbox.PlanChange,
	TypeAgreementCancelled: inbox.PlanChange,
	TypePaymentSucceeded:   inbox.Payment,
	TypePaymentFailed:      inbox.PaymentFailed,
	TypeInvoiceOverdue:     inbox.InvoiceOverdue,
	TypeMeterUsageUpdated:  inbox.MeterUsage,
}

// payload is a Kinde billing event as far as Ferry reads it. Kinde does not document the
// billing payloads; each field below is read from every place it has been seen:
//   - data.customer_id (a live customer.plan_changed) or data.customer.id (Kinde's billing
//     component);
//   - data.plan.key (live), or data.plan.code / data.plan_code;
//   - the agreement: data.customer_agreement_id, data.agreement_id or data.agreement.id;
//   - a meter's feature: data.feature_code, data.billing_feature_code or data.feature.code.
type payload struct {
	Type           string `json:"type"`
	EventID        string `json:"event_id"`
	Timestamp      string `json:"timestamp"`
	EventTimestamp string `json:"event_timestamp"`
	Data           struct {
		CustomerID          string `json:"customer_id"`
		Customer            flex   `json:"customer"`
		Plan                flex   `json:"plan"`
		PlanCode            string `json:"plan_code"`
		CustomerAgreementID string `json:"customer_agreement_id"`
		AgreementID         string `json:"agreement_id"`
		Agreement           flex   `json:"agreement"`
		FeatureCode         string `json:"feature_code"`
		BillingFeatureCode  string `json:"billing_feature_code"`
		Feature             flex   `json:"feature"`
	} `json:"data"`
}

// flex is a field Kinde may send as an object ({"id": …}, {"key": …}, {"code": …}) or as the
// bare string; the string stands for each of them.
type flex struct {
	ID   string `json:"id"`
	Key  string `json:"key"`
	Code string `json:"code"`
}

// UnmarshalJSON reads an object or a string; null and other shapes read as empty.
func (f *flex) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*f = flex{ID: s, Key: s, Code: s}
		return nil
	}
	type plain flex
	var p plain
	if err := json.Unmarshal(data, &p); err == nil {
		*f = flex(p)
	}
	return nil
}

func first(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// Interpreter reads stored Kinde payloads for the inbox.
type Interpreter struct{}

// Interpret implements inbox.Interpreter. It never fails: a payload that does not read is a
// Facts with the Problem that makes it IGNORED.
func (Interpreter) Interpret(_ context.Context, raw []byte) (inbox.Facts, error) {
	return Read(raw), nil
}

// Read reads what a Kinde billing event says.
func Read(raw []byte) inbox.Facts {
	var p payload
	if err := json.Unmarshal(raw, &p); err != nil {
		return inbox.Facts{Problem: "the payload is not a Kinde event: " + err.Error()}
	}
	f := inbox.Facts{Type: p.Type, Kind: kinds[p.Type]}
	if customer := first(p.Data.CustomerID, p.Data.Customer.ID); customer != "" {
		f.Customers = append(f.Customers, inbox.CustomerRef{Kind: accounts.KindeCustomer, ID: customer})
	}
	if agreement := first(p.Data.CustomerAgreementID, p.Data.AgreementID, p.Data.Agreement.ID); agreement != "" {
		f.Customers = append(f.Customers, inbox.CustomerRef{Kind: accounts.KindeAgreement, ID: agreement})
	}
	if key := first(p.Data.Plan.Key, p.Data.Plan.Code, p.Data.PlanCode); key != "" {
		f.PlanKeys = []string{key}
	}
	f.ToDefault = p.Type == TypeAgreementCancelled
	f.FeatureCode = first(p.Data.FeatureCode, p.Data.BillingFeatureCode, p.Data.Feature.Code)
	// The event time is event_timestamp, when the change happened; timestamp is when Kinde sent
	// it, about a second later, and is the time only when event_timestamp is absent. A time
	// that cannot be read exactly is never replaced by the other one.
	at, which := p.EventTimestamp, "event_timestamp"
	if at == "" {
		at, which = p.Timestamp, "timestamp"
	}
	t, err := inbox.ParseTime(at)
	if err != nil {
		f.Problem = "the event's " + which + " cannot be read exactly: " + err.Error()
		return f
	}
	f.Time = t
	return f
}
