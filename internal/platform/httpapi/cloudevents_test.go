package httpapi_test

// Defect 12: the CloudEvents HTTP binding's binary mode — the default of several SDKs — was
// refused. Both content modes, and structured batches, sent by the CloudEvents Go SDK's own
// HTTP client.

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/metering/event"
)

func sdkClient(t *testing.T, h *apptest.Harness, key string) cloudevents.Client {
	t.Helper()
	c, err := cloudevents.NewClientHTTP(cehttp.WithTarget(h.Server.URL+"/v1/events"), cehttp.WithHeader("Authorization", "Bearer "+key))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sdkEvent(t *testing.T, id, subject string, data any) cloudevents.Event {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetSource("/sdk")
	e.SetType("api.call")
	if subject != "" {
		e.SetSubject(subject)
	}
	e.SetExtension("tenant", "t1")
	e.SetTime(time.Date(2026, 11, 15, 12, 0, 0, 123456789, time.UTC))
	if err := e.SetData(cloudevents.ApplicationJSON, data); err != nil {
		t.Fatal(err)
	}
	return e
}

// sendStatus sends with the SDK and returns the HTTP status it saw.
func sendStatus(t *testing.T, ctx context.Context, c cloudevents.Client, e cloudevents.Event) int {
	t.Helper()
	res := c.Send(ctx, e)
	var httpResult *cehttp.Result
	if !cloudevents.ResultAs(res, &httpResult) {
		t.Fatalf("send %s: %v", e.ID(), res)
	}
	return httpResult.StatusCode
}

// archived reads back the JSON format Ferry archived for an event, with the SDK.
func archived(t *testing.T, h *apptest.Harness, accountID, id string) cloudevents.Event {
	t.Helper()
	e, err := h.Worker().Ledger.Get(context.Background(), accountID, id)
	if err != nil {
		t.Fatalf("ledger %s: %v", id, err)
	}
	raw, err := h.Worker().Archive.Read(context.Background(), e.ArchiveLocation())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := event.Parse(raw); err != nil {
		t.Errorf("%s: the archived event does not parse: %v", id, err)
	}
	var got cloudevents.Event
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return got
}

func TestCloudEventsSDK_BinaryAndStructuredMode(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_sdk", "free", nil)
	c := sdkClient(t, h, key)
	ctx := context.Background()
	binary := sdkEvent(t, "sdk-binary-1", "sub", map[string]any{"tokens": 12})
	if got := sendStatus(t, cloudevents.WithEncodingBinary(ctx), c, binary); got != http.StatusAccepted {
		t.Fatalf("binary mode: %d", got)
	}
	structured := sdkEvent(t, "sdk-structured-1", "sub", map[string]any{"tokens": 7})
	if got := sendStatus(t, cloudevents.WithEncodingStructured(ctx), c, structured); got != http.StatusAccepted {
		t.Fatalf("structured mode: %d", got)
	}
	// The SDK's default mode is binary.
	if got := sendStatus(t, ctx, c, sdkEvent(t, "sdk-default-1", "", map[string]any{"n": 1})); got != http.StatusAccepted {
		t.Fatalf("default mode: %d", got)
	}
	// A value binary mode cannot carry unambiguously is refused, not guessed at: this one goes
	// in structured mode instead.
	accented := sdkEvent(t, "sdk-accent-1", "café", map[string]any{"n": 1})
	if got := sendStatus(t, cloudevents.WithEncodingBinary(ctx), c, accented); got != http.StatusBadRequest {
		t.Errorf("a non-ASCII attribute in binary mode: %d, want 400", got)
	}
	if got := sendStatus(t, cloudevents.WithEncodingStructured(ctx), c, accented); got != http.StatusAccepted {
		t.Errorf("the same event in structured mode: %d", got)
	}
	h.Drain(t, 0)
	for _, sent := range []cloudevents.Event{binary, structured, accented} {
		storedEvent(t, h, "acct_sdk", sent.ID(), nil)
		got := archived(t, h, "acct_sdk", sent.ID())
		if got.ID() != sent.ID() || got.Source() != sent.Source() || got.Type() != sent.Type() || got.Subject() != sent.Subject() ||
			string(got.Data()) != string(sent.Data()) || got.Extensions()["tenant"] != "t1" || !got.Time().Equal(sent.Time()) {
			t.Errorf("%s: archived %v, sent %v", sent.ID(), got, sent)
		}
	}
}

func TestCloudEventsSDK_StructuredBatch(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_sdkb", "free", nil)
	events := []cloudevents.Event{
		sdkEvent(t, "sdk-batch-1", "", map[string]any{"n": 1}),
		sdkEvent(t, "sdk-batch-2", "café ☕", map[string]any{"n": 2}),
	}
	req, err := cehttp.NewHTTPRequestFromEvents(context.Background(), h.Server.URL+"/v1/events/batch", events)
	if err != nil {
		t.Fatal(err)
	}
	if !cehttp.IsHTTPBatch(req.Header) {
		t.Fatalf("the SDK did not send a batch: %v", req.Header)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := h.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("batch: %d", resp.StatusCode)
	}
	h.Drain(t, 0)
	for _, sent := range events {
		storedEvent(t, h, "acct_sdkb", sent.ID(), nil)
		if got := archived(t, h, "acct_sdkb", sent.ID()); got.Subject() != sent.Subject() || string(got.Data()) != string(sent.Data()) {
			t.Errorf("%s: archived %v", sent.ID(), got)
		}
	}
}
