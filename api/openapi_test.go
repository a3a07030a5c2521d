package api_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/golang-jwt/jwt/v5"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/openapicheck"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/meter"
	"github.com/ferrymeter/ferry/internal/metering/rollup"
	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/corrections"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// localRoutes are served by the local stack (ferry dev) rather than by a Lambda function.
var localRoutes = map[string]bool{"GET /healthz": true, "GET /openapi.yaml": true}

func operation(doc *openapi3.T, method, path string) *openapi3.Operation {
	item := doc.Paths.Value(path)
	if item == nil {
		return nil
	}
	return item.GetOperation(method)
}

func TestOpenAPI_IsAValid31Document(t *testing.T) {
	doc := openapicheck.Load(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %s; want 3.1", doc.OpenAPI)
	}
}

// The prose states the contract's numbers; they must be the code's.
func TestOpenAPI_StatesTheIdempotencyLimitsOfTheCode(t *testing.T) {
	doc := openapicheck.Load(t)
	for _, want := range []string{
		fmt.Sprintf("1–%d printable ASCII", idempotency.MaxKeyLength),
		fmt.Sprintf("%d s lease", int(idempotency.Lease/time.Second)),
		fmt.Sprintf("kept %d hours", int(idempotency.DefaultRetention/time.Hour)),
		fmt.Sprintf("%d days for the event routes", int(idempotency.EventRetention/(24*time.Hour))),
	} {
		if !strings.Contains(doc.Info.Description, want) {
			t.Errorf("the description does not say %q", want)
		}
	}
	key := doc.Components.Parameters["IdempotencyKey"].Value.Schema.Value
	if key.MaxLength == nil || *key.MaxLength != idempotency.MaxKeyLength {
		t.Errorf("Idempotency-Key maxLength %v, want %d", key.MaxLength, idempotency.MaxKeyLength)
	}
}

// The bounds the handlers enforce are the document's: a schema-valid amount is never refused
// for its size, and a larger one is refused by the schema as by the handler.
func TestOpenAPI_StatesTheAmountBoundOfTheCode(t *testing.T) {
	doc := openapicheck.Load(t)
	schemas := doc.Components.Schemas
	for _, field := range []struct{ schema, property string }{
		{"CreateHoldRequest", "amount"}, {"ChargeRequest", "amount"}, {"SettleRequest", "used"},
	} {
		max := schemas[field.schema].Value.Properties[field.property].Value.Max
		if max == nil || *max != float64(holds.MaxAmount) {
			t.Errorf("%s.%s maximum %v, want %d", field.schema, field.property, max, int64(holds.MaxAmount))
		}
	}
	units := schemas["CorrectionRequest"].Value.Properties["units"].Value
	if units.Min == nil || units.Max == nil || *units.Min != -corrections.MaxUnits || *units.Max != corrections.MaxUnits {
		t.Errorf("CorrectionRequest.units from %v to %v, want ±%d", units.Min, units.Max, int64(corrections.MaxUnits))
	}
	if reason := schemas["CorrectionRequest"].Value.Properties["reason"].Value; reason.MaxLength == nil || *reason.MaxLength != corrections.MaxReasonLength {
		t.Errorf("CorrectionRequest.reason maxLength %v, want %d", reason.MaxLength, corrections.MaxReasonLength)
	}
}

// Every quantity a request takes is bounded in the document as the decoder bounds it: at most
// 2^53−1 in magnitude (jsonbody.MaxInteger), or the field's own smaller bound. A schema-valid
// number is never refused for its size, and a larger one is refused by both. (The webhook routes
// take the providers' documents, which are not Ferry's quantities.)
func TestOpenAPI_EveryQuantityARequestTakesIsBoundedAsTheDecoderBoundsIt(t *testing.T) {
	doc := openapicheck.Load(t)
	limit := doc.Components.Schemas["Limit"].Value
	if limit.Max == nil || *limit.Max != float64(plans.MaxLimit) || plans.MaxLimit != jsonbody.MaxInteger {
		t.Errorf("Limit maximum %v, want %d", limit.Max, int64(plans.MaxLimit))
	}
	checked := 0
	for _, r := range resources.Routes {
		op := operation(doc, r.Method, r.Path)
		if op == nil || op.RequestBody == nil || r.Auth == resources.WebhookSignature {
			continue
		}
		for mt, content := range op.RequestBody.Value.Content {
			walkIntegers(content.Schema, r.Key()+" "+mt, map[*openapi3.Schema]bool{}, func(where string, s *openapi3.Schema) {
				checked++
				if s.Max == nil || *s.Max > jsonbody.MaxInteger || s.Min == nil || *s.Min < -jsonbody.MaxInteger {
					t.Errorf("%s: an integer from %v to %v; want both bounds within ±%d", where, s.Min, s.Max, int64(jsonbody.MaxInteger))
				}
			})
		}
	}
	if checked < 8 {
		t.Errorf("only %d integer fields found in request bodies", checked)
	}
}

// walkIntegers calls f for every integer schema under ref.
func walkIntegers(ref *openapi3.SchemaRef, where string, seen map[*openapi3.Schema]bool, f func(string, *openapi3.Schema)) {
	if ref == nil || ref.Value == nil || seen[ref.Value] {
		return
	}
	s := ref.Value
	seen[s] = true
	if s.Type != nil && s.Type.Includes(openapi3.TypeInteger) {
		f(where, s)
	}
	for name, p := range s.Properties {
		walkIntegers(p, where+"."+name, seen, f)
	}
	if s.AdditionalProperties.Schema != nil {
		walkIntegers(s.AdditionalProperties.Schema, where+".*", seen, f)
	}
	walkIntegers(s.Items, where+"[]", seen, f)
	for _, group := range [][]*openapi3.SchemaRef{s.AllOf, s.AnyOf, s.OneOf} {
		for _, sub := range group {
			walkIntegers(sub, where, seen, f)
		}
	}
}

// The rules on input that no schema keyword states, and the content coding rule, are stated
// where a client reads them; every route that may take a body documents the 415, and the 415
// says which codings are taken.
func TestOpenAPI_StatesEmptyStringsTheIntegerBoundAndContentCodings(t *testing.T) {
	doc := openapicheck.Load(t)
	for _, want := range []string{
		`an empty string is never "not given"`, "9007199254740991 (2^53−1)", "`Accept-Encoding: identity`",
		"more than 5 minutes in the future", "a Kinde token without `event_id` or `type`",
	} {
		if !strings.Contains(doc.Info.Description, want) {
			t.Errorf("the description does not say %q", want)
		}
	}
	resp := doc.Components.Responses["UnsupportedMediaType"].Value
	if h := resp.Headers["Accept-Encoding"]; h == nil || h.Value.Schema.Value.Const != "identity" {
		t.Error("the 415 answer does not document Accept-Encoding: identity")
	}
	for _, r := range resources.Routes {
		if r.Method == http.MethodGet {
			continue
		}
		if op := operation(doc, r.Method, r.Path); op == nil || op.Responses.Status(http.StatusUnsupportedMediaType) == nil {
			t.Errorf("%s does not document 415", r.Key())
		}
	}
}

// A correction's reason is refused by the document exactly when the handler refuses it: blank
// (Go's white space, the Unicode set) or holding a control character other than the line feed.
func TestOpenAPI_StatesTheCorrectionReasonRuleOfTheCode(t *testing.T) {
	doc := openapicheck.Load(t)
	reason := doc.Components.Schemas["CorrectionRequest"].Value.Properties["reason"].Value
	pattern := regexp.MustCompile(reason.Pattern)
	candidates := []string{"ok", "a\nb", "\ufeff", "x y", "é"}
	for r := rune(0); r <= 0x3000; r++ {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			candidates = append(candidates, string(r), "x"+string(r), string(r)+"x")
		}
	}
	for _, text := range candidates {
		in := corrections.Input{Account: "acct_1", Feature: "events", Units: 1, Reason: text, IdempotencyKey: "k"}
		handler := in.Validate(plans.Default()) == nil
		if document := pattern.MatchString(text); document != handler {
			t.Errorf("reason %q: the document accepts it %v, the handler %v", text, document, handler)
		}
	}
}

// A CloudEvent's id, type and subject are refused by the document exactly when the parser
// refuses them for their characters: a control character anywhere, white space at either end
// (Go's white space, the Unicode set), which the CloudEvents SDK would trim.
func TestOpenAPI_StatesTheEventAttributeRuleOfTheCode(t *testing.T) {
	doc := openapicheck.Load(t)
	props := doc.Components.Schemas["CloudEvent"].Value.Properties
	candidates := []string{"ok", "a b", "\ufeffx", "x\ufeff", "é", "evt_1"}
	for r := rune(0); r <= 0x3000; r++ {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			candidates = append(candidates, "x"+string(r), string(r)+"x", "x"+string(r)+"x")
		}
	}
	for _, attr := range []string{"id", "type", "subject"} {
		pattern := regexp.MustCompile(props[attr].Value.Pattern)
		for _, text := range candidates {
			ev := map[string]string{"specversion": "1.0", "id": "e", "source": "/s", "type": "t"}
			ev[attr] = text
			body, _ := json.Marshal(ev)
			_, err := event.Parse(body)
			if document, parser := pattern.MatchString(text), err == nil; document != parser {
				t.Errorf("%s %q: the document accepts it %v, the parser %v (%v)", attr, text, document, parser, err)
			}
		}
	}
}

