package resources_test

import (
	"iter"
	"net/http"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Every route that can change state goes through the idempotency middleware, which keys on the
// route's Idempotency: a POST, PUT, PATCH or DELETE without one would silently bypass it. The
// webhook routes are the exception: their providers send no Idempotency-Key, and the inbox
// dedupes every delivery by its signed event id instead (a copy is counted, never stored twice).
func TestRoutes_EveryStateChangingMethodIsMutating(t *testing.T) {
	for _, r := range resources.Routes {
		safe := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
		if r.Auth == resources.WebhookSignature {
			if r.Mutating() {
				t.Errorf("%s is a webhook route: its provider sends no Idempotency-Key", r.Key())
			}
			continue
		}
		// Signing in and out act on the console session itself: a sign-in's answer is a new
		// session's CSRF token, which the idempotency table must not keep (a repeated sign-in is
		// simply another session), and signing out twice finds no session the second time.
		if strings.HasPrefix(r.Path, "/v1/sessions") {
			if r.Mutating() {
				t.Errorf("%s would keep a session's answer in the idempotency table", r.Key())
			}
			continue
		}
		if !safe && !r.Mutating() {
			t.Errorf("%s changes state but keeps no idempotent answers", r.Key())
		}
		if safe && r.Mutating() {
			t.Errorf("%s keeps idempotent answers but its method is safe", r.Key())
		}
	}
}

// Answers are kept at least the 24 hours clients are used to, and a week on the event routes,
// whose clients replay buffered flushes after their own outages.
func TestRoutes_Retention(t *testing.T) {
	for _, r := range resources.Routes {
		want := resources.IdempotencyRetention
		switch r.Key() {
		case "POST /v1/events", "POST /v1/events/batch":
			want = resources.EventIdempotencyRetention
		}
		if r.Mutating() && r.Idempotency != want {
			t.Errorf("%s keeps answers %s, want %s", r.Key(), r.Idempotency, want)
		}
	}
}

// The CDK app grants each function exactly its Tables entries, so a function serving a mutating
// route without read-write access to the idempotency table would fail every keyed request.
func TestFunctions_ServingMutatingRoutes_CanWriteIdempotencyRecords(t *testing.T) {
	table, ok := resources.TableByLogical(resources.TableIdempotency)
	if !ok {
		t.Fatal("no idempotency table")
	}
	if table.TTLAttribute != resources.IdempotencyTTLAttribute {
		t.Errorf("idempotency TTL attribute %q, want %q", table.TTLAttribute, resources.IdempotencyTTLAttribute)
	}
	for r, f := range mutatingRoutes(t) {
		if f.Tables[resources.TableIdempotency] != resources.ReadWrite {
			t.Errorf("function %s serves %s but has %q access to the idempotency table", f.Name, r.Key(), f.Tables[resources.TableIdempotency])
		}
	}
}

// A claim may be taken over only once its owner cannot be running any more: the lease must
// outlast the timeout of every function that serves a mutating route.
func TestLease_OutlastsEveryFunctionServingAMutatingRoute(t *testing.T) {
	for r, f := range mutatingRoutes(t) {
		if f.Timeout >= idempotency.Lease {
			t.Errorf("%s is served by %s with a %s timeout; the lease is %s", r.Key(), f.Name, f.Timeout, idempotency.Lease)
		}
	}
}

// Only a function that serves an operator route reads the operator key, and each such function
// is given the secret that holds it.
func TestFunctions_TheOperatorKeyGoesOnlyWhereOperatorRoutesAre(t *testing.T) {
	for _, f := range resources.Functions {
		lists := false
		for _, s := range f.Secrets {
			lists = lists || s == resources.EnvAdminKeySecretARN
		}
		if needs := resources.NeedsOperatorKey(resources.Routes, f.Name); needs != lists {
			t.Errorf("function %s: serves an operator route %v, is given the operator key's secret %v", f.Name, needs, lists)
		}
	}
}

// mutatingRoutes yields every mutating route of the table with the function that serves it; a
// route naming no function fails the test.
func mutatingRoutes(t *testing.T) iter.Seq2[resources.Route, resources.Function] {
	return func(yield func(resources.Route, resources.Function) bool) {
		for _, r := range resources.Routes {
			if !r.Mutating() {
				continue
			}
			f, ok := resources.FunctionByName(r.Function)
			if !ok {
				t.Errorf("%s: no function %q", r.Key(), r.Function)
				continue
			}
			if !yield(r, f) {
				return
			}
		}
	}
}
