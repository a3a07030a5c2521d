package plans_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
)

func TestLevels_PercentsRoundUp_OutOfReachLeftOut(t *testing.T) {
	ts := []plans.Threshold{{Percent: 80}, {Percent: 100}, {Value: 50}, {Value: 2000}, {Percent: 5}}
	got := plans.Levels(ts, plans.Max(999))
	// 5% of 999 is 49.95: crossed at 50, the same usage as the absolute 50, which it replaces.
	want := []plans.Level{{At: 50, Percent: 5}, {At: 800, Percent: 80}, {At: 999, Percent: 100}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("levels %v; want %v", got, want)
	}
	if got := plans.Levels(ts, plans.Unlimited); !reflect.DeepEqual(got, []plans.Level{{At: 50}, {At: 2000}}) {
		t.Fatalf("an unlimited feature keeps only absolute levels: %v", got)
	}
	if got := plans.Levels(plans.DefaultThresholds, plans.Max(0)); len(got) != 0 {
		t.Fatalf("a limit of 0 has nothing to cross: %v", got)
	}
}

func TestCheckThresholds_NamesEveryProblem(t *testing.T) {
	err := plans.CheckThresholds([]plans.Threshold{{Percent: 80, Value: 5}, {}, {Percent: 101}, {Value: -1}, {Percent: 80, Value: 5}, {Percent: 1}})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"at most 5 thresholds", "threshold 0: give exactly one", "threshold 1: give exactly one", "threshold 2: percent", "threshold 3: value", "threshold 4 is given twice"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if err := plans.CheckThresholds(plans.DefaultThresholds); err != nil {
		t.Fatal(err)
	}
}

func TestParse_Alerts_DefaultOnCappedPlans_CheckedWhenGiven(t *testing.T) {
	c := plans.Default()
	freePlan, _ := c.Plan("free")
	if got := freePlan.Thresholds("events"); !reflect.DeepEqual(got, plans.DefaultThresholds) {
		t.Fatalf("free plan's events thresholds %v; want the defaults", got)
	}
	plus, _ := c.Plan("plus")
	if got := plus.Thresholds("events"); got != nil {
		t.Fatalf("a counted plan has no thresholds: %v", got)
	}
	if got := freePlan.Thresholds("credits"); got != nil {
		t.Fatalf("an allowance has no thresholds: %v", got)
	}
	catalog := func(plans ...string) string {
		return `{"default":"free","plans":{` + strings.Join(plans, ",") + `}}`
	}
	free := `"free":{"tier":"capped","monthlyMicros":0,"features":{"events":{"limit":100,"alerts":[{"percent":50}]}}}`
	quiet := `"quiet":{"tier":"capped","monthlyMicros":0,"features":{"events":{"limit":100,"alerts":[]}}}`
	counted := `"plus":{"tier":"counted","monthlyMicros":0,"features":{"events":{"limit":null,"alerts":[{"value":10}]}}}`
	bad := `"bad":{"tier":"capped","monthlyMicros":0,"features":{"events":{"limit":100,"alerts":[{"percent":0}]}}}`
	_, err := plans.Parse([]byte(catalog(free, quiet, counted, bad)))
	if err == nil || !strings.Contains(err.Error(), "plan plus feature events: alerts are decided on a capped plan") ||
		!strings.Contains(err.Error(), "plan bad feature events alerts: threshold 0") {
		t.Fatalf("Parse: %v", err)
	}
	c, err = plans.Parse([]byte(catalog(free, quiet)))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Plan("free")
	q, _ := c.Plan("quiet")
	if !reflect.DeepEqual(p.Thresholds("events"), []plans.Threshold{{Percent: 50}}) || len(q.Thresholds("events")) != 0 || q.Thresholds("events") == nil {
		t.Fatalf("thresholds %v and %v; want the plan's own, and none", p.Thresholds("events"), q.Thresholds("events"))
	}
}
