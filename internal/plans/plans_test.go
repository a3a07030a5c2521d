package plans

import (
	"encoding/json"
	"testing"
)

func TestDefault_CarriesThePublishedPricing(t *testing.T) {
	c := Default()
	free, _ := c.Plan("free")
	if free.Tier != Capped || free.Limit(FeatureEvents) != Max(1000) || free.MonthlyMicros != 0 {
		t.Errorf("free = %+v", free)
	}
	plus, _ := c.Plan("plus")
	ev := plus.Features[FeatureEvents]
	if plus.Tier != Counted || !ev.Limit.Unlimited || ev.Included != 100_000 || ev.OverageMicros != 280 || plus.MonthlyMicros != 28_000_000 {
		t.Errorf("plus = %+v", plus)
	}
	internal, _ := c.Plan("internal")
	if internal.Tier != Internal || !internal.Limit(FeatureEvents).Unlimited {
		t.Errorf("internal = %+v", internal)
	}
	if c.Default != "free" {
		t.Errorf("default = %q", c.Default)
	}
}

func TestParse_RefusesInvalidCatalogs(t *testing.T) {
	for name, in := range map[string]string{
		"unknown tier":     `{"default":"a","plans":{"a":{"tier":"gold","features":{"events":{"limit":1}}}}}`,
		"missing default":  `{"default":"b","plans":{"a":{"tier":"capped","features":{"events":{"limit":1}}}}}`,
		"negative limit":   `{"default":"a","plans":{"a":{"tier":"capped","features":{"events":{"limit":-1}}}}}`,
		"no events":        `{"default":"a","plans":{"a":{"tier":"capped","features":{}}}}`,
		"unknown field":    `{"default":"a","plans":{"a":{"tier":"capped","price":3,"features":{"events":{"limit":1}}}}}`,
		"fractional limit": `{"default":"a","plans":{"a":{"tier":"capped","features":{"events":{"limit":1.5}}}}}`,
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLimit_JSONRoundTrip(t *testing.T) {
	for _, l := range []Limit{Unlimited, Max(0), Max(40)} {
		data, _ := json.Marshal(l)
		var back Limit
		if err := json.Unmarshal(data, &back); err != nil || back != l {
			t.Errorf("%+v → %s → %+v (%v)", l, data, back, err)
		}
	}
	if r := Max(10).Remaining(12); *r != 0 {
		t.Errorf("remaining past the limit = %d", *r)
	}
	if Unlimited.Remaining(5) != nil {
		t.Error("unlimited has a remaining")
	}
}
