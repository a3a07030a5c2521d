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
		"a limit of 2^53":  `{"default":"a","plans":{"a":{"tier":"capped","features":{"events":{"limit":9007199254740992}}}}}`,
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A finite limit is at most 2^53−1, the largest integer every store keeps exactly: one more
// would be read back as another number.
func TestLimit_AtMostTheLargestExactInteger(t *testing.T) {
	if MaxLimit != 1<<53-1 {
		t.Errorf("MaxLimit is %d, want 2^53−1", int64(MaxLimit))
	}
	for raw, ok := range map[string]bool{"9007199254740991": true, "9007199254740992": false, "9007199254740993": false, "9223372036854775807": false, "-1": false} {
		var l Limit
		err := json.Unmarshal([]byte(raw), &l)
		if (err == nil) != ok {
			t.Errorf("limit %s: err %v, want accepted %v", raw, err, ok)
		}
		if err != nil && err.Error() != "a limit is an integer from 0 to 9007199254740991, or null (unlimited)" {
			t.Errorf("limit %s refused as %q", raw, err)
		}
	}
}

func TestLimit_JSONRoundTrip(t *testing.T) {
	for _, l := range []Limit{Unlimited, Max(0), Max(40), Max(MaxLimit)} {
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

func TestDefault_MapsProviderPlansAndGrantsCredits(t *testing.T) {
	c := Default()
	if p, ok := c.PlanForKindeKey("customer_pro_plan"); !ok || p.Name != "plus" {
		t.Errorf("customer_pro_plan → %+v %v", p, ok)
	}
	if p, ok := c.PlanForStripePrice("price_ferry_plus_monthly"); !ok || p.Name != "plus" {
		t.Errorf("price_ferry_plus_monthly → %+v %v", p, ok)
	}
	if _, ok := c.PlanForKindeKey("customer_gold_plan"); ok {
		t.Error("an unknown Kinde plan key names a plan")
	}
	if !c.Allowance("credits") || c.Allowance(FeatureEvents) {
		t.Errorf("allowances: %v", c.AllowanceFeatures())
	}
	free, _ := c.Plan("free")
	plus, _ := c.Plan("plus")
	if free.Grant("credits") != 10 || plus.Grant("credits") != 500 || free.Limit("credits") != Max(10) || free.Grant(FeatureEvents) != 0 {
		t.Errorf("grants: free %d plus %d", free.Grant("credits"), plus.Grant("credits"))
	}
	if d := c.Definition(FeatureEvents); d.Kinde == nil || d.Kinde.FeatureCode != "events" || d.Stripe == nil || d.Stripe.MeterID == "" {
		t.Errorf("events definition %+v", d)
	}
}

func TestParse_RefusesInvalidProviderMappings(t *testing.T) {
	const plan = `"tier":"capped","features":{"events":{"limit":1}`
	for name, in := range map[string]string{
		"a Kinde key on two plans": `{"default":"a","plans":{"a":{` + plan + `},"kindePlanKeys":["k"]},"b":{` + plan + `},"kindePlanKeys":["k"]}}}`,
		"an empty Stripe price":    `{"default":"a","plans":{"a":{` + plan + `},"stripePriceIds":[""]}}}`,
		"allowance without grant":  `{"default":"a","features":{"credits":{"allowance":true}},"plans":{"a":{"tier":"capped","features":{"events":{"limit":1},"credits":{"limit":5}}}}}`,
		"grant on a plain feature": `{"default":"a","plans":{"a":{"tier":"capped","features":{"events":{"limit":1},"tokens":{"grant":5}}}}}`,
		"negative grant":           `{"default":"a","features":{"credits":{"allowance":true}},"plans":{"a":{"tier":"capped","features":{"events":{"limit":1},"credits":{"grant":-1}}}}}`,
		"events as an allowance":   `{"default":"a","features":{"events":{"allowance":true}},"plans":{"a":{"tier":"capped","features":{"events":{"grant":1}}}}}`,
		"a definition of nothing":  `{"default":"a","features":{"seats":{}},"plans":{"a":{` + plan + `}}}}`,
		"a Kinde meter, no code":   `{"default":"a","features":{"events":{"kinde":{"featureCode":""}}},"plans":{"a":{` + plan + `}}}}`,
		"a Stripe meter, no id":    `{"default":"a","features":{"events":{"stripe":{"meterEventName":"e"}}},"plans":{"a":{` + plan + `}}}}`,
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