// The contract changes of strict input are stated where a client reads them: the decoder's
// rules, the account status rule with its own problem type, what a 502 and a 503 mean on the
// event routes, and binary content mode.
func TestOpenAPI_StatesStrictInputStatusAndQueueOutcomes(t *testing.T) {
	doc := openapicheck.Load(t)
	for _, want := range []string{
		"**Strict input.**", "twice", "case-sensitive", "`null` is never a value", "`7.5`, `7.0`, `1e3` or `\"7\"`",
		"lone surrogates", "`invalid-header`",
		"**Account status.** One rule: an inactive account records no new usage", "`account-inactive`",
		"A 503 (`unavailable`) means nothing happened", "A 502 (`outcome-unknown`)", "same event `id`",
	} {
		if !strings.Contains(doc.Info.Description, want) {
			t.Errorf("the description does not say %q", want)
		}
	}
	for _, path := range []string{"/v1/events", "/v1/events/batch"} {
		op := operation(doc, http.MethodPost, path)
		if r := op.Responses.Status(http.StatusBadGateway); r == nil || !strings.Contains(*r.Value.Description, "outcome-unknown") {
			t.Errorf("POST %s does not document 502 outcome-unknown", path)
		}
		if r := op.Responses.Status(http.StatusPaymentRequired); r == nil || !strings.Contains(*r.Value.Description, "account-inactive") {
			t.Errorf("POST %s does not document 402 account-inactive", path)
		}
	}
	for _, path := range []string{"/v1/holds", "/v1/holds/{id}/charges", "/v1/holds/{id}/settle"} {
		if r := operation(doc, http.MethodPost, path).Responses.Status(http.StatusPaymentRequired); r == nil || !strings.Contains(*r.Value.Description, "account-inactive") {
			t.Errorf("POST %s does not document 402 account-inactive", path)
		}
	}
	events := operation(doc, http.MethodPost, "/v1/events")
	headers := map[string]bool{}
	for _, p := range events.Parameters {
		if p.Value.In == "header" {
			headers[p.Value.Name] = true
		}
	}
	for _, h := range []string{"ce-specversion", "ce-id", "ce-source", "ce-type"} {
		if !headers[h] {
			t.Errorf("POST /v1/events does not document binary mode's %s", h)
		}
	}
	if events.RequestBody.Value.Content.Get("*/*") == nil || !strings.Contains(events.Description, "**binary**") {
		t.Error("POST /v1/events does not document binary mode's body")
	}
	if operation(doc, http.MethodPost, "/v1/events/batch").RequestBody.Value.Content.Get("application/cloudevents-batch+json") == nil {
		t.Error("POST /v1/events/batch does not document application/cloudevents-batch+json")
	}
}

// The document covers every declared route and nothing else, and gives each mutating route the
// idempotency contract: the header, the replay header on its answers, the 409 and the 422.
func TestOpenAPI_DocumentsEveryRouteAndTheIdempotencyContract(t *testing.T) {
	doc := openapicheck.Load(t)
	declared := map[string]bool{}
	for _, r := range resources.Routes {
		key := r.Method + " " + r.Path
		declared[key] = true
		op := operation(doc, r.Method, r.Path)
		if op == nil {
			t.Errorf("%s is not documented", key)
			continue
		}
		if op.Security == nil || len(*op.Security) == 0 {
			t.Errorf("%s documents no security requirement", key)
		}
		hasKey := false
		for _, p := range op.Parameters {
			if p.Value != nil && p.Value.In == "header" && p.Value.Name == "Idempotency-Key" {
				hasKey = true
			}
		}
		if hasKey != r.Mutating() {
			t.Errorf("%s: Idempotency-Key documented %v, mutating %v", key, hasKey, r.Mutating())
		}
		if !r.Mutating() {
			continue
		}
		for _, status := range []int{http.StatusConflict, http.StatusUnprocessableEntity, http.StatusServiceUnavailable} {
			if op.Responses.Status(status) == nil {
				t.Errorf("%s does not document %d", key, status)
			}
		}
		for code, resp := range op.Responses.Map() {
			if strings.HasPrefix(code, "2") && resp.Value.Headers["Idempotent-Replayed"] == nil {
				t.Errorf("%s %s does not document Idempotent-Replayed", key, code)
			}
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			key := method + " " + path
			switch {
			case declared[key], localRoutes[key]:
			default:
				t.Errorf("%s is documented but not in the route table", key)
			}
			for code, resp := range op.Responses.Map() {
				if strings.HasPrefix(code, "4") || strings.HasPrefix(code, "5") && !localRoutes[key] {
					if resp.Value.Content.Get(httpProblem) == nil {
						t.Errorf("%s %s is not a problem document", key, code)
					}
				}
			}
		}
	}
}

const httpProblem = "application/problem+json"

// The validator is only as good as its refusals: a body the document forbids must fail.
func TestOpenAPI_ValidatorRefusesWhatTheDocumentForbids(t *testing.T) {
	v := openapicheck.New(t, "http://127.0.0.1:8080")
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:8080/v1/accounts/acct_1", nil)
	req.Header.Set("Authorization", "Bearer k")
	route, params, err := v.Router.FindRoute(req)
	if err != nil {
		t.Fatal(err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapicheck.BearerPresent}}
	account := `{"id":"acct_1","plan":"free","status":"active","limits":{"events":3,"tokens":null},"alerts":{"events":[{"percent":80},{"value":3}]},"agreementStart":null,"createdAt":"2026-11-15T12:00:00.000Z","kindeCustomerId":null,"stripeCustomerId":"cus_1","kindeAgreementId":null,"planChangedAt":null`
	for name, c := range map[string]struct {
		status int
		body   string
		ok     bool
	}{
		"an account":                     {200, account + `}`, true},
		"an account with its key":        {200, account + `,"apiKey":"fk_0123456789012345678901234567890123456789abc"}`, false},
		"an account with a stray member": {200, account + `,"colour":"red"}`, false},
		"a problem":                      {404, `{"type":"tag:ferrymeter.dev,2026:problem:not-found","title":"Not found","status":404}`, true},
		"a problem without a title":      {404, `{"type":"tag:ferrymeter.dev,2026:problem:not-found","status":404}`, false},
		"an undocumented status":         {418, `{}`, false},
	} {
		ct := "application/json"
		if c.status >= 400 {
			ct = httpProblem
		}
		err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: c.status, Header: http.Header{"Content-Type": {ct}},
			Body: io.NopCloser(strings.NewReader(c.body)), Options: &openapi3filter.Options{IncludeResponseStatus: true},
		})
		if (err == nil) != c.ok {
			t.Errorf("%s: validation error %v; want ok=%v", name, err, c.ok)
		}
	}
}

// switchQueue fails sends while down is set, as SQS does when it is unavailable and refuses
// them (nothing is queued), and fails them after they landed while unsure is set, as a send
// does whose answer is lost.
type switchQueue struct {
	ingest.Queue
	down   atomic.Bool
	unsure atomic.Bool
}

func (q *switchQueue) Send(ctx context.Context, env event.Envelope) error {
	if q.down.Load() {
		return fmt.Errorf("%w: refused", ingest.ErrQueueUnavailable)
	}
	if err := q.Queue.Send(ctx, env); err != nil || !q.unsure.Load() {
		return err
	}
	return errors.New("the answer was lost after the message landed")
}

// crashAfterFirstWrite lets the first write (the idempotency claim) commit and then kills the
// process: later writes fail before they reach DynamoDB.
func crashAfterFirstWrite(op string, _, write int) instrument.Fault {
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem":
		if write == 1 {
			return instrument.CrashAfter
		}
		return instrument.CrashBefore
	}
	return instrument.NoFault
}

// exchange is one row of the conformance table.
type exchange struct {
	name string
	// route is the declared route the request exercises ("POST /v1/accounts").
	route string
	// path is the request path; "{hold}" is replaced by the id of the hold created earlier.
	path string
	// as is who sends it: "operator", an account id created earlier, "none" or "wrong".
	as          string
	header      http.Header
	body        string
	contentType string
	idemKey     string
	status      int
	// replayed: the answer must carry Idempotent-Replayed: true.
	replayed bool
	// invalidRequest: the request breaks the contract on purpose and must fail validation.
	invalidRequest bool
	// unmodelled: OpenAPI cannot model the request — binary mode's JSON data is an
	// application/json body that is not a CloudEvent, which only the ce-* headers explain — so
	// only its answer is validated.
	unmodelled bool
	// before runs first (a crash to inject, the worker to drain); after runs once answered.
	before func(t *testing.T, c *conformanceRun)
	after  func(t *testing.T, c *conformanceRun, r apptest.Response)
	// makeBody, when set, builds the body at run time (a signed webhook); headers adds
	// headers computed from the body (a signature).
	makeBody func(t *testing.T, c *conformanceRun) string
	headers  func(c *conformanceRun, body string) map[string]string
}

// judge is how the validator judges the row's request.
func (x exchange) judge() openapicheck.Request {
	switch {
	case x.unmodelled:
		return openapicheck.Unmodelled
	case x.invalidRequest:
		return openapicheck.Breaking
	}
	return openapicheck.Conforming
}

