package inbox

import (
	"context"

	"github.com/ferrymeter/ferry/internal/accounts"
)

// Kind is what a billing event means to Ferry, whatever its provider called it.
type Kind int

// Kinds.
const (
	// Unhandled: a type Ferry does not act on (IGNORED with the reason).
	Unhandled Kind = iota
	// PlanChange moves the account to a plan (or back to the default plan) and grants the
	// plan's allowance in the cycle. Applied only if newer than the account's plan change.
	PlanChange
	// Payment grants the paid plan's allowance in the cycle and makes the account active (if
	// newer than its status change).
	Payment
	// PaymentFailed makes the account past_due (if newer than its status change).
	PaymentFailed
	// InvoiceOverdue makes the account inactive (if newer than its status change).
	InvoiceOverdue
	// MeterUsage records that the provider's meter changed, for the reconciler.
	MeterUsage
)

func (k Kind) String() string {
	return [...]string{"unhandled", "plan change", "payment", "payment failed", "invoice overdue", "meter usage"}[k]
}

// CustomerRef is a provider id that may be linked to an account.
type CustomerRef struct {
	Kind accounts.LinkKind
	ID   string
}

// Facts are what a billing event says, read from its stored payload by its provider's
// interpreter: the one place that knows the provider's field names.
type Facts struct {
	Kind Kind
	Type string
	// Customers are the provider ids that may name the account, in the order to try them
	// (Kinde: the customer, then the agreement).
	Customers []CustomerRef
	// PlanKeys are the provider's names of the plan a plan change moves to, or a payment is
	// for (Kinde plan keys, Stripe price ids), in the order they appear: the first the catalog
	// knows is the plan. Empty when the event names none.
	PlanKeys []string
	// ToDefault marks a plan change back to the catalog's default plan (a cancellation).
	ToDefault bool
	// FeatureCode is the provider's code of the metered feature (meter usage), if it says.
	FeatureCode string
	// Time is the event time that orders it.
	Time EventTime
	// Problem, when set, is why the event cannot be applied as it reads (an unreadable time, a
	// missing customer): the event is IGNORED with it. A retry would read the same payload.
	Problem string
	// Refetched is set when the object was read again from the provider's API.
	Refetched bool
}

// Interpreter reads a provider's stored payloads. An error is transient (a re-fetch that
// failed): the attempt fails and is retried later. A payload that reads wrong is not an error:
// it is a Facts with a Problem.
type Interpreter interface {
	Interpret(ctx context.Context, payload []byte) (Facts, error)
}

// InterpreterFunc adapts a function to Interpreter.
type InterpreterFunc func(ctx context.Context, payload []byte) (Facts, error)

// Interpret implements Interpreter.
func (f InterpreterFunc) Interpret(ctx context.Context, payload []byte) (Facts, error) {
	return f(ctx, payload)
}
