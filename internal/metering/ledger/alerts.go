package ledger

import (
	"sort"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
)

// Alerts in the claim. A threshold is decided by the claim that moves the budget row past it,
// in the same transaction, so no redelivery, crash or race can lose it or decide it twice:
//
//   - The plan fires every threshold of the feature that the row's usage as read plus the
//     claim's amount reaches and the row has not recorded (usage.Row.Alerted): it puts the
//     notification, conditional on its absence (notify.Put), and records the alert on the row.
//     A threshold a hold's charge stepped over is so decided by the next claim.
//   - Every capped add on a feature with a threshold left above it is held to the usage its plan
//     was made at (usage.Alerts.Below): a claim that planned to cross nothing is cancelled when
//     another claim has since brought the row to where its amount would cross, and plans again.
//     Two claims therefore never both step over a threshold without one of them deciding it, and
//     a claim that crosses none writes nothing more than before (a condition costs nothing).
//   - A claim that refuses an event for a feature's limit decides limit.reached once a cycle the
//     same way (recorded on the row as notify.AlertLimit).
//
// A new cycle's budget row starts with no alerts, so every cycle starts clean.

// Alerted is the alerts a claim records on the budget row of a feature it moves nothing on.
type Alerted struct {
	Feature string
	Keys    []string
}

// decideAlerts adds the claim's alerts to its plan: per capped add, the thresholds it crosses and
// the usage it is held under; per feature whose limit refused a member (limited: feature →
// meter), limit.reached.
func decideAlerts(p *UnitPlan, in UnitInput, limited map[string]string) {
	adds := map[string]int{} // feature → index in p.Moves of its capped add
	for i := range p.Moves {
		m := &p.Moves[i]
		if !m.Capped || m.Add <= 0 || m.Limit.Unlimited {
			continue
		}
		adds[m.Feature] = i
		row := in.State.Rows[m.Feature]
		after := row.Used + m.Add
		for _, l := range in.Thresholds(m.Feature) {
			key := notify.ThresholdAlert(l.At)
			if row.Alerted[key] {
				continue
			}
			if l.At <= after {
				m.Alerts.Record = append(m.Alerts.Record, key)
				p.Notes = append(p.Notes, notify.Notification{
					Kind: notify.ThresholdCrossed, Account: in.AccountID, Feature: m.Feature, Meter: m.Meter, Cycle: in.Cycle,
					Threshold: l.At, Percent: l.Percent, Limit: m.Limit.Max, Used: after, AtMs: in.NowMs,
				})
				continue
			}
			// The lowest threshold left above: the claim crosses it from any usage at or over
			// l.At - m.Add, so it commits only from below that.
			if m.Alerts.Below == 0 {
				m.Alerts.Below = l.At - m.Add
			}
		}
	}
	features := make([]string, 0, len(limited))
	for f := range limited {
		features = append(features, f)
	}
	sort.Strings(features)
	for _, f := range features {
		row := in.State.Rows[f]
		if row.Alerted[notify.AlertLimit] {
			continue
		}
		used := row.Used
		if i, ok := adds[f]; ok {
			used += p.Moves[i].Add
			p.Moves[i].Alerts.Record = append(p.Moves[i].Alerts.Record, notify.AlertLimit)
		} else {
			p.Alerted = append(p.Alerted, Alerted{Feature: f, Keys: []string{notify.AlertLimit}})
		}
		p.Notes = append(p.Notes, notify.Notification{
			Kind: notify.LimitReached, Account: in.AccountID, Feature: f, Meter: limited[f], Cycle: in.Cycle,
			Limit: in.Limit(f).Max, Used: used, AtMs: in.NowMs,
		})
	}
}
