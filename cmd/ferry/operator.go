package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Bounds of one request to the operator routes.
const (
	opRequestTimeout = 2 * time.Minute
	// maxAnswerBytes bounds an answer the operator commands read.
	maxAnswerBytes = 16 << 20
)

// opClient calls a Ferry stack's operator routes: report, reconcile, evidence, usage and
// webhook-endpoints all go through its do.
type opClient struct {
	base, key string
	http      *http.Client
}

// operatorClient adds the --url flag every operator command takes.
func operatorClient(fs *flag.FlagSet) *string {
	return fs.String("url", "http://"+envOr(EnvAddr, devstack.DefaultAddr), "Ferry's base URL: a running ferry dev or a deployed stack (operator key from FERRY_ADMIN_KEY)")
}

// newOpClient calls the stack at base with the operator key from FERRY_ADMIN_KEY (ferry dev's by
// default).
func newOpClient(base string) *opClient {
	return &opClient{
		base: strings.TrimRight(base, "/"), key: envOr(resources.EnvAdminKey, devstack.DefaultAdminKey),
		http: &http.Client{Timeout: opRequestTimeout},
	}
}

// refusal is an answer other than the one a request wanted, with what its problem document says.
type refusal struct {
	method, path string
	status       int
	// Detail is the problem's detail: for refused input, every problem joined.
	Detail string `json:"detail"`
	// Errors lists every problem when the input was judged field by field.
	Errors []string `json:"errors"`
}

// Error is the request, the status and the problem's detail.
func (r *refusal) Error() string {
	return fmt.Sprintf("%s %s: %d %s", r.method, r.path, r.status, r.Detail)
}

// do sends body (when not nil) as JSON to an operator route with the operator key and returns the
// answer when its status is want; any other answer is a *refusal.
func (c *opClient) do(ctx context.Context, method, path string, body any, want int) ([]byte, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s (is Ferry running at %s?): %w", method, path, c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		r := &refusal{method: method, path: path, status: resp.StatusCode}
		// An answer that is not a problem document is still a refusal, with no detail.
		_ = json.Unmarshal(data, r)
		return nil, r
	}
	return data, nil
}

// call sends a request and decodes a 200 answer into out; any other answer is an error with the
// problem's detail.
func (c *opClient) call(ctx context.Context, method, path string, body, out any) error {
	data, err := c.do(ctx, method, path, body, http.StatusOK)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// send is call for the routes that answer other than 200: it keeps an answer of status want in
// out as it is; any other answer is an error with the problem's detail, or, when it lists more
// than one problem (a registration's), every problem on a line of its own.
func (c *opClient) send(ctx context.Context, method, path string, body any, out *json.RawMessage, want int) error {
	data, err := c.do(ctx, method, path, body, want)
	var r *refusal
	if errors.As(err, &r) && len(r.Errors) > 1 {
		return fmt.Errorf("%s %s: %d:\n  %s", method, path, r.status, strings.Join(r.Errors, "\n  "))
	}
	if err != nil {
		return err
	}
	*out = data
	return nil
}
