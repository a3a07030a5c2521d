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

// NewLambdaHandler adapts h with the aws-lambda-go-api-proxy adapter.
func NewLambdaHandler(h http.Handler) LambdaHandler {
	return httpadapter.NewV2(h).ProxyWithContext
}
