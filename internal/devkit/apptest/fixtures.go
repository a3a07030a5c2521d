package apptest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestdataDir is the module's top-level testdata folder: real-shaped events (SQS batches, API
// Gateway v2 requests, schedule payloads), plan catalogs and golden files, shared by every
// package's tests and by the Lambda emulator check.
func TestdataDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "testdata"
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata")
}

// Fixture reads a file under testdata (a path like "sqs/worker-batch.json").
func Fixture(t testing.TB, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(TestdataDir(), rel))
	if err != nil {
		t.Fatalf("fixture %s: %v", rel, err)
	}
	return data
}

// SQSEvent reads an SQS batch fixture as Lambda delivers it.
func SQSEvent(t testing.TB, rel string) events.SQSEvent {
	t.Helper()
	var ev events.SQSEvent
	if err := json.Unmarshal(Fixture(t, rel), &ev); err != nil {
		t.Fatalf("fixture %s: %v", rel, err)
	}
	return ev
}

// APIGatewayRequest reads an API Gateway HTTP API (payload v2) request fixture.
func APIGatewayRequest(t testing.TB, rel string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	var req events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(Fixture(t, rel), &req); err != nil {
		t.Fatalf("fixture %s: %v", rel, err)
	}
	return req
}
