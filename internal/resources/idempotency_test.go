package resources

import (
	"net/http"
	"testing"
)

// Every route that can change state goes through the idempotency middleware, which keys on
// Mutating: a POST, PUT, PATCH or DELETE left unmarked would silently bypass it. The providers'
// webhooks are the exception: keyed by the provider's signed event id, never by a caller's key.
func TestRoutes_EveryStateChangingMethodIsMutating(t *testing.T) {
	for _, r := range Routes {
		safe := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
		if r.Signed() {
			if r.Mutating {
				t.Errorf("%s %s is a webhook (keyed by the provider's event id) but marked Mutating", r.Method, r.Path)
			}
			continue
		}
		if !safe && !r.Mutating {
			t.Errorf("%s %s changes state but is not marked Mutating", r.Method, r.Path)
		}
		if safe && r.Mutating {
			t.Errorf("%s %s is marked Mutating but its method is safe", r.Method, r.Path)
		}
	}
}

// The CDK app grants each function exactly its Tables entries, so a function serving a mutating
// route without read-write access to the idempotency table would fail every keyed request.
func TestFunctions_ServingMutatingRoutes_CanWriteIdempotencyRecords(t *testing.T) {
	table, ok := TableByLogical(TableIdempotency)
	if !ok {
		t.Fatal("no idempotency table")
	}
	if table.TTLAttribute != IdempotencyTTLAttribute {
		t.Errorf("idempotency TTL attribute %q, want %q", table.TTLAttribute, IdempotencyTTLAttribute)
	}
	for _, r := range Routes {
		if !r.Mutating {
			continue
		}
		f, ok := FunctionByName(r.Function)
		if !ok {
			t.Errorf("%s %s: no function %q", r.Method, r.Path, r.Function)
			continue
		}
		if f.Tables[TableIdempotency] != ReadWrite {
			t.Errorf("function %s serves %s %s but has %q access to the idempotency table", f.Name, r.Method, r.Path, f.Tables[TableIdempotency])
		}
	}
}