// conformanceRun is the state a table run carries from row to row.
type conformanceRun struct {
	h      *apptest.Harness
	faults *instrument.Faults
	queue  *switchQueue
	keys   map[string]string // account id → API key
	vars   map[string]string
}

func cloudEvent(id string) string {
	return fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/tests","type":"api.call","time":"2026-11-15T12:00:00Z","data":{"n":1}}`, id)
}

func batch(items ...string) string { return "[" + strings.Join(items, ",") + "]" }

// binaryHeaders are the ce-* headers of an event in HTTP binary mode.
func binaryHeaders(id string) http.Header {
	return http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {id}, "Ce-Source": {"/tests"}, "Ce-Type": {"api.call"}}
}

// wantKind checks the problem kind of an answer.
func wantKind(kind string) func(t *testing.T, c *conformanceRun, r apptest.Response) {
	return func(t *testing.T, c *conformanceRun, r apptest.Response) {
		var p struct{ Type string }
		if err := json.Unmarshal(r.Body, &p); err != nil || p.Type != "tag:ferrymeter.dev,2026:problem:"+kind {
			t.Errorf("problem %s, want kind %s", r.Body, kind)
		}
	}
}

// wantCodingRefused checks the answer to a coded body: 415, saying which codings are taken.
func wantCodingRefused(t *testing.T, c *conformanceRun, r apptest.Response) {
	wantKind("unsupported-media-type")(t, c, r)
	if got := r.Header.Get("Accept-Encoding"); got != "identity" {
		t.Errorf("Accept-Encoding %q, want identity", got)
	}
}

func captureKey(id string) func(t *testing.T, c *conformanceRun, r apptest.Response) {
	return func(t *testing.T, c *conformanceRun, r apptest.Response) {
		var body struct{ APIKey string }
		if err := json.Unmarshal(r.Body, &body); err != nil || body.APIKey == "" {
			t.Fatalf("no apiKey in %s", r.Body)
		}
		c.keys[id] = body.APIKey
	}
}

