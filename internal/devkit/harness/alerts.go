package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// checkAlerts holds a capped account's notifications to its meters, cycle by cycle and feature
// by feature: a threshold is notified exactly when the usage reached it, and limit.reached
// exactly when an event was refused for the feature's limit. Each notification's key makes it
// one item, so "exactly" here means: none missing, none for a threshold the usage never
// reached, none for a limit nothing was refused at, and nothing resolved. A limit raised during
// the schedule moves the thresholds, so then only the second half holds (nothing notified that
// was not reached), and each threshold.resolved must stand above the usage it was told at.
func (p *Events) checkAlerts(ctx context.Context, s *Schedule, st *eventsState, cycles map[string]bool,
	refused map[string][]ledger.Entry, refusedEvents bool) []string {
	var v []string
	bad := func(format string, args ...any) { v = append(v, "alerts: "+fmt.Sprintf(format, args...)) }
	got, err := accountNotes(ctx, s.Env, st.acct.ID)
	if err != nil {
		bad("read the notifications: %v", err)
		return v
	}
	capped := st.plan == "free" && !st.inactive
	if !capped {
		if len(got) > 0 && !(st.inactive && st.reactivate) {
			bad("%d notifications for an account on the %s plan (inactive %v); a plan without a cap has no thresholds", len(got), st.plan, st.inactive)
		}
		return v
	}
	limits := map[string]int64{plans.FeatureEvents: st.limit}
	if st.meters {
		// The additive meters' features: a MAX figure (gb) decides no thresholds.
		limits[meterTokens], limits[meterUsers] = st.limits[meterTokens], st.limits[meterUsers]
	}
	want := map[string]bool{}
	for c := range cycles {
		for f, limit := range limits {
			t, err := s.Env.Worker().Usage.Read(ctx, st.acct.ID, f, c)
			if err != nil {
				bad("read %s: %v", f, err)
				return v
			}
			thresholds := plans.DefaultThresholds
			if st.thresholds != nil {
				thresholds = st.thresholds
			}
			for _, l := range plans.Levels(thresholds, plans.Max(limit)) {
				if l.At <= t.Used {
					want[noteKey(c, f, crossedKey(l.At))] = true
				}
			}
			refusedHere := len(refused[f]) > 0 || (f == plans.FeatureEvents && refusedEvents)
			if refusedHere {
				want[noteKey(c, f, limitKey(limit))] = true
			}
			for k := range got {
				if k.cycle != c || k.feature != f {
					continue
				}
				switch k.kind {
				case notify.ThresholdCrossed:
					if k.at > t.Used {
						bad("%s notified in cycle %s for %s, which the usage (%d) never reached", k.key, c, f, t.Used)
					}
				case notify.ThresholdResolved:
					if k.at <= k.used {
						bad("%s notified in cycle %s for %s at usage %d, which is not below it", k.key, c, f, k.used)
					}
				case notify.LimitReached:
					if !refusedHere {
						bad("limit.reached notified for %s in cycle %s, and no event was refused for its limit", f, c)
					}
				}
			}
		}
	}
	if st.raised > 0 {
		return v
	}
	told := map[string]bool{}
	for k := range got {
		told[noteKey(k.cycle, k.feature, k.key)] = true
	}
	var missing, extra []string
	for k := range want {
		if !told[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[noteKey(k.cycle, k.feature, k.key)] {
			extra = append(extra, noteKey(k.cycle, k.feature, k.key))
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 {
		bad("never notified: %v", missing)
	}
	if len(extra) > 0 {
		bad("notified and not reached: %v", extra)
	}
	return v
}

// note names one stored notification: its cycle, feature, kind and key (and, for a threshold,
// the usage it stands at and the usage it was told at).
type note struct {
	cycle, feature, key string
	kind                notify.Kind
	at, used            int64
}

func noteKey(cycle, feature, key string) string { return cycle + "/" + feature + "/" + key }

// crossedKey, resolvedKey and limitKey are the notes' keys: a threshold by the usage it stands
// at, limit.reached by the limit.
func crossedKey(at int64) string  { return fmt.Sprintf("crossed@%d", at) }
func resolvedKey(at int64) string { return fmt.Sprintf("resolved@%d", at) }
func limitKey(limit int64) string { return fmt.Sprintf("limit=%d", limit) }

// accountNotes reads an account's notifications, strongly consistent.
func accountNotes(ctx context.Context, env *Env, account string) (map[note]bool, error) {
	out := map[note]bool{}
	var start map[string]types.AttributeValue
	for {
		page, err := env.Admin.DynamoDB.Scan(ctx, &dynamodb.ScanInput{
			TableName: aws.String(env.Names.Table(resources.TableNotifications)), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return nil, err
		}
		for _, item := range page.Items {
			if dynamo.Str(item, "sk") != notify.SKNotification || dynamo.Str(item, notify.AttrAccount) != account {
				continue
			}
			n := notify.StoredOf(item)
			var m notify.Message
			if err := json.Unmarshal(n.Body, &m); err != nil {
				return nil, fmt.Errorf("notification %s: %w", n.ID, err)
			}
			k := note{cycle: n.Cycle, feature: n.Feature, kind: n.Kind}
			switch n.Kind {
			case notify.ThresholdCrossed:
				k.key, k.at, k.used = crossedKey(*m.Data.Threshold), *m.Data.Threshold, *m.Data.Used
			case notify.ThresholdResolved:
				k.key, k.at, k.used = resolvedKey(*m.Data.Threshold), *m.Data.Threshold, *m.Data.Used
			case notify.LimitReached:
				k.key = limitKey(*m.Data.Limit)
			default:
				continue // the kinds the events pipeline does not decide
			}
			out[k] = true
		}
		if start = page.LastEvaluatedKey; len(start) == 0 {
			return out, nil
		}
	}
}
