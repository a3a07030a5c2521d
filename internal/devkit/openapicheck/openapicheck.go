// Package openapicheck checks HTTP exchanges against Ferry's contract, api/openapi.yaml: each
// request (unless it breaks the document on purpose, or the document cannot model it) and each
// answer is validated with kin-openapi before the test reads the answer.
//
// It is tooling: the API's own tests (api/) and each function's route tests (functions/api/)
// share it, so that one validator, with one stand-in for authentication, judges every route.
package openapicheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/ferrymeter/ferry/api"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
)

func init() {
	// Kinde's webhooks are application/jwt: a text body to the validator.
	openapi3filter.RegisterBodyDecoder("application/jwt", openapi3filter.PlainBodyDecoder)
	// The console's page and files.
	for _, ct := range []string{"text/html", "text/javascript", "text/css", "image/svg+xml"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
	}
}

// Load reads api/openapi.yaml and fails the test unless it is a valid OpenAPI document.
func Load(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// Validator checks exchanges with one server against the document.
type Validator struct {
	// Router finds a request's operation in the document, served at the server's base URL.
	Router routers.Router
}

// New returns a validator for the server at baseURL.
func New(t testing.TB, baseURL string) *Validator {
	t.Helper()
	doc := Load(t)
	doc.Servers = openapi3.Servers{{URL: baseURL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &Validator{Router: router}
}

// BearerPresent stands in for authentication: the handlers decide who the key belongs to; the
// document only says a bearer key is required.
func BearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecurityScheme.Type != "http" || in.SecurityScheme.Scheme != "bearer" {
		return fmt.Errorf("unexpected security scheme %s", in.SecuritySchemeName)
	}
	h := in.RequestValidationInput.Request.Header.Get("Authorization")
	if len(h) <= len("Bearer ") || !strings.EqualFold(h[:len("Bearer ")], "Bearer ") {
		return errors.New("no bearer key")
	}
	return nil
}

// Request says how a request is judged against the document.
type Request int

const (
	// Conforming: the request must validate.
	Conforming Request = iota
	// Breaking: the request breaks the document on purpose and must fail validation.
	Breaking
	// Unmodelled: the document cannot model the request (binary mode's JSON data is an
	// application/json body that is not a CloudEvent, which only the ce-* headers explain), so
	// it is not judged.
	Unmodelled
)

// Do sends a request with client, judges it as judge says, and returns the answer, which must
// conform whatever the request was.
func (v *Validator) Do(t testing.TB, client *http.Client, method, url string, header http.Header, body []byte, judge Request) apptest.Response {
	t.Helper()
	ctx := context.Background()
	newReq := func() *http.Request {
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header.Clone()
		return req
	}
	checked := newReq()
	route, params, err := v.Router.FindRoute(checked)
	if err != nil {
		t.Fatalf("%s %s: not in the document: %v", method, url, err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: checked, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: BearerPresent, MultiError: true},
	}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	switch {
	case judge == Unmodelled:
	case judge == Breaking && reqErr == nil:
		t.Errorf("%s %s %s breaks the document on purpose but validates", method, url, body)
	case judge == Conforming && reqErr != nil:
		t.Errorf("request %s %s %s does not conform: %v", method, url, body, reqErr)
	}

	r := apptest.Send(t, client, newReq())
	if err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: r.Status, Header: r.Header, Body: io.NopCloser(bytes.NewReader(r.Body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}); err != nil {
		t.Errorf("answer %d to %s %s does not conform: %v\n%s", r.Status, method, url, err, r.Body)
	}
	return r
}