// conformanceTable exercises every route of the contract, its answers and its errors.
func conformanceTable() []exchange {
	const invalidEvent = `{"specversion":"1.0"}`
	oversizedAccount := `{"id":"acct_big","plan":"` + strings.Repeat("x", 70<<10) + `"}`
	oversizedEvent := `{"specversion":"1.0","id":"evt_big","source":"/tests","type":"api.call","data":"` + strings.Repeat("x", event.MaxEventBytes) + `"}`
	var hundredAndOne []string
	for i := range event.MaxBatchItems + 1 {
		hundredAndOne = append(hundredAndOne, cloudEvent(fmt.Sprintf("evt_many_%d", i)))
	}
	return []exchange{
		// Accounts.
		{name: "create", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator", idemKey: "create-1",
			body: `{"id":"acct_1","plan":"free"}`, status: 201, after: captureKey("acct_1")},
		{name: "create, repeated", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator", idemKey: "create-1",
			body: `{"id":"acct_1","plan":"free"}`, status: 201, replayed: true},
		{name: "create, the key on another request", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator", idemKey: "create-1",
			body: `{"id":"acct_1","plan":"plus"}`, status: 422},
		{name: "create, the id exists", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":"acct_1"}`, status: 409},
		{name: "create, capped at zero events", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":"acct_capped","plan":"free","status":"active","limits":{"events":0}}`, status: 201, after: captureKey("acct_capped")},
		{name: "create, one event a month", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":"acct_one","limits":{"events":1,"tokens":null}}`, status: 201, after: captureKey("acct_one")},
		{name: "create, invalid id", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":"bad id!","plan":"nope"}`, status: 400, invalidRequest: true},
		{name: "create, unknown member", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":"acct_9","colour":"red"}`, status: 400, invalidRequest: true},
		{name: "create, not JSON", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":`, status: 400, invalidRequest: true},
		{name: "create, over the body limit", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: oversizedAccount, status: 413},
		{name: "create, no key", route: "POST /v1/accounts", path: "/v1/accounts", as: "none",
			body: `{"id":"acct_9"}`, status: 401, invalidRequest: true},
		{name: "create, an account's key", route: "POST /v1/accounts", path: "/v1/accounts", as: "acct_1",
			body: `{"id":"acct_9"}`, status: 401},
		{name: "create, an invalid Idempotency-Key", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			idemKey: strings.Repeat("k", 256), body: `{"id":"acct_9"}`, status: 400, invalidRequest: true},
		{name: "create, as text", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			contentType: "text/plain", body: `{"id":"acct_9"}`, status: 415, invalidRequest: true, after: wantKind("unsupported-media-type")},
		{name: "create, gzip", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			header: http.Header{"Content-Encoding": {"gzip"}}, body: `{"id":"acct_9"}`, status: 415, after: wantCodingRefused},
		{name: "create, an empty status", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":"acct_9","status":""}`, status: 400, invalidRequest: true},
		{name: "create, a limit of 2^53", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":"acct_9","limits":{"tokens":9007199254740992}}`, status: 400, invalidRequest: true},
		{name: "create, the largest limit", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":"acct_max","limits":{"tokens":9007199254740991}}`, status: 201},
		{name: "read", route: "GET /v1/accounts/{id}", path: "/v1/accounts/acct_1", as: "operator", status: 200},
		{name: "read, unknown", route: "GET /v1/accounts/{id}", path: "/v1/accounts/nobody", as: "operator", status: 404},
		{name: "update", route: "PATCH /v1/accounts/{id}", path: "/v1/accounts/acct_1", as: "operator", idemKey: "patch-1",
			body: `{"limits":{"tokens":500}}`, status: 200},
		{name: "update, repeated", route: "PATCH /v1/accounts/{id}", path: "/v1/accounts/acct_1", as: "operator", idemKey: "patch-1",
			body: `{"limits":{"tokens":500}}`, status: 200, replayed: true},
		{name: "update, unknown", route: "PATCH /v1/accounts/{id}", path: "/v1/accounts/nobody", as: "operator",
			body: `{"status":"inactive"}`, status: 404},
		{name: "update, nothing to change", route: "PATCH /v1/accounts/{id}", path: "/v1/accounts/acct_1", as: "operator",
			body: `{}`, status: 400, invalidRequest: true},
		{name: "update, as text", route: "PATCH /v1/accounts/{id}", path: "/v1/accounts/acct_1", as: "operator",
			contentType: "text/plain", body: `{"status":"inactive"}`, status: 415, invalidRequest: true},
		{name: "update, an empty plan", route: "PATCH /v1/accounts/{id}", path: "/v1/accounts/acct_1", as: "operator",
			body: `{"plan":""}`, status: 400, invalidRequest: true},

		// Events.
		{name: "event", route: "POST /v1/events", path: "/v1/events", as: "acct_1", idemKey: "evt-1",
			body: cloudEvent("evt_1"), status: 202},
		{name: "event, repeated", route: "POST /v1/events", path: "/v1/events", as: "acct_1", idemKey: "evt-1",
			body: cloudEvent("evt_1"), status: 202, replayed: true},
		{name: "event, the key on another event", route: "POST /v1/events", path: "/v1/events", as: "acct_1", idemKey: "evt-1",
			body: cloudEvent("evt_3"), status: 422},
		{name: "event as application/cloudevents+json", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			contentType: "application/cloudevents+json", body: cloudEvent("evt_2"), status: 202},
		// Without ce-* headers a body must be JSON. (The document allows any type for binary
		// mode's data, and cannot say that the headers must come with it.)
		{name: "event as text", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			contentType: "text/plain", body: cloudEvent("evt_2"), status: 415},
		{name: "event in binary mode", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			header: binaryHeaders("evt_bin_1"), contentType: "application/json", body: `{"n": 1}`, status: 202, unmodelled: true},
		{name: "event in binary mode, text data", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			header: binaryHeaders("evt_bin_2"), contentType: "text/plain", body: "hello", status: 202},
		{name: "event in binary mode, a percent sign", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			header: binaryHeaders("evt_50%"), contentType: "application/octet-stream", body: `{}`, status: 400, invalidRequest: true},
		{name: "event in both modes", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			header: binaryHeaders("evt_both"), contentType: "application/cloudevents+json", body: cloudEvent("evt_both"), status: 400},
		{name: "event, a duplicate member", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			body: `{"specversion":"1.0","id":"evt_d1","id":"evt_d2","source":"/tests","type":"api.call"}`, status: 400},
		{name: "event, a lone surrogate in the id", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			body: `{"specversion":"1.0","id":"evt_\ud800","source":"/tests","type":"api.call"}`, status: 400},
		{name: "event, the queue write may have landed", route: "POST /v1/events", path: "/v1/events", as: "acct_1", idemKey: "evt-6",
			body: cloudEvent("evt_6"), status: 502,
			before: func(t *testing.T, c *conformanceRun) { c.queue.unsure.Store(true) },
			after:  func(t *testing.T, c *conformanceRun, _ apptest.Response) { c.queue.unsure.Store(false) }},
		{name: "event, retried after an unknown outcome", route: "POST /v1/events", path: "/v1/events", as: "acct_1", idemKey: "evt-6",
			body: cloudEvent("evt_6"), status: 202},
		{name: "event, invalid", route: "POST /v1/events", path: "/v1/events", as: "acct_1", idemKey: "evt-invalid",
			body: invalidEvent, status: 400, invalidRequest: true},
		{name: "event, invalid, repeated", route: "POST /v1/events", path: "/v1/events", as: "acct_1", idemKey: "evt-invalid",
			body: invalidEvent, status: 400, replayed: true, invalidRequest: true},
		{name: "event, over the body limit", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			body: oversizedEvent, status: 413},
		{name: "event at the limit", route: "POST /v1/events", path: "/v1/events", as: "acct_capped",
			body: cloudEvent("evt_capped"), status: 402},
		{name: "event, the process dies after the claim", route: "POST /v1/events", path: "/v1/events", as: "acct_1", idemKey: "evt-4",
			body: cloudEvent("evt_4"), status: 503,
			before: func(t *testing.T, c *conformanceRun) { c.faults.SetPlan(crashAfterFirstWrite) },
			after:  func(t *testing.T, c *conformanceRun, _ apptest.Response) { c.faults.SetPlan(nil) }},
		{name: "event, repeated while the claim is in flight", route: "POST /v1/events", path: "/v1/events", as: "acct_1", idemKey: "evt-4",
			body: cloudEvent("evt_4"), status: 409},
		{name: "event, the queue is down", route: "POST /v1/events", path: "/v1/events", as: "acct_1", idemKey: "evt-5",
			body: cloudEvent("evt_5"), status: 503,
			before: func(t *testing.T, c *conformanceRun) { c.queue.down.Store(true) },
			after:  func(t *testing.T, c *conformanceRun, _ apptest.Response) { c.queue.down.Store(false) }},
		{name: "event, for the account of one event", route: "POST /v1/events", path: "/v1/events", as: "acct_one",
			body: cloudEvent("evt_a"), status: 202},
		{name: "event, over the account's one event", route: "POST /v1/events", path: "/v1/events", as: "acct_one",
			body: cloudEvent("evt_b"), status: 202},

		// Batches.
		{name: "batch with a duplicate", route: "POST /v1/events/batch", path: "/v1/events/batch", as: "acct_1", idemKey: "batch-1",
			body: batch(cloudEvent("evt_10"), cloudEvent("evt_10"), cloudEvent("evt_11")), status: 202},
		{name: "batch, repeated", route: "POST /v1/events/batch", path: "/v1/events/batch", as: "acct_1", idemKey: "batch-1",
			body: batch(cloudEvent("evt_10"), cloudEvent("evt_10"), cloudEvent("evt_11")), status: 202, replayed: true},
		{name: "batch as application/cloudevents-batch+json", route: "POST /v1/events/batch", path: "/v1/events/batch", as: "acct_1",
			contentType: "application/cloudevents-batch+json", body: batch(cloudEvent("evt_12")), status: 202},
		{name: "batch with an invalid item", route: "POST /v1/events/batch", path: "/v1/events/batch", as: "acct_1",
			body: batch(cloudEvent("evt_13"), invalidEvent), status: 202, invalidRequest: true},
		{name: "batch, no valid item", route: "POST /v1/events/batch", path: "/v1/events/batch", as: "acct_1",
			body: batch(invalidEvent), status: 400, invalidRequest: true},
		{name: "batch, not an array", route: "POST /v1/events/batch", path: "/v1/events/batch", as: "acct_1",
			body: cloudEvent("evt_14"), status: 400, invalidRequest: true},
		{name: "batch, too many items", route: "POST /v1/events/batch", path: "/v1/events/batch", as: "acct_1",
			body: batch(hundredAndOne...), status: 400, invalidRequest: true},
		{name: "batch at the limit", route: "POST /v1/events/batch", path: "/v1/events/batch", as: "acct_capped",
			body: batch(cloudEvent("evt_capped")), status: 402},

		// Event status, once the worker has run.
		{name: "event status, inserted", route: "GET /v1/events/{id}", path: "/v1/events/evt_1", as: "acct_1", status: 200,
			before: func(t *testing.T, c *conformanceRun) { c.h.Drain(t, 0) }},
		// acct_one may take one event and sent two: the worker inserts one and rejects the
		// other (the queue does not keep order, so either may be the one), and both answers
		// must conform.
		{name: "event status, one of two", route: "GET /v1/events/{id}", path: "/v1/events/evt_a", as: "acct_one", status: 200,
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) { c.vars["evt_a"] = string(r.Body) }},
		{name: "event status, the other of two", route: "GET /v1/events/{id}", path: "/v1/events/evt_b", as: "acct_one", status: 200,
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				both := c.vars["evt_a"] + string(r.Body)
				if strings.Count(both, `"INSERTED"`) != 1 || strings.Count(both, `"REJECTED"`) != 1 || !strings.Contains(both, `"reason"`) {
					t.Errorf("want one INSERTED and one REJECTED with a reason: %s", both)
				}
			}},
		{name: "event status, another account's", route: "GET /v1/events/{id}", path: "/v1/events/evt_1", as: "acct_one", status: 404},
		// A token-metered event: its status shows what it moved on each meter.
		{name: "event with tokens", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			body: `{"specversion":"1.0","id":"evt_llm","source":"/tests","type":"llm.call","data":{"tokens":150,"model":"gpt-4"}}`, status: 202},
		{name: "event status, its meters' values", route: "GET /v1/events/{id}", path: "/v1/events/evt_llm", as: "acct_1", status: 200,
			before: func(t *testing.T, c *conformanceRun) { c.h.Drain(t, 0) },
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				want := `"meters":[{"meter":"events","feature":"events","aggregation":"COUNT","value":1},` +
					`{"meter":"tokens","feature":"tokens","aggregation":"SUM","value":150,"dimensions":{"model":"gpt-4"}}]`
				if !strings.Contains(string(r.Body), want) {
					t.Errorf("status %s; want %s", r.Body, want)
				}
			}},
		{name: "event with a bad token count", route: "POST /v1/events", path: "/v1/events", as: "acct_1",
			body: `{"specversion":"1.0","id":"evt_llm_bad","source":"/tests","type":"llm.call","data":{"tokens":-3}}`, status: 202},
		{name: "event status, rejected for its value", route: "GET /v1/events/{id}", path: "/v1/events/evt_llm_bad", as: "acct_1", status: 200,
			before: func(t *testing.T, c *conformanceRun) { c.h.Drain(t, 0) },
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				if !strings.Contains(string(r.Body), `"status":"REJECTED"`) || !strings.Contains(string(r.Body), `"reason":"bad meter value: meter tokens: /tokens is -3, below 0"`) {
					t.Errorf("status %s; want REJECTED for the value", r.Body)
				}
			}},
		{name: "update, agreement start after the first usage", route: "PATCH /v1/accounts/{id}", path: "/v1/accounts/acct_1", as: "operator",
			body: `{"agreementStart":5}`, status: 409},

		// Usage.
		{name: "usage", route: "GET /v1/usage", path: "/v1/usage", as: "acct_1", status: 200},
		{name: "usage of tokens in a cycle", route: "GET /v1/usage", path: "/v1/usage?feature=tokens&cycle=2026-11", as: "acct_1", status: 200,
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				if !strings.Contains(string(r.Body), `"meter":"tokens","aggregation":"SUM"`) || !strings.Contains(string(r.Body), `"used":150`) {
					t.Errorf("usage %s; want the tokens meter's SUM, 150", r.Body)
				}
			}},
		{name: "usage, unlimited", route: "GET /v1/usage", path: "/v1/usage?feature=tokens", as: "acct_one", status: 200},
		{name: "usage, unknown feature", route: "GET /v1/usage", path: "/v1/usage?feature=nope", as: "acct_1", status: 400},
		{name: "usage, malformed cycle", route: "GET /v1/usage", path: "/v1/usage?cycle=2026-13", as: "acct_1", status: 400, invalidRequest: true},
		{name: "usage, unknown key", route: "GET /v1/usage", path: "/v1/usage", as: "wrong", status: 401},

		// The usage query, over rollups written through the rollup package's own write path, on days
		// before any event the run sends (whose claims write rollups of their own).
		{name: "usage query by day", route: "GET /v1/usage/query", as: "acct_1", status: 200,
			path:   "/v1/usage/query?meter=events&window=DAY&from=2026-11-02T00:00:00Z&to=2026-11-04T00:00:00Z",
			before: seedRollups("acct_1", "2026-11-02T23:59:00Z", "2026-11-03T10:00:00Z", "2026-11-03T10:00:30Z"),
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				if !strings.Contains(string(r.Body), `"rows":[{"windowStart":"2026-11-02T00:00:00Z","windowEnd":"2026-11-03T00:00:00Z","group":{},"value":1},`+
					`{"windowStart":"2026-11-03T00:00:00Z","windowEnd":"2026-11-04T00:00:00Z","group":{},"value":2}]`) {
					t.Errorf("the days' rows: %s", r.Body)
				}
			}},
		{name: "usage query by day in Kolkata, the operator's", route: "GET /v1/usage/query", as: "operator", status: 200,
			path: "/v1/usage/query?meter=events&window=DAY&tz=Asia%2FKolkata&from=2026-11-14T18:30:00Z&to=2026-11-15T18:30:00Z&account=acct_1"},
		{name: "usage query by minute", route: "GET /v1/usage/query", as: "acct_1", status: 200,
			path: "/v1/usage/query?meter=events&window=MINUTE&from=2026-11-15T10:00:00Z&to=2026-11-15T10:05:00Z"},
		{name: "usage query by cycle", route: "GET /v1/usage/query", as: "acct_1", status: 200,
			path: "/v1/usage/query?meter=events&window=CYCLE&from=2026-10-01T00:00:00Z&to=2026-12-01T00:00:00Z"},
		{name: "usage query, misaligned", route: "GET /v1/usage/query", as: "acct_1", status: 400,
			path: "/v1/usage/query?meter=events&window=HOUR&from=2026-11-15T10:30:00Z&to=2026-11-15T12:00:00Z"},
		{name: "usage query, a filter on no dimension", route: "GET /v1/usage/query", as: "acct_1", status: 400,
			path: "/v1/usage/query?meter=events&window=HOUR&from=2026-11-15T10:00:00Z&to=2026-11-15T12:00:00Z&filter%5Bmodel%5D=gpt-4&groupBy=model"},
		{name: "usage query, an unknown parameter", route: "GET /v1/usage/query", as: "acct_1", status: 400,
			path: "/v1/usage/query?meter=events&window=HOUR&from=2026-11-15T10:00:00Z&to=2026-11-15T12:00:00Z&limit=5"},
		{name: "usage query, no meter", route: "GET /v1/usage/query", as: "acct_1", status: 400, invalidRequest: true,
			path: "/v1/usage/query?window=HOUR&from=2026-11-15T10:00:00Z&to=2026-11-15T12:00:00Z"},
		{name: "usage query, the operator without an account", route: "GET /v1/usage/query", as: "operator", status: 400,
			path: "/v1/usage/query?meter=events&window=HOUR&from=2026-11-15T10:00:00Z&to=2026-11-15T12:00:00Z"},
		{name: "usage query, the operator on no account", route: "GET /v1/usage/query", as: "operator", status: 404,
			path: "/v1/usage/query?meter=events&window=HOUR&from=2026-11-15T10:00:00Z&to=2026-11-15T12:00:00Z&account=acct_nobody"},
		{name: "usage query, another account's", route: "GET /v1/usage/query", as: "acct_one", status: 404,
			path: "/v1/usage/query?meter=events&window=HOUR&from=2026-11-15T10:00:00Z&to=2026-11-15T12:00:00Z&account=acct_1"},
		{name: "usage query, unknown key", route: "GET /v1/usage/query", as: "wrong", status: 401,
			path: "/v1/usage/query?meter=events&window=HOUR&from=2026-11-15T10:00:00Z&to=2026-11-15T12:00:00Z"},

		// Holds (DESIGN §8).
		{name: "hold", route: "POST /v1/holds", path: "/v1/holds", as: "acct_1", idemKey: "hold-1",
			body: `{"key":"job-1","feature":"tokens","amount":100}`, status: 201,
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				var body struct{ ID string }
				if err := json.Unmarshal(r.Body, &body); err != nil || body.ID == "" {
					t.Fatalf("no hold id in %s", r.Body)
				}
				c.vars["hold"] = body.ID
			}},
		{name: "hold, repeated", route: "POST /v1/holds", path: "/v1/holds", as: "acct_1", idemKey: "hold-1",
			body: `{"key":"job-1","feature":"tokens","amount":100}`, status: 201, replayed: true},
		{name: "hold, the job key again", route: "POST /v1/holds", path: "/v1/holds", as: "acct_1",
			body: `{"key":"job-1","feature":"tokens","amount":100}`, status: 200},
		{name: "hold, over the limit", route: "POST /v1/holds", path: "/v1/holds", as: "acct_1",
			body: `{"key":"job-2","feature":"tokens","amount":100000}`, status: 402},
		{name: "hold, invalid", route: "POST /v1/holds", path: "/v1/holds", as: "acct_1",
			body: `{"key":"job-3","feature":"tokens"}`, status: 400, invalidRequest: true},
		{name: "hold, read", route: "GET /v1/holds/{id}", path: "/v1/holds/{hold}", as: "acct_1", status: 200},
		{name: "hold, another account's", route: "GET /v1/holds/{id}", path: "/v1/holds/{hold}", as: "acct_one", status: 404},
		{name: "charge", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold}/charges", as: "acct_1", idemKey: "charge-1",
			body: `{"key":"step-1","amount":40}`, status: 200},
		{name: "charge, repeated", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold}/charges", as: "acct_1", idemKey: "charge-1",
			body: `{"key":"step-1","amount":40}`, status: 200, replayed: true},
		{name: "charge, the step key again", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold}/charges", as: "acct_1",
			body: `{"key":"step-1","amount":40}`, status: 200},
		{name: "charge, capped", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold}/charges", as: "acct_1",
			body: `{"key":"step-2","amount":1000}`, status: 200},
		{name: "settle", route: "POST /v1/holds/{id}/settle", path: "/v1/holds/{hold}/settle", as: "acct_1", idemKey: "settle-1",
			body: `{}`, status: 200},
		{name: "settle, repeated", route: "POST /v1/holds/{id}/settle", path: "/v1/holds/{hold}/settle", as: "acct_1", idemKey: "settle-1",
			body: `{}`, status: 200, replayed: true},
		{name: "settle, again", route: "POST /v1/holds/{id}/settle", path: "/v1/holds/{hold}/settle", as: "acct_1",
			body: `{}`, status: 200},
		{name: "charge, after settlement", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold}/charges", as: "acct_1",
			body: `{"key":"step-3","amount":1}`, status: 409},
		{name: "hold, unknown", route: "GET /v1/holds/{id}", path: "/v1/holds/nohold", as: "acct_1", status: 404},

		// Reporting and reconciliation (DESIGN §9).
		{name: "correction", route: "POST /v1/usage/corrections", path: "/v1/usage/corrections", as: "operator", idemKey: "corr-1",
			body: `{"account":"acct_1","feature":"events","units":-1,"reason":"a bot's click"}`, status: 201},
		{name: "correction, repeated", route: "POST /v1/usage/corrections", path: "/v1/usage/corrections", as: "operator", idemKey: "corr-1",
			body: `{"account":"acct_1","feature":"events","units":-1,"reason":"a bot's click"}`, status: 201, replayed: true},
		{name: "correction, no Idempotency-Key", route: "POST /v1/usage/corrections", path: "/v1/usage/corrections", as: "operator",
			body: `{"account":"acct_1","feature":"events","units":2,"reason":"late import"}`, status: 400, invalidRequest: true},
		{name: "correction of zero", route: "POST /v1/usage/corrections", path: "/v1/usage/corrections", as: "operator", idemKey: "corr-0",
			body: `{"account":"acct_1","feature":"events","units":0,"reason":"nothing"}`, status: 400, invalidRequest: true},
		{name: "correction, unknown account", route: "POST /v1/usage/corrections", path: "/v1/usage/corrections", as: "operator", idemKey: "corr-2",
			body: `{"account":"nobody","feature":"events","units":1,"reason":"x"}`, status: 404},
		{name: "correction, an account's key", route: "POST /v1/usage/corrections", path: "/v1/usage/corrections", as: "acct_1", idemKey: "corr-3",
			body: `{"account":"acct_1","feature":"events","units":1,"reason":"x"}`, status: 401},
		{name: "usage after a correction", route: "GET /v1/usage", path: "/v1/usage", as: "acct_1", status: 200,
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				if !strings.Contains(string(r.Body), `"corrections":-1`) {
					t.Errorf("usage does not show the correction: %s", r.Body)
				}
			}},
		{name: "report now", route: "POST /v1/report", path: "/v1/report", as: "operator", idemKey: "report-1", body: `{}`, status: 200},
		{name: "report now, repeated", route: "POST /v1/report", path: "/v1/report", as: "operator", idemKey: "report-1", body: `{}`, status: 200, replayed: true},
		{name: "report now, no body", route: "POST /v1/report", path: "/v1/report", as: "operator", status: 200},
		{name: "report now, a stray member", route: "POST /v1/report", path: "/v1/report", as: "operator", body: `{"all":true}`, status: 400, invalidRequest: true},
		{name: "reconcile an account", route: "POST /v1/reconcile", path: "/v1/reconcile", as: "operator", idemKey: "rec-1",
			body: `{"account":"acct_1","cycle":"2026-11"}`, status: 200},
		{name: "reconcile, repeated", route: "POST /v1/reconcile", path: "/v1/reconcile", as: "operator", idemKey: "rec-1",
			body: `{"account":"acct_1","cycle":"2026-11"}`, status: 200, replayed: true},
		{name: "reconcile a page", route: "POST /v1/reconcile", path: "/v1/reconcile", as: "operator", body: `{}`, status: 200},
		{name: "reconcile, malformed cycle", route: "POST /v1/reconcile", path: "/v1/reconcile", as: "operator",
			body: `{"account":"acct_1","cycle":"2026-13"}`, status: 400, invalidRequest: true},
		{name: "reconcile, unknown account", route: "POST /v1/reconcile", path: "/v1/reconcile", as: "operator",
			body: `{"account":"nobody"}`, status: 404},
		{name: "evidence", route: "GET /v1/reconcile/evidence", path: "/v1/reconcile/evidence?account=acct_1&cycle=2026-11", as: "operator", status: 200},
		{name: "evidence, no account", route: "GET /v1/reconcile/evidence", path: "/v1/reconcile/evidence", as: "operator", status: 400, invalidRequest: true},
		{name: "evidence, unknown account", route: "GET /v1/reconcile/evidence", path: "/v1/reconcile/evidence?account=nobody", as: "operator", status: 404},
		{name: "evidence, cycle empty", route: "GET /v1/reconcile/evidence", path: "/v1/reconcile/evidence?account=acct_1&cycle=", as: "operator", status: 400, invalidRequest: true},
		{name: "evidence, account twice", route: "GET /v1/reconcile/evidence", path: "/v1/reconcile/evidence?account=acct_1&account=nobody", as: "operator", status: 400, unmodelled: true},
		{name: "evidence, unknown parameter", route: "GET /v1/reconcile/evidence", path: "/v1/reconcile/evidence?account=acct_1&colour=red", as: "operator", status: 400, unmodelled: true},
		{name: "review list, a parameter", route: "GET /v1/reconcile/review", path: "/v1/reconcile/review?cursor=x", as: "operator", status: 400, unmodelled: true},
		{name: "review list", route: "GET /v1/reconcile/review", path: "/v1/reconcile/review", as: "operator", status: 200},
		{name: "review list, an account's key", route: "GET /v1/reconcile/review", path: "/v1/reconcile/review", as: "acct_1", status: 401},

		{name: "charge, a field name in another case", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold}/charges", as: "acct_1",
			body: `{"key":"step-4","Amount":7}`, status: 400, invalidRequest: true},
		{name: "charge, amount null", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold}/charges", as: "acct_1",
			body: `{"key":"step-4","amount":null}`, status: 400, invalidRequest: true},
		{name: "charge, amount a fraction", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold}/charges", as: "acct_1",
			body: `{"key":"step-4","amount":7.5}`, status: 400, invalidRequest: true},

		// The account status rule: an inactive account records no new usage.
		{name: "create, one to deactivate", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":"acct_off","limits":{"tokens":1000}}`, status: 201, after: captureKey("acct_off")},
		{name: "hold, before the deactivation", route: "POST /v1/holds", path: "/v1/holds", as: "acct_off",
			body: `{"key":"job-off","feature":"tokens","amount":100}`, status: 201,
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				var body struct{ ID string }
				if err := json.Unmarshal(r.Body, &body); err != nil || body.ID == "" {
					t.Fatalf("no hold id in %s", r.Body)
				}
				c.vars["hold_off"] = body.ID
			}},
		{name: "charge, before the deactivation", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold_off}/charges", as: "acct_off",
			body: `{"key":"step-1","amount":30}`, status: 200},
		{name: "update, deactivate", route: "PATCH /v1/accounts/{id}", path: "/v1/accounts/acct_off", as: "operator",
			body: `{"status":"inactive"}`, status: 200},
		{name: "event, account inactive", route: "POST /v1/events", path: "/v1/events", as: "acct_off",
			body: cloudEvent("evt_off"), status: 402, after: wantKind("account-inactive")},
		{name: "batch, account inactive", route: "POST /v1/events/batch", path: "/v1/events/batch", as: "acct_off",
			body: batch(cloudEvent("evt_off")), status: 402, after: wantKind("account-inactive")},
		{name: "hold, account inactive", route: "POST /v1/holds", path: "/v1/holds", as: "acct_off",
			body: `{"key":"job-off-2","feature":"tokens","amount":100}`, status: 402, after: wantKind("account-inactive")},
		{name: "hold, its key again, account inactive", route: "POST /v1/holds", path: "/v1/holds", as: "acct_off",
			body: `{"key":"job-off","feature":"tokens","amount":100}`, status: 200},
		{name: "charge, account inactive", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold_off}/charges", as: "acct_off",
			body: `{"key":"step-2","amount":30}`, status: 402, after: wantKind("account-inactive")},
		{name: "charge, its step key again, account inactive", route: "POST /v1/holds/{id}/charges", path: "/v1/holds/{hold_off}/charges", as: "acct_off",
			body: `{"key":"step-1","amount":30}`, status: 200},
		{name: "settle, above the recorded usage, account inactive", route: "POST /v1/holds/{id}/settle", path: "/v1/holds/{hold_off}/settle", as: "acct_off",
			body: `{"used":90}`, status: 402, after: wantKind("account-inactive")},
		{name: "settle, at the recorded usage, account inactive", route: "POST /v1/holds/{id}/settle", path: "/v1/holds/{hold_off}/settle", as: "acct_off",
			body: `{}`, status: 200},
	}
}

