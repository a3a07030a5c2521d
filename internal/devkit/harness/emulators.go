package harness

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
)

// Endpoints the in-process emulators answer on. No request to them leaves the process: the
// harness's clients hand each one, serialized on the AWS wire protocol as for any endpoint, to
// the emulator's HTTP handler directly.
const (
	inProcessDynamoDB = "http://dynamodb.in-process.invalid"
	inProcessS3       = "http://s3.in-process.invalid"
)

// A run keeps the emulators in its own process: minidyn and gofakes3, the same servers `ferry dev`
// starts, reached without a socket. A schedule makes about a hundred calls, and over a loopback
// socket each paid for a connection's reads and writes (system calls) in both directions; in
// process a call costs what the SDK and the emulator do.
// inProcess are the emulators a run keeps in its process, if any.
type inProcess struct {
	dynamoDB, s3 *handlerClient
}

// resettable reports whether every emulator that holds state the schedules' invariants read
// (DynamoDB, S3) is in process, so that fresh gives fresh resources.
func (ip *inProcess) resettable() bool { return ip.dynamoDB != nil && ip.s3 != nil }

// newInProcess starts the emulators endpoints leaves empty (DynamoDB, S3) in process, and returns
// the endpoints to use and the client options that reach them.
func newInProcess(endpoints cloud.Endpoints) (cloud.Endpoints, cloud.Options, *inProcess) {
	var transport cloud.Options
	ip := &inProcess{}
	if endpoints.DynamoDB == "" {
		endpoints.DynamoDB = inProcessDynamoDB
		ip.dynamoDB = &handlerClient{}
		transport.DynamoDB = []func(*dynamodb.Options){func(o *dynamodb.Options) { o.HTTPClient = ip.dynamoDB }}
	}
	if endpoints.S3 == "" {
		endpoints.S3 = inProcessS3
		ip.s3 = &handlerClient{}
		transport.S3 = []func(*s3.Options){func(o *s3.Options) { o.HTTPClient = ip.s3 }}
	}
	ip.fresh()
	return endpoints, transport, ip
}

// fresh replaces the emulators' state with none: a new server each, on which no table, bucket
// or item exists. The clients that reach them stay as they are.
func (ip *inProcess) fresh() {
	if ip.dynamoDB != nil {
		ip.dynamoDB.set(devstack.NewDynamoDBHandler())
	}
	if ip.s3 != nil {
		ip.s3.set(gofakes3.New(s3mem.New(), gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	}
}

// handlerClient is an HTTP client whose every request is served by one handler in process.
type handlerClient struct {
	mu sync.Mutex
	h  http.Handler
}

func (c *handlerClient) set(h http.Handler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.h = h
}

// Do serves r as the handler's server would see it arrive.
func (c *handlerClient) Do(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	h := c.h
	c.mu.Unlock()
	in := r.Clone(r.Context())
	in.RequestURI = r.URL.RequestURI()
	in.Host = r.URL.Host
	in.RemoteAddr = "127.0.0.1:1"
	if in.Body == nil {
		in.Body = http.NoBody
	}
	if in.ContentLength > 0 || (in.ContentLength == 0 && in.Body == http.NoBody && r.Method != http.MethodGet) {
		// A server reads the length from the header the client's transport writes.
		in.Header.Set("Content-Length", strconv.FormatInt(in.ContentLength, 10))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, in)
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}
