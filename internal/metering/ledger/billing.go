package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/retry"
)

// ErrCancelled is what the store returns when the billing write was cancelled: one of its
// conditions did not hold, or a conflicting transaction cancelled it. The store does not say
// which; AcceptBilling reads durable state to find out.
var ErrCancelled = errors.New("billing write cancelled")

// Outcome of AcceptBilling.
type Outcome int

// Outcomes.
const (
	// Accepted: this call stamped the checkpoint (and moved the meter, for metered tiers).
	Accepted Outcome = iota + 1
	// AlreadyAccepted: an earlier attempt had billed the event; nothing moved now.
	AlreadyAccepted
)

// BillingStore is what billing one event needs from the ledger's adapter: the write, and the two
// strongly consistent reads that explain a cancelled one.
type BillingStore interface {
	// WriteBilling moves the meter and stamps the checkpoint in one write, or returns
	// ErrCancelled.
	WriteBilling(ctx context.Context, e Entry, b Billing, nowMs int64) error
	// Checkpoint reads whether the event's checkpoint is present, and its status.
	Checkpoint(ctx context.Context, accountID, eventID string) (billed bool, status Status, err error)
	// Budget reads the budget row a capped billing moves.
	Budget(ctx context.Context, e Entry, b Billing) (usage.Totals, error)
}

// AcceptBilling bills one event per its billing decision. A cancelled write is resolved from
// durable state — the checkpoint first, then, if it is absent, the budget row — never from the
// error's shape, and each lap of the bounded retry reads that state again before deciding. It
// returns ErrLimitReached only when the budget row confirms the limit, ErrNotInserting when the
// entry left INSERTING, and retries a cancellation that neither the checkpoint nor the limit
// explains (a conflicting transaction on the same rows; the write is keyed by the checkpoint, so
// another try can never bill twice).
func AcceptBilling(ctx context.Context, store BillingStore, e Entry, b Billing, nowMs int64) (Outcome, error) {
	out, err := retry.Do(ctx, retry.Contended, func(ctx context.Context, _ retry.Lap) (Outcome, error) {
		err := store.WriteBilling(ctx, e, b, nowMs)
		if err == nil {
			return Accepted, nil
		}
		if !errors.Is(err, ErrCancelled) {
			return 0, err
		}
		billed, status, err := store.Checkpoint(ctx, e.AccountID, e.EventID)
		if err != nil {
			return 0, err
		}
		var budget *usage.Totals
		if !billed && status == Inserting && b.capped() {
			t, err := store.Budget(ctx, e, b)
			if err != nil {
				return 0, err
			}
			budget = &t
		}
		return resolveBilling(billed, status, budget, b)
	})
	if errors.Is(err, retry.ErrExhausted) {
		return 0, fmt.Errorf("bill event %s: still contended after %d tries", e.EventID, retry.Contended.Tries)
	}
	return out, err
}

// errUnexplained is a cancelled billing write that durable state does not explain: a
// conflicting transaction.
var errUnexplained = errors.New("billing write cancelled by a conflicting transaction")

// resolveBilling decides a cancelled billing write from the durable state read after it: the
// checkpoint's presence, the entry's status and, for a capped billing whose checkpoint is absent,
// the budget row. An already billed event is done; an entry that left INSERTING is not this
// delivery's to bill; a budget with no room for the amount is the limit; anything else asks for
// another try.
func resolveBilling(billed bool, status Status, budget *usage.Totals, b Billing) (Outcome, error) {
	switch {
	case billed:
		return AlreadyAccepted, nil
	case status != Inserting:
		return 0, ErrNotInserting
	case budget != nil && !b.Limit.Check(budget.Committed, b.Amount).Fits:
		return 0, ErrLimitReached
	}
	return 0, retry.Again(errUnexplained)
}

// capped reports whether the billing moves a capped budget row, whose limit can explain a
// cancelled write.
func (b Billing) capped() bool { return b.Kind == BillCapped && !b.Limit.Unlimited }
