package dynamo

import (
	"reflect"
	"testing"
)

func TestNames(t *testing.T) {
	got := Names("SET #status = :s, #updatedAtMs = :now ADD #quarantineCount :one", "#status = :inserting AND attribute_not_exists(#billingAcceptedAtMs)")
	want := map[string]string{
		"#status": "status", "#updatedAtMs": "updatedAtMs", "#quarantineCount": "quarantineCount",
		"#billingAcceptedAtMs": "billingAcceptedAtMs",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Names = %v", got)
	}
	if Names("attribute_not_exists(pk)") != nil {
		t.Error("an expression with no aliases has names")
	}
}
