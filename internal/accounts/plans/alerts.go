package plans

import (
	"errors"
	"fmt"
	"sort"
)

// Threshold is a level of a feature's usage worth telling the platform about (package
// internal/alerts/notify): a share of the limit (Percent, 1 to 100) or an absolute quantity
// (Value, at least 1). Exactly one of the two is set.
type Threshold struct {
	Percent int64 `json:"percent,omitempty" dynamodbav:"percent,omitempty"`
	Value   int64 `json:"value,omitempty" dynamodbav:"value,omitempty"`
}

// DefaultThresholds are a capped feature's thresholds when its plan names none: 80% and 100% of
// the limit.
var DefaultThresholds = []Threshold{{Percent: 80}, {Percent: 100}}

// MaxThresholds bounds a feature's thresholds: each one crossed is a notification written in the
// claim that crosses it.
const MaxThresholds = 5

// Level is a threshold resolved against a limit: the usage At which it is crossed, and the share
// of the limit it was given as (0 for an absolute threshold).
type Level struct {
	At      int64
	Percent int64
}

// CheckThresholds names every problem of a feature's thresholds.
func CheckThresholds(ts []Threshold) error {
	var errs []error
	if len(ts) > MaxThresholds {
		errs = append(errs, fmt.Errorf("at most %d thresholds, not %d", MaxThresholds, len(ts)))
	}
	seen := map[Threshold]bool{}
	for i, t := range ts {
		switch {
		case (t.Percent == 0) == (t.Value == 0):
			errs = append(errs, fmt.Errorf("threshold %d: give exactly one of percent and value", i))
		case t.Percent != 0 && (t.Percent < 1 || t.Percent > 100):
			errs = append(errs, fmt.Errorf("threshold %d: percent is an integer from 1 to 100, not %d", i, t.Percent))
		case t.Value != 0 && (t.Value < 1 || t.Value > MaxLimit):
			errs = append(errs, fmt.Errorf("threshold %d: value is an integer from 1 to %d, not %d", i, int64(MaxLimit), t.Value))
		}
		if seen[t] {
			errs = append(errs, fmt.Errorf("threshold %d is given twice", i))
		}
		seen[t] = true
	}
	return errors.Join(errs...)
}

// Levels resolves thresholds against a limit, lowest first: a percent is crossed at the smallest
// usage that is at least that share of the limit. A level the limit puts out of reach (above it,
// or none for an unlimited feature's percent) or below 1 is left out, and two thresholds that
// resolve to one usage are one level (the percent kept).
func Levels(ts []Threshold, limit Limit) []Level {
	byAt := map[int64]Level{}
	for _, t := range ts {
		l := Level{At: t.Value}
		if t.Percent != 0 {
			if limit.Unlimited {
				continue
			}
			l = Level{At: (limit.Max*t.Percent + 99) / 100, Percent: t.Percent}
		}
		if l.At < 1 || (!limit.Unlimited && l.At > limit.Max) {
			continue
		}
		if prev, ok := byAt[l.At]; !ok || prev.Percent == 0 {
			byAt[l.At] = l
		}
	}
	out := make([]Level, 0, len(byAt))
	for _, l := range byAt {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// Thresholds are a feature's thresholds on the plan: those it names, or DefaultThresholds for a
// capped plan that names none. Only a capped plan's features have thresholds: a threshold is
// decided on the budget row the cap keeps.
func (p Plan) Thresholds(feature string) []Threshold {
	if p.Tier != Capped {
		return nil
	}
	f, ok := p.Features[feature]
	if !ok || f.Grant != nil {
		return nil
	}
	if f.Alerts != nil {
		return *f.Alerts
	}
	return DefaultThresholds
}
