package inbox

import (
	"fmt"
	"strings"
	"time"
)

// Summary is one line saying what Facts hold, for golden files of the providers' fixtures.
func (f Facts) Summary() string {
	var customers []string
	for _, c := range f.Customers {
		customers = append(customers, string(c.Kind)+":"+c.ID)
	}
	at := ""
	if f.Time.Known() {
		at = f.Time.Time().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("kind=%q type=%q customers=[%s] plans=[%s] toDefault=%v feature=%q time=%s problem=%q",
		f.Kind, f.Type, strings.Join(customers, " "), strings.Join(f.PlanKeys, " "), f.ToDefault, f.FeatureCode, at, f.Problem)
}
