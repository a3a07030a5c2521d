package main

import (
	"encoding/json"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// defaultStageName is the stage an HTTP API serves at its root URL.
const defaultStageName = "$default"

// accessLogFields are the access log's JSON fields: one line per request, enough to find a
// request by id, see who sent it, which route answered, how, and how fast.
var accessLogFields = map[string]string{
	"requestId":          "$context.requestId",
	"requestTime":        "$context.requestTime",
	"ip":                 "$context.identity.sourceIp",
	"userAgent":          "$context.identity.userAgent",
	"httpMethod":         "$context.httpMethod",
	"path":               "$context.path",
	"routeKey":           "$context.routeKey",
	"protocol":           "$context.protocol",
	"status":             "$context.status",
	"responseLength":     "$context.responseLength",
	"latency":            "$context.responseLatency",
	"integrationLatency": "$context.integrationLatency",
	"integrationStatus":  "$context.integrationStatus",
	"integrationError":   "$context.integrationErrorMessage",
	"error":              "$context.error.message",
}

// HTTPAPIProps configures the HTTP API.
type HTTPAPIProps struct {
	Config    Config
	Routes    []resources.Route
	Functions map[string]awslambda.Function
	// Accepted collects the template judges' findings this app accepts, with their reasons.
	Accepted *accepted
}

// HTTPAPI is the public HTTP API and the stage that serves it.
type HTTPAPI struct {
	API   awsapigatewayv2.HttpApi
	Stage awsapigatewayv2.HttpStage
}

// NewHTTPAPI creates an HTTP API with every route, each integrated with its function's Lambda
// (payload format 2.0), served by a throttled default stage that writes JSON access logs.
func NewHTTPAPI(scope constructs.Construct, id string, props *HTTPAPIProps) *HTTPAPI {
	this := constructs.NewConstruct(scope, jsii.String(id))
	cfg := props.Config
	api := awsapigatewayv2.NewHttpApi(this, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		ApiName:     jsii.String(cfg.Prefix()),
		Description: jsii.String("Ferry " + cfg.Stage + " HTTP API"),
		// The stage is created below, with throttling and access logs.
		CreateDefaultStage: jsii.Bool(false),
	})

	accessLogs := awslogs.NewLogGroup(this, jsii.String("AccessLogs"), &awslogs.LogGroupProps{
		Retention:     retentionDays[cfg.LogRetentionDays],
		RemovalPolicy: removalPolicy(cfg),
	})
	props.Accepted.accept(accessLogs, "CKV_AWS_158", reasonLogsServiceKey)
	format, err := json.Marshal(accessLogFields)
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	stage := awsapigatewayv2.NewHttpStage(this, jsii.String("DefaultStage"), &awsapigatewayv2.HttpStageProps{
		HttpApi:    api,
		StageName:  jsii.String(defaultStageName),
		AutoDeploy: jsii.Bool(true),
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit:  jsii.Number(cfg.APIRateLimit),
			BurstLimit: jsii.Number(cfg.APIBurstLimit),
		},
		AccessLogSettings: &accessLogSettings{
			destination: awsapigatewayv2.NewLogGroupLogDestination(accessLogs),
			format:      awsapigateway.AccessLogFormat_Custom(jsii.String(string(format))),
		},
	})

	// One integration per function, shared by its routes.
	integrations := map[string]awsapigatewayv2integrations.HttpLambdaIntegration{}
	integrationFor := func(function string) awsapigatewayv2integrations.HttpLambdaIntegration {
		integration, ok := integrations[function]
		if !ok {
			integration = awsapigatewayv2integrations.NewHttpLambdaIntegration(
				jsii.String(pascal(function)+"Integration"),
				props.Functions[function],
				&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
					PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
				})
			integrations[function] = integration
		}
		return integration
	}
	for _, r := range props.Routes {
		api.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod(r.Method)},
			Integration: integrationFor(r.Function),
		})
	}
	// Requests no route matches (an unknown path, a wrong method) go to one function, which
	// answers them with problem documents (404, or 405 with Allow) instead of API Gateway's bare
	// {"message":"Not Found"}.
	awsapigatewayv2.NewHttpRoute(this, jsii.String("DefaultRoute"), &awsapigatewayv2.HttpRouteProps{
		HttpApi:     api,
		RouteKey:    awsapigatewayv2.HttpRouteKey_DEFAULT(),
		Integration: integrationFor(resources.DefaultRouteFunction),
	})
	return &HTTPAPI{API: api, Stage: stage}
}

// accessLogSettings implements awsapigatewayv2.IAccessLogSettings.
type accessLogSettings struct {
	destination awsapigatewayv2.IAccessLogDestination
	format      awsapigateway.AccessLogFormat
}

func (s *accessLogSettings) Destination() awsapigatewayv2.IAccessLogDestination { return s.destination }
func (s *accessLogSettings) Format() awsapigateway.AccessLogFormat              { return s.format }
