// Package cloud builds the AWS SDK clients Ferry talks through. In AWS the clients use the default
// credential chain; locally and in tests they point at emulator endpoints (minidyn, gofakes3,
// fauxqs) or at the endpoints named in FERRY_DYNAMODB_ENDPOINT, FERRY_S3_ENDPOINT and
// FERRY_SQS_ENDPOINT, with static credentials.
package cloud

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Environment variables naming external endpoints.
const (
	EnvDynamoDBEndpoint = "FERRY_DYNAMODB_ENDPOINT"
	EnvS3Endpoint       = "FERRY_S3_ENDPOINT"
	EnvSQSEndpoint      = "FERRY_SQS_ENDPOINT"
)

// localRegion is the region used against emulators, which accept any.
const localRegion = "us-east-1"

// maxIdleConnsPerHost keeps connections to a local endpoint reusable under concurrency; Go's
// default of 2 makes 50 concurrent requests open and close sockets all the time.
const maxIdleConnsPerHost = 64

// Endpoints names the endpoints to use; an empty field means the service's AWS endpoint.
type Endpoints struct {
	DynamoDB string
	S3       string
	SQS      string
}

// EndpointsFromEnv reads FERRY_*_ENDPOINT.
func EndpointsFromEnv() Endpoints {
	return Endpoints{
		DynamoDB: os.Getenv(EnvDynamoDBEndpoint),
		S3:       os.Getenv(EnvS3Endpoint),
		SQS:      os.Getenv(EnvSQSEndpoint),
	}
}

// Local reports whether any endpoint is overridden.
func (e Endpoints) Local() bool { return e.DynamoDB != "" || e.S3 != "" || e.SQS != "" }

// Clients are the SDK clients one process shares: built once per container.
type Clients struct {
	DynamoDB *dynamodb.Client
	S3       *s3.Client
	SQS      *sqs.Client
}

// Options adjust the clients.
type Options struct {
	// DynamoDB is applied to the DynamoDB client's options (middleware, retries).
	DynamoDB []func(*dynamodb.Options)
	S3       []func(*s3.Options)
	SQS      []func(*sqs.Options)
}

// HTTPClient is an HTTP client with a connection pool sized for concurrent requests to one host.
func HTTPClient() *http.Client {
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4 * maxIdleConnsPerHost,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: transport}
}

// New builds the clients. Services with an overridden endpoint use static test credentials and
// path-style S3 addressing; the others use the default AWS configuration.
func New(ctx context.Context, endpoints Endpoints, opts Options) (Clients, error) {
	httpClient := HTTPClient()
	var awsCfg aws.Config
	if endpoints.DynamoDB == "" || endpoints.S3 == "" || endpoints.SQS == "" {
		cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(httpClient))
		if err != nil {
			return Clients{}, fmt.Errorf("load AWS configuration: %w", err)
		}
		awsCfg = cfg
	}
	local := aws.Config{
		Region:      localRegion,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  httpClient,
	}
	pick := func(endpoint string) aws.Config {
		if endpoint == "" {
			return awsCfg
		}
		return local
	}

	ddbOpts := opts.DynamoDB
	if endpoints.DynamoDB != "" {
		ddbOpts = append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(endpoints.DynamoDB)
		}}, ddbOpts...)
	}
	s3Opts := opts.S3
	if endpoints.S3 != "" {
		s3Opts = append([]func(*s3.Options){func(o *s3.Options) {
			o.BaseEndpoint = aws.String(endpoints.S3)
			o.UsePathStyle = true
		}}, s3Opts...)
	}
	sqsOpts := opts.SQS
	if endpoints.SQS != "" {
		sqsOpts = append([]func(*sqs.Options){func(o *sqs.Options) {
			o.BaseEndpoint = aws.String(endpoints.SQS)
		}}, sqsOpts...)
	}
	return Clients{
		DynamoDB: dynamodb.NewFromConfig(pick(endpoints.DynamoDB), ddbOpts...),
		S3:       s3.NewFromConfig(pick(endpoints.S3), s3Opts...),
		SQS:      sqs.NewFromConfig(pick(endpoints.SQS), sqsOpts...),
	}, nil
}

// Merge combines Options: each client gets every option of both.
func (o Options) Merge(other Options) Options {
	return Options{
		DynamoDB: append(append([]func(*dynamodb.Options){}, o.DynamoDB...), other.DynamoDB...),
		S3:       append(append([]func(*s3.Options){}, o.S3...), other.S3...),
		SQS:      append(append([]func(*sqs.Options){}, o.SQS...), other.SQS...),
	}
}
