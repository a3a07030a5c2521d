package reconcile

import (
	"context"
	"fmt"

	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// InboxMarks reads the webhook inbox's "provider meter changed" marks — left by each Kinde
// customer.meter_usage_updated event it applied — as a MarkSource, so the reporter's minute run
// compares that cycle's meter with the ledger soon instead of at night.
type InboxMarks struct{ Marks inbox.MeterMarks }

// inboxSource names the inbox's marks in Mark.Source.
const inboxSource = "inbox"

// Pending implements MarkSource: the first marks, in the inbox's order. A mark whose cycle could
// not be reconciled stays first in line for the next run.
func (s InboxMarks) Pending(ctx context.Context, limit int) ([]Mark, error) {
	marks, _, err := s.Marks.List(ctx, "", limit)
	if err != nil {
		return nil, fmt.Errorf("read the inbox's meter marks: %w", err)
	}
	out := make([]Mark, 0, len(marks))
	for _, m := range marks {
		reason := "the provider reported its meter changed"
		if m.EventID != "" {
			reason += " (billing event " + m.EventID + ")"
		}
		out = append(out, Mark{
			Account: m.AccountID, Cycle: m.Cycle, Reason: reason, Source: inboxSource,
			ID: m.AccountID + "#" + m.Cycle + "#" + m.Feature, AtMs: m.MarkedAtMs, ref: m,
		})
	}
	return out, nil
}

// Done implements MarkSource: it clears the mark at the revision it was listed at. A mark made
// again since (the provider reported another change) stays for the next run.
func (s InboxMarks) Done(ctx context.Context, m Mark) error {
	mm, ok := m.ref.(inbox.MeterMark)
	if !ok {
		return fmt.Errorf("mark %s: not one the inbox listed", m.ID)
	}
	if _, err := s.Marks.Clear(ctx, mm); err != nil {
		return fmt.Errorf("clear the inbox's meter mark %s: %w", m.ID, err)
	}
	return nil
}
