package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// The local gateway hands a function the event API Gateway would: the same request sent to it
// arrives as the recorded API Gateway v2 event under testdata/apigw says, in every field a handler
// reads (what differs per request — its id, time, source address, host — aside).
func TestGateway_HandsTheFunctionTheEventAPIGatewayWould(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "apigw", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no API Gateway fixtures: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var want events.APIGatewayV2HTTPRequest
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			var got events.APIGatewayV2HTTPRequest
			capture := func(_ context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
				got = req
				return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusNoContent}, nil
			}
			handlers := map[string]httpapi.LambdaHandler{}
			for _, f := range resources.Functions {
				handlers[f.Name] = capture
			}
			gw, err := devstack.NewGateway(resources.Routes, handlers, slogDiscard())
			if err != nil {
				t.Fatal(err)
			}
			target := want.RawPath
			if want.RawQueryString != "" {
				target += "?" + want.RawQueryString
			}
			req := httptest.NewRequest(want.RequestContext.HTTP.Method, target, bytes.NewReader([]byte(want.Body)))
			for k, v := range want.Headers {
				req.Header.Set(k, v)
			}
			gw.ServeHTTP(httptest.NewRecorder(), req)

			checks := []struct {
				field     string
				got, want any
			}{
				{"version", got.Version, want.Version},
				{"routeKey", got.RouteKey, want.RouteKey},
				{"rawPath", got.RawPath, want.RawPath},
				{"rawQueryString", got.RawQueryString, want.RawQueryString},
				{"queryStringParameters", len(got.QueryStringParameters), len(want.QueryStringParameters)},
				{"pathParameters", len(got.PathParameters), len(want.PathParameters)},
				{"body", got.Body, want.Body},
				{"isBase64Encoded", got.IsBase64Encoded, want.IsBase64Encoded},
				{"requestContext.routeKey", got.RequestContext.RouteKey, want.RequestContext.RouteKey},
				{"requestContext.stage", got.RequestContext.Stage, want.RequestContext.Stage},
				{"requestContext.http.method", got.RequestContext.HTTP.Method, want.RequestContext.HTTP.Method},
				{"requestContext.http.path", got.RequestContext.HTTP.Path, want.RequestContext.HTTP.Path},
				{"headers.authorization", got.Headers["authorization"], want.Headers["authorization"]},
				{"headers.content-type", got.Headers["content-type"], want.Headers["content-type"]},
			}
			for k, v := range want.QueryStringParameters {
				checks = append(checks, struct {
					field     string
					got, want any
				}{"queryStringParameters." + k, got.QueryStringParameters[k], v})
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s: %v, API Gateway sends %v", c.field, c.got, c.want)
				}
			}
		})
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
