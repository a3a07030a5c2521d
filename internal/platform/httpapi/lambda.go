package httpapi

import (
	"context"
	"net/http"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"
)

// LambdaHandler is the Lambda entry point for an HTTP API (payload v2) function: API Gateway's
// event becomes an *http.Request for h, and h's answer becomes the response event.
type LambdaHandler func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// NewLambdaHandler adapts h with the aws-lambda-go-api-proxy adapter. A request whose headers
// HTTP does not allow (a control character in a value) is answered with RequestHeadProblem
// before h runs, exactly as ferry dev's server answers the same request, so the answer has the
// same shape wherever the request arrives.
func NewLambdaHandler(h http.Handler) LambdaHandler {
	proxy := httpadapter.NewV2(h).ProxyWithContext
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		if !validHeaders(req.Headers) {
			p := RequestHeadProblem(http.StatusBadRequest)
			return events.APIGatewayV2HTTPResponse{
				StatusCode: p.Status,
				Headers:    map[string]string{"Content-Type": ProblemContentType},
				Body:       string(p.Document()),
			}, nil
		}
		return proxy(ctx, req)
	}
}

// LambdaHandler is the server's handler behind API Gateway's payload v2 events.
func (s *Server) LambdaHandler() (any, error) {
	h, err := s.Handler()
	if err != nil {
		return nil, err
	}
	return NewLambdaHandler(h), nil
}
