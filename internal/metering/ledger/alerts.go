package ledger

import (
	"sort"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
)

// Alerts in the claim. A threshold is decided by the claim that moves the budget row past it,
// in the same transaction, so no redelivery, crash or race can lose it or decide it twice:
//
//   - The plan tells every threshold of the feature that the row's usage as read plus the
//     claim's amount reaches and that is not crossed on the row (notify.ThresholdChange even):
//     it puts the notification, conditional on its absence (notify.Put), and records the
//     change on the row. A threshold a hold's charge stepped over is so decided by the next
//     claim.
//   - A threshold crossed on the row that stands above the usage as read is resolved: only a
//     raised limit moves a threshold (usage never goes down in a cycle), so the account is back
//     under it. The claim tells threshold.resolved and records the change; when its own amount
//     reaches the threshold again, it tells the new crossing too.
//   - Every capped add whose decision would differ from a higher usage is held to the usage its
//     plan was made at (usage.Alerts.Below): the lowest threshold it leaves uncrossed above, or
//     resolves and leaves above. A claim that planned to cross nothing is cancelled when
//     another claim has since brought the row to where its amount would cross, and plans again.
//     Two claims therefore never both step over a threshold without one of them deciding it, and
//     a claim that crosses none writes nothing more than before (a condition costs nothing).
//     Two claims that decide the same change put the same notification: one is cancelled.
//   - A claim that refuses an event for a feature's limit decides limit.reached once a cycle
//     for that limit the same way (notify.LimitAlert).
//
// A new cycle's budget row starts with no alerts, so every cycle starts clean.

// Alerted is the alerts a claim records on the budget row of a feature it moves nothing on.
type Alerted struct {
	Feature string
	Keys    []string
}

// decideAlerts adds the claim's alerts to its plan, per feature with a capped add or whose limit
// refused a member (limited: feature → meter): the thresholds it crosses or resolves, the usage
// a capped add is held under, and limit.reached. A feature the claim only refuses on (no add)
// records its alerts on its own (Alerted).
func decideAlerts(p *UnitPlan, in UnitInput, limited map[string]string) {
	moves := map[string]*Move{} // feature → its capped add
	for i := range p.Moves {
		if m := &p.Moves[i]; m.Capped && m.Add > 0 && !m.Limit.Unlimited {
			moves[m.Feature] = m
		}
	}
	features := make([]string, 0, len(moves)+len(limited))
	for f := range moves {
		features = append(features, f)
	}
	for f := range limited {
		if moves[f] == nil {
			features = append(features, f)
		}
	}
	sort.Strings(features)
	for _, f := range features {
		m, meterName, add := moves[f], limited[f], int64(0)
		if m != nil {
			meterName, add = m.Meter, m.Add
		}
		row, limit := in.State.Rows[f], in.Limit(f)
		after := row.Used + add
		var record []string
		tell := func(n notify.Notification, key string) {
			n.Account, n.Feature, n.Meter, n.Cycle, n.Limit, n.AtMs = in.AccountID, f, meterName, in.Cycle, limit.Max, in.NowMs
			p.Notes = append(p.Notes, n)
			record = append(record, key)
		}
		threshold := func(kind notify.Kind, l plans.Level, change, used int64) {
			tell(notify.Notification{Kind: kind, Threshold: l.At, Percent: l.Percent, Change: change, Used: used},
				notify.ThresholdAlert(notify.ThresholdDef(l.Percent, l.At), change))
		}
		for _, l := range in.Thresholds(f) {
			change := notify.ThresholdChange(row.Alerted, notify.ThresholdDef(l.Percent, l.At))
			crossed := change%2 == 1
			if crossed && l.At > row.Used {
				change++
				threshold(notify.ThresholdResolved, l, change, row.Used)
				crossed = false
			}
			switch {
			case crossed:
			case l.At <= after:
				threshold(notify.ThresholdCrossed, l, change+1, after)
			case m != nil && m.Alerts.Below == 0:
				// The lowest threshold left above: the claim crosses it from any usage at or
				// over l.At - add, so it commits only from below that.
				m.Alerts.Below = l.At - add
			}
		}
		if _, ok := limited[f]; ok && !row.Alerted[notify.LimitAlert(limit.Max)] {
			tell(notify.Notification{Kind: notify.LimitReached, Used: after}, notify.LimitAlert(limit.Max))
		}
		switch {
		case m != nil:
			m.Alerts.Record = append(m.Alerts.Record, record...)
		case len(record) > 0:
			p.Alerted = append(p.Alerted, Alerted{Feature: f, Keys: record})
		}
	}
}
