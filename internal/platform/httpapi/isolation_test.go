package httpapi_test

// The isolation matrix: every route of the route table, by who may call it, against every way a
// caller can be the wrong one — no key, a malformed key, a key of nobody, another account's
// key, the operator's key where an account's is wanted and the other way round, and a webhook
// without its signature — each answered as openapi.yaml documents it. Another account's
// resource answers exactly what an unknown id answers, and no answer shows Ferry's internals.

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/ferrymeter/ferry/api"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// isolationBodies is a valid body for each route that takes one: a refusal must come from who
// the caller is, never from what it sent. A route with a body and no entry fails the matrix.
var isolationBodies = map[string]string{
	"POST /v1/webhook-endpoints": `{"url":"https://hooks.example.com/iso"}`, "GET /v1/webhook-endpoints": "",
	"GET /v1/webhook-endpoints/{id}": "", "PATCH /v1/webhook-endpoints/{id}": `{"disabled":true}`,
	"DELETE /v1/webhook-endpoints/{id}": "", "POST /v1/webhook-endpoints/{id}/rotate-secret": `{}`,
	"GET /v1/webhook-endpoints/{id}/deliveries": "", "POST /v1/webhook-endpoints/{id}/deliveries/{notification}/replay": `{}`,
	"POST /v1/accounts":                   `{"id":"acct_iso_new","plan":"free"}`,
	"PATCH /v1/accounts/{id}":             `{"status":"active"}`,
	"POST /v1/events":                     `{"specversion":"1.0","id":"evt_iso_b","source":"/iso","type":"api.call"}`,
	"POST /v1/events/batch":               `[{"specversion":"1.0","id":"evt_iso_batch_b","source":"/iso","type":"api.call"}]`,
	"POST /v1/holds":                      `{"key":"job-iso-b","feature":"tokens","amount":5}`,
	"POST /v1/holds/{id}/charges":         `{"key":"step-iso","amount":1}`,
	"POST /v1/holds/{id}/settle":          `{"used":1}`,
	"POST /v1/usage/corrections":          `{"account":"acct_a","feature":"events","units":1,"reason":"isolation"}`,
	"POST /v1/report":                     `{}`,
	"POST /v1/reconcile":                  `{"account":"acct_a"}`,
	"POST /v1/billing-events/{id}/replay": `{}`,
	"POST /v1/webhooks/kinde":             "",
	"POST /v1/webhooks/stripe":            "",
	"GET /v1/accounts/{id}":               "",
	"GET /v1/events/{id}":                 "",
	"GET /v1/usage":                       "",
	"GET /v1/usage/query":                 "",
	"GET /v1/holds/{id}":                  "",
	"GET /v1/reconcile/evidence":          "",
	"GET /v1/reconcile/review":            "",
	"GET /v1/billing-events":              "",
	"GET /v1/billing-events/{id}":         "",
	"GET /v1/accounts":                    "",
	"GET /v1/accounts/{id}/standing":      "",
	"GET /v1/events":                      "",
	"POST /v1/events/{id}/redrive":        `{}`,
	"GET /v1/holds":                       "",
	"GET /v1/outbox":                      "",
	"POST /v1/sessions":                   "",
	"GET /v1/sessions/current":            "",
	"DELETE /v1/sessions/current":         "",
	"POST /v1/labs/{lab}/runs":            `{}`,
	// The console's page and files are Public: no credential is asked for, so nothing to refuse.
	"GET /console":         "",
	"GET /console/{asset}": "",
}

// isolationQueries is the query a route needs to get past its own checks.
var isolationQueries = map[string]string{
	"GET /v1/usage":              "?feature=events",
	"GET /v1/usage/query":        "?meter=events&window=DAY&from=2026-11-01T00:00:00Z&to=2026-11-03T00:00:00Z",
	"GET /v1/reconcile/evidence": "?account=acct_a&cycle=2026-11",
	"GET /v1/events":             "?status=REJECTED",
	"GET /v1/holds":              "?status=RUNNING",
	"GET /v1/outbox":             "?account=acct_a&cycle=2026-11",
}