// A Kinde and a Stripe customer linked to acct_hooks, whose webhooks the table sends.
const (
	hookCustomer       = "customer_hooks"
	hookStripeCustomer = "cus_hooks"
)

// kindeToken signs a Kinde billing event for the table's customer, sent now by the harness
// clock; sentAgo moves its timestamp back.
func kindeToken(t *testing.T, c *conformanceRun, id string, sentAgo time.Duration) string {
	t.Helper()
	now := c.h.Clock.Now()
	token, err := c.h.Signer(t).Sign(map[string]any{
		"type": "customer.plan_changed", "event_id": id, "source": "api",
		"event_timestamp": now.Add(-time.Minute).Format(time.RFC3339Nano), "timestamp": now.Add(-sentAgo).Format(time.RFC3339Nano),
		"data": map[string]any{"customer_id": hookCustomer, "plan": map[string]any{"key": "customer_pro_plan"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func stripeBody(id string) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":"invoice.paid","data":{"object":{"id":"in_1","object":"invoice","customer":%q,"status":"paid","lines":{"data":[{"pricing":{"price_details":{"price":"price_ferry_plus_monthly"}}}]}}}}`,
		id, time.Date(2026, 11, 15, 11, 59, 0, 0, time.UTC).Unix(), hookStripeCustomer)
}

func stripeSigned(secret string, at time.Time) func(c *conformanceRun, body string) map[string]string {
	return func(_ *conformanceRun, body string) map[string]string {
		return map[string]string{"Stripe-Signature": stripewebhook.Sign([]byte(body), secret, at)}
	}
}

func captureVar(name string) func(t *testing.T, c *conformanceRun, r apptest.Response) {
	return func(t *testing.T, c *conformanceRun, r apptest.Response) {
		var body struct{ ID string }
		if err := json.Unmarshal(r.Body, &body); err != nil || body.ID == "" {
			t.Fatalf("no id in %s", r.Body)
		}
		c.vars[name] = body.ID
	}
}

func wantDuplicate(want bool) func(t *testing.T, c *conformanceRun, r apptest.Response) {
	return func(t *testing.T, c *conformanceRun, r apptest.Response) {
		var body struct{ Duplicate bool }
		if err := json.Unmarshal(r.Body, &body); err != nil || body.Duplicate != want {
			t.Errorf("duplicate %v in %s; want %v", body.Duplicate, r.Body, want)
		}
	}
}

// settleInbox runs the worker on every due billing event, as the sweep and the nudges do.
func settleInbox(t *testing.T, c *conformanceRun) {
	t.Helper()
	ids, err := c.h.Inbox().Store.Due(context.Background(), c.h.Clock.Now().UnixMilli(), 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := c.h.Inbox().Worker.Process(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
}

// inboxTable exercises the webhook inbox's routes.
func inboxTable() []exchange {
	now := time.Now()
	huge := strings.Repeat("a", 256<<10+1)
	other := func(t *testing.T, c *conformanceRun) string {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"type": "customer.plan_changed", "event_id": "event_forged",
			"timestamp": c.h.Clock.Now().Format(time.RFC3339Nano)})
		tok.Header["kid"] = c.h.Signer(t).KeyID()
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return []exchange{
		{name: "create, linked to a Kinde and a Stripe customer", route: "POST /v1/accounts", path: "/v1/accounts", as: "operator",
			body: `{"id":"acct_hooks","kindeCustomerId":"` + hookCustomer + `","stripeCustomerId":"` + hookStripeCustomer + `"}`, status: 201, after: captureKey("acct_hooks")},
		{name: "kinde webhook", route: "POST /v1/webhooks/kinde", path: "/v1/webhooks/kinde", as: "none", contentType: "application/jwt",
			makeBody: func(t *testing.T, c *conformanceRun) string { return kindeToken(t, c, "event_conf_1", 0) },
			headers:  func(*conformanceRun, string) map[string]string { return map[string]string{"webhook-id": "msg_1"} },
			status:   200, after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				captureVar("bev")(t, c, r)
				wantDuplicate(false)(t, c, r)
			}},
		{name: "kinde webhook, a copy", route: "POST /v1/webhooks/kinde", path: "/v1/webhooks/kinde", as: "none", contentType: "application/jwt",
			makeBody: func(t *testing.T, c *conformanceRun) string { return kindeToken(t, c, "event_conf_1", 0) },
			status:   200, after: wantDuplicate(true)},
		{name: "kinde webhook, signed by another key", route: "POST /v1/webhooks/kinde", path: "/v1/webhooks/kinde", as: "none", contentType: "application/jwt",
			makeBody: other, status: 401},
		{name: "kinde webhook, a token 73 hours old", route: "POST /v1/webhooks/kinde", path: "/v1/webhooks/kinde", as: "none", contentType: "application/jwt",
			makeBody: func(t *testing.T, c *conformanceRun) string { return kindeToken(t, c, "event_old", 73*time.Hour) }, status: 401},
		{name: "kinde webhook, not a token", route: "POST /v1/webhooks/kinde", path: "/v1/webhooks/kinde", as: "none", contentType: "application/jwt",
			body: "not-a-token", status: 401},
		{name: "kinde webhook, as JSON", route: "POST /v1/webhooks/kinde", path: "/v1/webhooks/kinde", as: "none",
			body: `{"type":"customer.plan_changed"}`, status: 415, invalidRequest: true},
		{name: "kinde webhook, over 256 KiB", route: "POST /v1/webhooks/kinde", path: "/v1/webhooks/kinde", as: "none", contentType: "application/jwt",
			body: huge, status: 413, invalidRequest: true},
		{name: "stripe webhook", route: "POST /v1/webhooks/stripe", path: "/v1/webhooks/stripe", as: "none",
			body: stripeBody("evt_conf_1"), headers: stripeSigned(apptest.StripeSecret, now), status: 200, after: captureVar("bev2")},
		{name: "stripe webhook, no signature", route: "POST /v1/webhooks/stripe", path: "/v1/webhooks/stripe", as: "none",
			body: stripeBody("evt_conf_2"), status: 401, invalidRequest: true},
		{name: "stripe webhook, a stale signature", route: "POST /v1/webhooks/stripe", path: "/v1/webhooks/stripe", as: "none",
			body: stripeBody("evt_conf_2"), headers: stripeSigned(apptest.StripeSecret, now.Add(-10*time.Minute)), status: 401},
		{name: "stripe webhook, another secret", route: "POST /v1/webhooks/stripe", path: "/v1/webhooks/stripe", as: "none",
			body: stripeBody("evt_conf_2"), headers: stripeSigned("whsec_other", now), status: 401},
		{name: "stripe webhook, a thin event", route: "POST /v1/webhooks/stripe", path: "/v1/webhooks/stripe", as: "none",
			body:    `{"id":"evt_thin","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered"}`,
			headers: stripeSigned(apptest.StripeSecret, now), status: 400, invalidRequest: true},
		{name: "stripe webhook, a member named twice", route: "POST /v1/webhooks/stripe", path: "/v1/webhooks/stripe", as: "none",
			body:    strings.Replace(stripeBody("evt_conf_4"), `"type":"invoice.paid"`, `"type":"invoice.paid","type":"invoice.payment_failed"`, 1),
			headers: stripeSigned(apptest.StripeSecret, now), status: 400},
		{name: "stripe webhook, as text", route: "POST /v1/webhooks/stripe", path: "/v1/webhooks/stripe", as: "none", contentType: "text/plain",
			body: stripeBody("evt_conf_3"), headers: stripeSigned(apptest.StripeSecret, now), status: 415, invalidRequest: true},
		{name: "stripe webhook, over 256 KiB", route: "POST /v1/webhooks/stripe", path: "/v1/webhooks/stripe", as: "none",
			body: huge, headers: stripeSigned(apptest.StripeSecret, now), status: 413, invalidRequest: true},

		{name: "billing events, the account's", route: "GET /v1/billing-events", path: "/v1/billing-events", as: "acct_hooks", status: 200,
			before: settleInbox},
		{name: "billing events, all", route: "GET /v1/billing-events", path: "/v1/billing-events", as: "operator", status: 200},
		{name: "billing events, one account's", route: "GET /v1/billing-events", path: "/v1/billing-events?account=acct_hooks&status=APPLIED&limit=1", as: "operator", status: 200},
		{name: "billing events, an unknown status", route: "GET /v1/billing-events", path: "/v1/billing-events?status=DONE", as: "acct_hooks", status: 400, invalidRequest: true},
		{name: "billing events, another account's filter", route: "GET /v1/billing-events", path: "/v1/billing-events?account=acct_1", as: "acct_hooks", status: 404},
		{name: "billing events, no key", route: "GET /v1/billing-events", path: "/v1/billing-events", as: "none", status: 401, invalidRequest: true},
		{name: "billing event", route: "GET /v1/billing-events/{id}", path: "/v1/billing-events/{bev}", as: "acct_hooks", status: 200},
		{name: "billing event, as the operator", route: "GET /v1/billing-events/{id}", path: "/v1/billing-events/{bev2}", as: "operator", status: 200},
		{name: "billing event, another account's", route: "GET /v1/billing-events/{id}", path: "/v1/billing-events/{bev}", as: "acct_1", status: 404},
		{name: "billing event, unknown", route: "GET /v1/billing-events/{id}", path: "/v1/billing-events/bev_aaaaaaaaaaaaaaaaaaaaaaaaaa", as: "operator", status: 404},
		{name: "replay", route: "POST /v1/billing-events/{id}/replay", path: "/v1/billing-events/{bev}/replay", as: "acct_hooks", idemKey: "replay-1", status: 202},
		{name: "replay, repeated", route: "POST /v1/billing-events/{id}/replay", path: "/v1/billing-events/{bev}/replay", as: "acct_hooks", idemKey: "replay-1", status: 202, replayed: true},
		{name: "replay, the key on another event", route: "POST /v1/billing-events/{id}/replay", path: "/v1/billing-events/{bev2}/replay", as: "acct_hooks", idemKey: "replay-1", status: 422},
		{name: "replay, another account's", route: "POST /v1/billing-events/{id}/replay", path: "/v1/billing-events/{bev}/replay", as: "acct_1", status: 404},
		{name: "replay, as the operator", route: "POST /v1/billing-events/{id}/replay", path: "/v1/billing-events/{bev2}/replay", as: "operator", body: `{}`, status: 202},
		{name: "usage of an allowance", route: "GET /v1/usage", path: "/v1/usage?feature=credits", as: "acct_hooks", status: 200,
			before: settleInbox,
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				if !strings.Contains(string(r.Body), `"limit":500`) || !strings.Contains(string(r.Body), `"grants":[`) {
					t.Errorf("credits after the plan change: %s", r.Body)
				}
			}},
	}
}

// Every route of the API answers as the document says, errors included: each request (unless it
// breaks the contract on purpose) and each answer is validated against openapi.yaml. The test
// fails for a served route that has no row here, so a route added later must join the table.
func TestOpenAPI_HandlersConformToTheDocument(t *testing.T) {
	faults := instrument.NewFaults(nil)
	run := &conformanceRun{faults: faults, keys: map[string]string{}, vars: map[string]string{}}
	run.h = apptest.New(t, apptest.Options{
		DynamoDB: []func(*dynamodb.Options){faults.Option},
		Configure: func(h *apptest.Harness) {
			ingest := h.Ingest().Ingest
			run.queue = &switchQueue{Queue: ingest.Queue}
			ingest.Queue = run.queue
		},
	})
	v := openapicheck.New(t, run.h.Server.URL)
	served := map[string]bool{}
	for _, k := range run.h.Served() {
		served[k] = true
	}
	exercised := map[string]bool{}
	for _, x := range append(append(append(conformanceTable(), inboxTable()...), consoleTable()...), webhookEndpointsTable()...) {
		if !served[x.route] {
			t.Errorf("%s: %s is in the conformance table but not served", x.name, x.route)
			continue
		}
		if x.before != nil {
			x.before(t, run)
		}
		header := x.header.Clone()
		if header == nil {
			header = http.Header{}
		}
		switch x.as {
		case "none":
		case "operator":
			header.Set("Authorization", "Bearer "+apptest.AdminKey)
		case "wrong":
			header.Set("Authorization", "Bearer fk_this-key-does-not-exist")
		default:
			key, ok := run.keys[x.as]
			if !ok {
				t.Fatalf("%s: no key for %s", x.name, x.as)
			}
			header.Set("Authorization", "Bearer "+key)
		}
		body := x.body
		if x.makeBody != nil {
			body = x.makeBody(t, run)
		}
		if body != "" {
			ct := x.contentType
			if ct == "" {
				ct = "application/json"
			}
			header.Set("Content-Type", ct)
		}
		if x.headers != nil {
			for k, v := range x.headers(run, body) {
				header.Set(k, v)
			}
		}
		if x.idemKey != "" {
			header.Set("Idempotency-Key", x.idemKey)
		}
		path := strings.NewReplacer("{hold_off}", run.vars["hold_off"], "{hold}", run.vars["hold"], "{bev}", run.vars["bev"], "{bev2}", run.vars["bev2"], "{we}", run.vars["we"]).Replace(x.path)
		r := v.Do(t, run.h.Server.Client(), routeMethod(x.route), run.h.Server.URL+path, header, []byte(body), x.judge())
		if r.Status != x.status {
			t.Errorf("%s: %d, want %d: %s", x.name, r.Status, x.status, r.Body)
		}
		if got := r.Header.Get("Idempotent-Replayed") == "true"; got != x.replayed {
			t.Errorf("%s: replayed %v, want %v", x.name, got, x.replayed)
		}
		exercised[x.route] = true
		if x.after != nil {
			x.after(t, run, r)
		}
	}
	for route := range served {
		if !exercised[route] {
			t.Errorf("%s is served but the conformance table has no request for it", route)
		}
	}
}

// seedRollups writes one event's count at each instant into account's rollups, through the
// rollup package's own write path.
func seedRollups(account string, instants ...string) func(t *testing.T, c *conformanceRun) {
	return func(t *testing.T, c *conformanceRun) {
		t.Helper()
		s := &rollup.Store{DB: c.h.Env.Clients.DynamoDB, Table: c.h.Env.Names.Table(resources.TableRollups)}
		var cs []meter.Contribution
		for _, at := range instants {
			when, err := time.Parse(time.RFC3339, at)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, meter.Contribution{Meter: "events", Aggregation: meter.Count, AtMs: when.UnixMilli(), Value: 1})
		}
		if err := s.Apply(context.Background(), account, cs); err != nil {
			t.Fatal(err)
		}
	}
}

func routeMethod(route string) string { return route[:strings.IndexByte(route, ' ')] }

// consoleTable exercises the console's routes: its page and files, signing in and out, its
// lists, redrive and labs. (Sessions themselves are tested in internal/platform/httpapi; the document
// declares the cookie, the table calls with the operator key.)
func consoleTable() []exchange {
	return []exchange{
		{name: "console page", route: "GET /console", path: "/console", as: "none", status: 200},
		{name: "console page, a query", route: "GET /console", path: "/console?x=1", as: "none", status: 400},
		{name: "console script", route: "GET /console/{asset}", path: "/console/console.js", as: "none", status: 200},
		{name: "console file, unknown", route: "GET /console/{asset}", path: "/console/nothing.js", as: "none", status: 404},
		{name: "sign in", route: "POST /v1/sessions", path: "/v1/sessions", as: "operator", status: 201},
		{name: "sign in, an account's key", route: "POST /v1/sessions", path: "/v1/sessions", as: "acct_1", status: 401},
		{name: "current session, by key", route: "GET /v1/sessions/current", path: "/v1/sessions/current", as: "operator", status: 404},
		{name: "current session, none", route: "GET /v1/sessions/current", path: "/v1/sessions/current", as: "none", status: 401, invalidRequest: true},
		{name: "sign out, by key", route: "DELETE /v1/sessions/current", path: "/v1/sessions/current", as: "operator", status: 404},
		{name: "accounts", route: "GET /v1/accounts", path: "/v1/accounts?prefix=acct_&limit=2", as: "operator", status: 200},
		{name: "accounts, a limit too large", route: "GET /v1/accounts", path: "/v1/accounts?limit=101", as: "operator", status: 400, invalidRequest: true},
		{name: "accounts, an account's key", route: "GET /v1/accounts", path: "/v1/accounts", as: "acct_1", status: 401},
		{name: "standing", route: "GET /v1/accounts/{id}/standing", path: "/v1/accounts/acct_1/standing?cycles=2", as: "operator", status: 200},
		{name: "standing, unknown", route: "GET /v1/accounts/{id}/standing", path: "/v1/accounts/nobody/standing", as: "operator", status: 404},
		{name: "failed events, own", route: "GET /v1/events", path: "/v1/events?status=REJECTED", as: "acct_1", status: 200},
		{name: "failed events, the operator names the account", route: "GET /v1/events", path: "/v1/events?status=UNINSERTABLE&account=acct_1", as: "operator", status: 200},
		{name: "failed events, no account", route: "GET /v1/events", path: "/v1/events?status=REJECTED", as: "operator", status: 400},
		{name: "failed events, not a failure status", route: "GET /v1/events", path: "/v1/events?status=INSERTED", as: "acct_1", status: 400, invalidRequest: true},
		{name: "redrive, unknown event", route: "POST /v1/events/{id}/redrive", path: "/v1/events/evt_none/redrive", as: "operator", idemKey: "redrive-1",
			body: `{"account":"acct_1"}`, status: 404},
		{name: "redrive, no account", route: "POST /v1/events/{id}/redrive", path: "/v1/events/evt_none/redrive", as: "operator", idemKey: "redrive-2",
			body: `{}`, status: 400, invalidRequest: true},
		{name: "holds, own", route: "GET /v1/holds", path: "/v1/holds?status=SETTLED", as: "acct_1", status: 200},
		{name: "holds, the operator names the account", route: "GET /v1/holds", path: "/v1/holds?status=RUNNING&account=acct_1", as: "operator", status: 200},
		{name: "holds, unknown status", route: "GET /v1/holds", path: "/v1/holds?status=LOST", as: "acct_1", status: 400, invalidRequest: true},
		{name: "outbox", route: "GET /v1/outbox", path: "/v1/outbox?account=acct_1", as: "operator", status: 200},
		{name: "outbox, no account", route: "GET /v1/outbox", path: "/v1/outbox", as: "operator", status: 400, invalidRequest: true},
		{name: "lab, unknown", route: "POST /v1/labs/{lab}/runs", path: "/v1/labs/nothing/runs", as: "operator", idemKey: "lab-1", status: 404},
		{name: "lab, on a stack without its own URL", route: "POST /v1/labs/{lab}/runs", path: "/v1/labs/holds-five/runs", as: "operator", idemKey: "lab-2", status: 501},
	}
}

// webhookEndpointsTable is the conformance run's exchanges with the webhook endpoints' routes.
func webhookEndpointsTable() []exchange {
	unknown := "/v1/webhook-endpoints/we_" + strings.Repeat("a", 26)
	reg := `{"url":"https://hooks.example.com/ferry","kinds":["threshold.crossed"],"accounts":["acct_1"],"description":"billing"}`
	return []exchange{
		{name: "webhook endpoint", route: "POST /v1/webhook-endpoints", path: "/v1/webhook-endpoints", as: "operator", idemKey: "we-1", body: reg, status: 201,
			after: func(t *testing.T, c *conformanceRun, r apptest.Response) {
				var b struct{ ID string }
				if err := json.Unmarshal(r.Body, &b); err != nil || b.ID == "" {
					t.Fatalf("no endpoint id in %s", r.Body)
				}
				c.vars["we"] = b.ID
			}},
		{name: "webhook endpoint, repeated", route: "POST /v1/webhook-endpoints", path: "/v1/webhook-endpoints", as: "operator", idemKey: "we-1", body: reg, status: 201, replayed: true},
		{name: "webhook endpoint, every problem", route: "POST /v1/webhook-endpoints", path: "/v1/webhook-endpoints", as: "operator", body: `{"url":"http://10.0.0.1/x","kinds":["nope"]}`, status: 400, invalidRequest: true},
		{name: "webhook endpoint, an account's key", route: "POST /v1/webhook-endpoints", path: "/v1/webhook-endpoints", as: "acct_1", body: `{"url":"https://hooks.example.com"}`, status: 401},
		{name: "webhook endpoints", route: "GET /v1/webhook-endpoints", path: "/v1/webhook-endpoints", as: "operator", status: 200},
		{name: "webhook endpoint, read", route: "GET /v1/webhook-endpoints/{id}", path: "/v1/webhook-endpoints/{we}", as: "operator", status: 200},
		{name: "webhook endpoint, unknown", route: "GET /v1/webhook-endpoints/{id}", path: unknown, as: "operator", status: 404},
		{name: "webhook endpoint, change", route: "PATCH /v1/webhook-endpoints/{id}", path: "/v1/webhook-endpoints/{we}", as: "operator", idemKey: "we-2", body: `{"disabled":true,"description":""}`, status: 200},
		{name: "webhook endpoint, a change of nothing", route: "PATCH /v1/webhook-endpoints/{id}", path: "/v1/webhook-endpoints/{we}", as: "operator", body: `{}`, status: 400, invalidRequest: true},
		{name: "webhook endpoint, rotate", route: "POST /v1/webhook-endpoints/{id}/rotate-secret", path: "/v1/webhook-endpoints/{we}/rotate-secret", as: "operator", idemKey: "we-3", status: 200},
		{name: "webhook endpoint, rotate an unknown one", route: "POST /v1/webhook-endpoints/{id}/rotate-secret", path: unknown + "/rotate-secret", as: "operator", status: 404},
		{name: "webhook deliveries", route: "GET /v1/webhook-endpoints/{id}/deliveries", path: "/v1/webhook-endpoints/{we}/deliveries?limit=10", as: "operator", status: 200},
		{name: "webhook deliveries, unknown endpoint", route: "GET /v1/webhook-endpoints/{id}/deliveries", path: unknown + "/deliveries", as: "operator", status: 404},
		{name: "webhook delivery, replay unknown", route: "POST /v1/webhook-endpoints/{id}/deliveries/{notification}/replay", path: "/v1/webhook-endpoints/{we}/deliveries/ntf_" + strings.Repeat("a", 26) + "/replay", as: "operator", idemKey: "we-4", status: 404},
		{name: "webhook endpoint, delete", route: "DELETE /v1/webhook-endpoints/{id}", path: "/v1/webhook-endpoints/{we}", as: "operator", idemKey: "we-5", status: 204},
		{name: "webhook endpoint, delete again", route: "DELETE /v1/webhook-endpoints/{id}", path: "/v1/webhook-endpoints/{we}", as: "operator", status: 404},
	}
}
