package plans

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The plan catalogs under testdata/plans are FERRY_PLANS replacements as an operator writes
// them: each parses, round-trips through its JSON form unchanged, and every tier is present.
func TestFixtures_PlanCatalogsParseAndRoundTrip(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "plans", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no plan fixtures: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			c, err := Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			again, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse(again)
			if err != nil {
				t.Fatalf("the catalog's own JSON does not parse: %v", err)
			}
			if !reflect.DeepEqual(c, back) {
				t.Errorf("round trip changed the catalog:\n%+v\n%+v", c, back)
			}
			tiers := map[Tier]bool{}
			for _, p := range c.Plans {
				tiers[p.Tier] = true
			}
			for _, tier := range []Tier{Capped, Counted, Internal} {
				if !tiers[tier] {
					t.Errorf("no %s plan", tier)
				}
			}
		})
	}
}