// ids are account A's resources and, for each, an id of the same kind that names nothing.
type ids struct{ own, unknown string }

// internals are words that belong to Ferry's insides and never to an answer: the parser's, the
// AWS SDK's and the emulators', Go's runtime's, and the resource names.
var internals = append([]string{
	"DynamoDB", "dynamodb", "operation error", "api error", "StatusCode", "RequestID", "ConditionalCheck",
	"TransactionCanceled", "ResourceNotFound", "ValidationException", "SQS", "S3:", "arn:aws", "panic",
	"goroutine", "runtime error", "nil pointer", ".go:", "127.0.0.1", "localhost", "context deadline",
	"stripe-go", "keyfunc", "jwkset", "token is malformed", "crypto/rsa",
}, leaks...)

// checkNoInternals fails if an answer shows Ferry's insides or a 5xx.
func checkNoInternals(t *testing.T, what string, r apptest.Response, prefix string) {
	t.Helper()
	if r.Status >= 500 {
		t.Errorf("%s: %d %s", what, r.Status, r.Body)
	}
	body := string(r.Body)
	for _, word := range append(internals, prefix) {
		if strings.Contains(body, word) {
			t.Errorf("%s: the answer shows %q: %s", what, word, body)
		}
	}
}

func TestIsolation_EveryRouteRefusesEveryWrongCaller_AsDocumented(t *testing.T) {
	doc := loadOpenAPI(t)
	h := apptest.New(t)
	h.Signer(t) // Kinde deliveries verifiable: a refusal is the signature's, not a missing key URL
	keyA := h.CreateAccount(t, "acct_a", "free", map[string]any{"tokens": 1000})
	keyB := h.CreateAccount(t, "acct_b", "free", map[string]any{"tokens": 1000})
	if r := h.Do(t, "PATCH", "/v1/accounts/acct_a", apptest.AdminKey, map[string]any{"stripeCustomerId": "cus_RabcDEFghiJKL"}); r.Status != http.StatusOK {
		t.Fatalf("link: %d %s", r.Status, r.Body)
	}
	// Account A's resources: an event, a hold and a billing event attributed to it.
	if r := h.Do(t, "POST", "/v1/events", keyA, `{"specversion":"1.0","id":"evt_iso_a","source":"/iso","type":"api.call"}`); r.Status != http.StatusAccepted {
		t.Fatalf("event: %d %s", r.Status, r.Body)
	}
	r := h.Do(t, "POST", "/v1/holds", keyA, `{"key":"job-iso-a","feature":"tokens","amount":10}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("hold: %d %s", r.Status, r.Body)
	}
	hold := r.JSON(t)["id"].(string)
	path, raw, headers := h.Webhook(t, "stripe", "invoice_paid_basil")
	r = h.Do(t, "POST", path, "", raw, headers...)
	if r.Status != http.StatusOK {
		t.Fatalf("webhook: %d %s", r.Status, r.Body)
	}
	billing := r.JSON(t)["id"].(string)
	h.Drain(t, 0)
	resourceIDs := map[string]ids{
		"/v1/events/{id}":         {"evt_iso_a", "evt_iso_none"},
		"/v1/holds/{id}":          {hold, holds.ID("acct_b", "job-iso-none")},
		"/v1/billing-events/{id}": {billing, inbox.ID(inbox.Stripe, "evt_iso_none")},
	}
	resourceOf := func(route resources.Route) (ids, bool) {
		for prefix, id := range resourceIDs {
			if route.Path == prefix || strings.HasPrefix(route.Path, prefix+"/") {
				return id, true
			}
		}
		return ids{}, false
	}
	// Every id account A owns, and its id: what another account's answers must never show.
	secretsOfA := []string{"acct_a", "evt_iso_a", hold, billing, "cus_RabcDEFghiJKL"}

	// A key of nobody, well formed; one as long as the operator key; the operator's with a byte
	// more.
	nobody := "fk_" + strings.Repeat("A", 43)
	sameLength := strings.Repeat("x", len(apptest.AdminKey))
	malformed := []string{"Bearer", "Bearer ", "Basic " + keyA, "Token " + keyA, keyA, "Bearer fk_", "Bearer fk_" + strings.Repeat("x", 300), "Bearer " + keyA + " " + keyA, "Bearer\t"}

	type call struct {
		name   string
		header []string // Authorization and more, as pairs
		path   string
	}
	for _, route := range resources.Routes {
		key := route.Key()
		body, ok := isolationBodies[key]
		if !ok {
			t.Errorf("%s: no valid body in isolationBodies; add one so the matrix covers the route", key)
			continue
		}
		op := operationOf(doc, route)
		if op == nil {
			t.Errorf("%s: not in openapi.yaml", key)
			continue
		}
		if route.Auth == resources.Public {
			checkSecurity(t, op, route)
			continue
		}
		concrete := route.Path
		res, hasResource := resourceOf(route)
		if strings.Contains(route.Path, "{id}") {
			switch {
			case hasResource:
				concrete = strings.Replace(route.Path, "{id}", res.own, 1)
			case route.Auth == resources.Operator && strings.HasPrefix(route.Path, "/v1/events/"):
				concrete = strings.Replace(route.Path, "{id}", "evt_iso_a", 1)
			case route.Auth == resources.Operator:
				concrete = strings.Replace(route.Path, "{id}", "acct_a", 1)
			default:
				t.Errorf("%s: an account's resource with no entry in resources; add one so another account's key is tried on it", key)
				continue
			}
		}
		concrete += isolationQueries[key]
		send := func(c call) apptest.Response {
			var b any
			if body != "" {
				b = body
			}
			return h.Do(t, route.Method, c.path, "", b, c.header...)
		}
		auth := func(v string) []string { return []string{"Authorization", v} }

		// The calls that must be refused, and the documented refusal.
		var refused []call
		refused = append(refused, call{"no key", nil, concrete})
		for _, m := range malformed {
			refused = append(refused, call{"malformed key " + fmt.Sprintf("%.24q", m), auth(m), concrete})
		}
		refused = append(refused,
			call{"a key of nobody", auth("Bearer " + nobody), concrete},
			call{"a wrong key as long as the operator's", auth("Bearer " + sameLength), concrete},
			call{"the operator key and a byte more", auth("Bearer " + apptest.AdminKey + "x"), concrete},
		)
		switch route.Auth {
		case resources.Account:
			refused = append(refused, call{"the operator key on an account route", auth("Bearer " + apptest.AdminKey), concrete})
		case resources.Operator, resources.OperatorSignIn:
			refused = append(refused, call{"an account key on an operator route", auth("Bearer " + keyA), concrete})
		case resources.WebhookSignature:
			// No signature: the media type right, the body a delivery, nothing signed — with no
			// key, and with each key (a key does not stand in for a provider's signature).
			var ct string
			switch route.Path {
			case "/v1/webhooks/kinde":
				ct, body = "application/jwt", "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJ0eXBlIjoiY3VzdG9tZXIucGxhbl9jaGFuZ2VkIiwiZXZlbnRfaWQiOiJldmVudF9pc28ifQ."
			default:
				ct, body = "application/json", string(raw)
			}
			refused = []call{
				{"no signature", []string{"Content-Type", ct}, concrete},
				{"no signature, the operator key", []string{"Content-Type", ct, "Authorization", "Bearer " + apptest.AdminKey}, concrete},
				{"no signature, an account key", []string{"Content-Type", ct, "Authorization", "Bearer " + keyA}, concrete},
			}
		}
		wantKind, wantRef := "unauthorized", "#/components/responses/Unauthorized"
		if route.Auth == resources.WebhookSignature {
			wantKind, wantRef = "invalid-signature", "#/components/responses/InvalidSignature"
		}
		if got := responseRef(op, "401"); got != wantRef {
			t.Errorf("%s: openapi.yaml documents 401 as %q, want %q", key, got, wantRef)
		}
		checkSecurity(t, op, route)
		for _, c := range refused {
			t.Run(key+"/"+c.name, func(t *testing.T) {
				r := send(c)
				p := assertProblem(t, r, http.StatusUnauthorized, wantKind)
				if route.Auth != resources.WebhookSignature && r.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("a 401 without WWW-Authenticate (openapi.yaml requires it)")
				}
				if _, ok := p["detail"].(string); !ok {
					t.Errorf("no detail: %s", r.Body)
				}
				checkNoInternals(t, c.name, r, h.Env.Prefix)
			})
		}

		// Another account's key: on A's resource, exactly what an unknown id answers; elsewhere,
		// B's own scope, with nothing of A's.
		if route.Auth != resources.Account && route.Auth != resources.AccountOrOperator {
			continue
		}
		t.Run(key+"/another account's key", func(t *testing.T) {
			if !hasResource {
				r := send(call{"", auth("Bearer " + keyB), concrete})
				if r.Status >= 300 {
					t.Fatalf("account B on its own scope: %d %s", r.Status, r.Body)
				}
				for _, s := range secretsOfA {
					if bytes.Contains(r.Body, []byte(s)) {
						t.Errorf("account B's answer shows A's %q: %s", s, r.Body)
					}
				}
				checkNoInternals(t, "B's scope", r, h.Env.Prefix)
				return
			}
			theirs := send(call{"", auth("Bearer " + keyB), concrete})
			none := send(call{"", auth("Bearer " + keyB), strings.Replace(route.Path, "{id}", res.unknown, 1) + isolationQueries[key]})
			assertProblem(t, theirs, http.StatusNotFound, "not-found")
			if !bytes.Equal(theirs.Body, none.Body) || none.Status != theirs.Status || theirs.Header.Get("Content-Type") != none.Header.Get("Content-Type") {
				t.Errorf("A's resource to B: %d %s\nan unknown id to B: %d %s\nwant identical answers", theirs.Status, theirs.Body, none.Status, none.Body)
			}
			if got := responseRef(op, "404"); got != "#/components/responses/NotFound" {
				t.Errorf("openapi.yaml documents 404 as %q", got)
			}
			checkNoInternals(t, "A's resource to B", theirs, h.Env.Prefix)
		})
	}

	// The controls: A's own key reaches each of A's resources (the 404s above are B's, not a
	// missing resource), in an order where each call leaves the next one possible.
	for _, route := range resources.Routes {
		res, ok := resourceOf(route)
		if !ok || route.Auth == resources.Operator {
			continue
		}
		var b any
		if body := isolationBodies[route.Key()]; body != "" {
			b = body
		}
		r := h.Do(t, route.Method, strings.Replace(route.Path, "{id}", res.own, 1), keyA, b)
		if r.Status >= 300 {
			t.Errorf("%s with A's own key on A's resource: %d %s", route.Key(), r.Status, r.Body)
		}
	}
}

// checkSecurity checks openapi.yaml asks for the key the route table's Auth takes.
func checkSecurity(t *testing.T, op *openapi3.Operation, route resources.Route) {
	t.Helper()
	schemes := map[string]bool{}
	if op.Security != nil {
		for _, req := range *op.Security {
			for name := range req {
				schemes[name] = true
			}
		}
	}
	if route.Auth.TakesSession() {
		// A console session stands in for the operator key where the route takes one.
		delete(schemes, "consoleSession")
	}
	want := map[resources.Auth][]string{
		resources.OperatorSignIn:    {"operatorKey"},
		resources.Public:            nil,
		resources.Operator:          {"operatorKey"},
		resources.Account:           {"accountKey"},
		resources.AccountOrOperator: {"accountKey", "operatorKey"},
		resources.WebhookSignature:  nil,
	}[route.Auth]
	if len(schemes) != len(want) {
		t.Errorf("%s: openapi.yaml's security is %v, the route table's Auth %s", route.Key(), schemes, route.Auth)
	}
	for _, s := range want {
		if !schemes[s] {
			t.Errorf("%s: openapi.yaml's security lacks %s (Auth %s)", route.Key(), s, route.Auth)
		}
	}
}

func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	return doc
}

func operationOf(doc *openapi3.T, route resources.Route) *openapi3.Operation {
	item := doc.Paths.Value(route.Path)
	if item == nil {
		return nil
	}
	return item.GetOperation(route.Method)
}

// responseRef is the component an operation's answer of status refers to ("" if none).
func responseRef(op *openapi3.Operation, status string) string {
	r := op.Responses.Value(status)
	if r == nil {
		return ""
	}
	return r.Ref
}

// The operator key is compared in constant time, and only there: read from the source, so the
// test fails the moment anyone writes key == OperatorKey (or bytes.Equal, strings.EqualFold…)
// anywhere in Ferry, or drops crypto/subtle from the one comparison. (API keys are never
// compared: their SHA-256 is the key of a DynamoDB read.)
func TestAuth_TheOperatorKeyIsComparedInConstantTimeOnly(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	fset := token.NewFileSet()
	var compared []string
	constantTime := false
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), "_") || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Name.Name != "isOperatorKey" {
					break
				}
				constantTime = callsConstantTime(n.Body)
				// Inside it, == and != only test for no key ("") or read ConstantTimeCompare's
				// answer: comparing the keys, or their digests, with == is the mutation.
				ast.Inspect(n.Body, func(m ast.Node) bool {
					if b, ok := m.(*ast.BinaryExpr); ok && (b.Op == token.EQL || b.Op == token.NEQ) &&
						!emptyString(b.X) && !emptyString(b.Y) && !isConstantTimeCall(b.X) && !isConstantTimeCall(b.Y) {
						compared = append(compared, fset.Position(b.Pos()).String())
					}
					return true
				})
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (namesOperatorKey(n.X) && !emptyString(n.Y) || namesOperatorKey(n.Y) && !emptyString(n.X)) {
					compared = append(compared, fset.Position(n.Pos()).String())
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					if pkg, ok := sel.X.(*ast.Ident); ok && (pkg.Name == "bytes" || pkg.Name == "strings" || pkg.Name == "reflect" || pkg.Name == "slices") {
						for _, arg := range n.Args {
							if namesOperatorKey(arg) {
								compared = append(compared, fset.Position(n.Pos()).String())
							}
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !constantTime {
		t.Error("isOperatorKey does not compare with crypto/subtle.ConstantTimeCompare")
	}
	for _, at := range compared {
		t.Errorf("%s: the operator key is compared with an operator that takes time by the matching prefix; use isOperatorKey", at)
	}
}

// namesOperatorKey reports whether e is the operator key (x.OperatorKey, or a value derived from
// it by a conversion such as []byte(x.OperatorKey)).
func namesOperatorKey(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			found = found || n.Sel.Name == "OperatorKey"
		case *ast.Ident:
			found = found || n.Name == "OperatorKey" || n.Name == "operatorKey"
		}
		return !found
	})
	return found
}

func emptyString(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	return ok && lit.Kind == token.STRING && (lit.Value == `""` || lit.Value == "``")
}

func callsConstantTime(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if e, ok := n.(ast.Expr); ok && isConstantTimeCall(e) {
			found = true
		}
		return !found
	})
	return found
}

// isConstantTimeCall reports whether e is a call of subtle.ConstantTimeCompare.
func isConstantTimeCall(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "subtle" && sel.Sel.Name == "ConstantTimeCompare"
}
