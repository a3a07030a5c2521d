package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

const (
	keyHeader      = httpapi.HeaderIdempotencyKey
	replayedHeader = httpapi.HeaderIdempotentReplayed
	problemPrefix  = "tag:ferrymeter.dev,2026:problem:"
)

func cloudEvent(id string) map[string]any {
	return map[string]any{"specversion": "1.0", "id": id, "source": "/tests", "type": "api.call", "data": map[string]any{"n": 1}}
}

func replayed(r apptest.Response) bool { return r.Header.Get(replayedHeader) == "true" }

func problemType(t *testing.T, r apptest.Response) string {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != httpapi.ProblemContentType {
		t.Fatalf("%d answer has Content-Type %q, not a problem: %s", r.Status, ct, r.Body)
	}
	typ, _ := r.JSON(t)["type"].(string)
	return strings.TrimPrefix(typ, problemPrefix)
}

// maxQueueReceives bounds the receive loop of queued.
const maxQueueReceives = 50

// queued counts the events on the events queue (the events of distinct SQS messages: the batch
// route packs several to a message) and leaves the messages visible again for the worker.
func queued(t testing.TB, h *apptest.Harness) int {
	t.Helper()
	ctx := context.Background()
	url := h.Env.Names.QueueURL(resources.QueueEvents)
	handles := map[string]string{}
	events := 0
	for range maxQueueReceives {
		out, err := h.Env.Clients.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60,
		})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			if _, seen := handles[aws.ToString(m.MessageId)]; !seen {
				msg, err := event.DecodeMessage(aws.ToString(m.Body))
				if err != nil {
					t.Fatalf("a queued message does not decode: %v", err)
				}
				events += len(msg.Envelopes)
			}
			handles[aws.ToString(m.MessageId)] = aws.ToString(m.ReceiptHandle)
		}
	}
	for _, handle := range handles {
		if _, err := h.Env.Clients.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: aws.String(handle), VisibilityTimeout: 0,
		}); err != nil {
			t.Fatalf("release message: %v", err)
		}
	}
	return events
}

// records counts the idempotency table's items.
func records(t *testing.T, h *apptest.Harness) int {
	t.Helper()
	out, err := h.Env.Clients.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{
		TableName: aws.String(h.Env.Names.Table(resources.TableIdempotency)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Items)
}

func sameAnswer(t *testing.T, first, repeat apptest.Response) {
	t.Helper()
	if repeat.Status != first.Status || !bytes.Equal(repeat.Body, first.Body) {
		t.Errorf("replay differs:\nfirst  %d %s\nrepeat %d %s", first.Status, first.Body, repeat.Status, repeat.Body)
	}
	for _, k := range []string{"Content-Type", "Location"} {
		if repeat.Header.Get(k) != first.Header.Get(k) {
			t.Errorf("replayed %s %q, first %q", k, repeat.Header.Get(k), first.Header.Get(k))
		}
	}
	if !replayed(repeat) {
		t.Errorf("the repeat has no %s: true", replayedHeader)
	}
	if replayed(first) {
		t.Errorf("the first answer says it is replayed")
	}
}

func TestIdempotency_CreateAccount_RepeatReplaysByteForByte_WithTheSameAPIKey(t *testing.T) {
	h := apptest.New(t)
	body := map[string]any{"id": "acct_1", "plan": "free"}
	first := h.Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, body, keyHeader, "create-acct_1")
	if first.Status != http.StatusCreated || first.Header.Get("Location") != "/v1/accounts/acct_1" {
		t.Fatalf("create: %d %v %s", first.Status, first.Header, first.Body)
	}
	h.Clock.Advance(time.Hour)
	repeat := h.Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, body, keyHeader, "create-acct_1")
	sameAnswer(t, first, repeat)
	// The replayed key is the one that works.
	apiKey := repeat.JSON(t)["apiKey"].(string)
	if r := h.Do(t, http.MethodGet, "/v1/usage", apiKey, nil); r.Status != http.StatusOK {
		t.Errorf("the replayed API key does not authenticate: %d", r.Status)
	}
	// Without the key, the handler's own answer for a second creation stands.
	if r := h.Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, body); r.Status != http.StatusConflict || problemType(t, r) != "conflict" {
		t.Errorf("unkeyed repeat: %d %s", r.Status, r.Body)
	}
}

func TestIdempotency_PostEvent_RepeatRunsNothing(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", nil)
	first := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1")
	if first.Status != http.StatusAccepted {
		t.Fatalf("post: %d %s", first.Status, first.Body)
	}
	for range 3 {
		sameAnswer(t, first, h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1"))
	}
	if n := queued(t, h); n != 1 {
		t.Errorf("%d events queued, want 1", n)
	}
}

// In binary mode the event is in the headers: two events with the same data but other ce-*
// attributes (or another Content-Type, the datacontenttype) are different requests, so the
// second under the same Idempotency-Key is a 422, never the first one's answer replayed while
// the second event is dropped. A repeat of the same headers replays.
func TestIdempotency_BinaryEvent_OtherAttributesUnderTheSameKeyAre422(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", nil)
	binary := func(id, contentType string) apptest.Response {
		return h.Do(t, http.MethodPost, "/v1/events", key, `{"n":1}`, keyHeader, "k1",
			"Content-Type", contentType, "ce-specversion", "1.0", "ce-id", id, "ce-source", "/s", "ce-type", "t")
	}
	first := binary("evt_1", "application/json")
	if first.Status != http.StatusAccepted {
		t.Fatalf("post: %d %s", first.Status, first.Body)
	}
	sameAnswer(t, first, binary("evt_1", "application/json"))
	for _, other := range []apptest.Response{binary("evt_2", "application/json"), binary("evt_1", "application/vnd.x+json")} {
		if other.Status != http.StatusUnprocessableEntity {
			t.Errorf("other attributes under the same key: %d %s, want 422", other.Status, other.Body)
		}
	}
	if n := queued(t, h); n != 1 {
		t.Errorf("%d events queued, want 1", n)
	}
}

func TestIdempotency_WithoutTheHeader_RequestsRunAsBefore(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", nil)
	for range 2 {
		r := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"))
		if r.Status != http.StatusAccepted || replayed(r) {
			t.Fatalf("post: %d %v %s", r.Status, r.Header, r.Body)
		}
	}
	if n := queued(t, h); n != 2 {
		t.Errorf("%d events queued, want 2", n)
	}
	if n := records(t, h); n != 0 {
		t.Errorf("%d idempotency records for unkeyed requests", n)
	}
}

func TestIdempotency_InvalidKey_400AndNothingRuns(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", nil)
	for name, k := range map[string]string{
		"empty":     "",
		"too long":  strings.Repeat("k", idempotency.MaxKeyLength+1),
		"non-ASCII": "clé",
	} {
		r := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, k)
		if r.Status != http.StatusBadRequest || problemType(t, r) != "invalid-request" {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}
	if n := queued(t, h); n != 0 {
		t.Errorf("%d events queued for refused keys", n)
	}
	longest := strings.Repeat("k", idempotency.MaxKeyLength)
	if r := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, longest); r.Status != http.StatusAccepted {
		t.Errorf("a %d-character key: %d %s", idempotency.MaxKeyLength, r.Status, r.Body)
	}
}

func TestIdempotency_Unauthenticated_NeverReachesTheStore(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", nil)
	for _, bearer := range []string{"", "fk_not-a-real-key"} {
		r := h.Do(t, http.MethodPost, "/v1/events", bearer, cloudEvent("evt_1"), keyHeader, "k1")
		if r.Status != http.StatusUnauthorized || replayed(r) {
			t.Errorf("bearer %q: %d %s", bearer, r.Status, r.Body)
		}
	}
	if r := h.Do(t, http.MethodPost, "/v1/accounts", key, map[string]any{"id": "acct_2"}, keyHeader, "k1"); r.Status != http.StatusUnauthorized {
		t.Errorf("account key on an operator route: %d %s", r.Status, r.Body)
	}
	if n := records(t, h); n != 0 {
		t.Fatalf("%d idempotency records after unauthenticated requests", n)
	}
	if r := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1"); r.Status != http.StatusAccepted || replayed(r) {
		t.Errorf("the authenticated request: %d %v %s", r.Status, r.Header, r.Body)
	}
}

func TestIdempotency_SameKeyAnotherRequest_422AndNothingRuns(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", nil)
	if r := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1"); r.Status != http.StatusAccepted {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	r := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_2"), keyHeader, "k1")
	if r.Status != http.StatusUnprocessableEntity || problemType(t, r) != "idempotency-key-reused" {
		t.Errorf("another body: %d %s", r.Status, r.Body)
	}
	// The same document re-serialised (members reordered, whitespace) is the same request.
	reordered := `{ "type": "api.call", "source": "/tests", "id": "evt_1", "specversion": "1.0", "data": {"n": 1} }`
	if r := h.Do(t, http.MethodPost, "/v1/events", key, reordered, keyHeader, "k1"); r.Status != http.StatusAccepted || !replayed(r) {
		t.Errorf("re-serialised body: %d %v %s", r.Status, r.Header, r.Body)
	}
	if n := queued(t, h); n != 1 {
		t.Errorf("%d events queued, want 1", n)
	}
}

// The key is scoped by route: PATCH /v1/accounts/{id} with one key on two accounts is a
// different request (422), and one key on two routes is two records.
func TestIdempotency_ScopedByRouteTemplate_PathIsPartOfTheRequest(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_1", "free", nil)
	h.CreateAccount(t, "acct_2", "free", nil)
	patch := map[string]any{"status": "inactive"}
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_1", apptest.AdminKey, patch, keyHeader, "k1"); r.Status != http.StatusOK {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_2", apptest.AdminKey, patch, keyHeader, "k1"); r.Status != http.StatusUnprocessableEntity {
		t.Errorf("same key, another account: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, map[string]any{"id": "acct_3"}, keyHeader, "k1"); r.Status != http.StatusCreated || replayed(r) {
		t.Errorf("same key, another route: %d %s", r.Status, r.Body)
	}
}

func TestIdempotency_KeyOfAnotherAccount_IsIndependent(t *testing.T) {
	h := apptest.New(t)
	key1 := h.CreateAccount(t, "acct_1", "free", nil)
	key2 := h.CreateAccount(t, "acct_2", "free", nil)
	for _, k := range []string{key1, key2} {
		r := h.Do(t, http.MethodPost, "/v1/events", k, cloudEvent("evt_1"), keyHeader, "shared-key")
		if r.Status != http.StatusAccepted || replayed(r) {
			t.Errorf("post: %d %v %s", r.Status, r.Header, r.Body)
		}
	}
	if n := queued(t, h); n != 2 {
		t.Errorf("%d events queued, want 2 (one per account)", n)
	}
}

// A 4xx is the request's answer: it is stored and replayed, even once the account could take the
// event; a new key asks again.
func TestIdempotency_ClientErrorsAreStoredAndReplayed(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", map[string]any{"events": 0})
	refused := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1")
	if refused.Status != http.StatusPaymentRequired || problemType(t, refused) != "limit-reached" {
		t.Fatalf("post at the limit: %d %s", refused.Status, refused.Body)
	}
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_1", apptest.AdminKey, map[string]any{"limits": map[string]any{"events": 10}}); r.Status != http.StatusOK {
		t.Fatalf("raise the limit: %d %s", r.Status, r.Body)
	}
	sameAnswer(t, refused, h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1"))
	if r := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k2"); r.Status != http.StatusAccepted {
		t.Errorf("new key: %d %s", r.Status, r.Body)
	}

	invalid := h.Do(t, http.MethodPost, "/v1/events", key, `{"specversion":"1.0"}`, keyHeader, "k3")
	if invalid.Status != http.StatusBadRequest {
		t.Fatalf("invalid event: %d %s", invalid.Status, invalid.Body)
	}
	sameAnswer(t, invalid, h.Do(t, http.MethodPost, "/v1/events", key, `{"specversion":"1.0"}`, keyHeader, "k3"))
}

// flakyQueue fails its first sends, as SQS does when it is briefly unavailable.
type flakyQueue struct {
	ingest.Queue
	failures atomic.Int32
}

func (q *flakyQueue) Send(ctx context.Context, env event.Envelope) error {
	if q.failures.Add(-1) >= 0 {
		return fmt.Errorf("%w: briefly unavailable", ingest.ErrQueueUnavailable)
	}
	return q.Queue.Send(ctx, env)
}

// A 5xx means the work did not happen: the key is released and the retry runs.
func TestIdempotency_ServerError_ReleasesTheKey_RetryRuns(t *testing.T) {
	h := apptest.New(t, apptest.Options{Configure: func(h *apptest.Harness) {
		ingest := h.Ingest().Ingest
		q := &flakyQueue{Queue: ingest.Queue}
		q.failures.Store(1)
		ingest.Queue = q
	}})
	key := h.CreateAccount(t, "acct_1", "free", nil)
	failed := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1")
	if failed.Status != http.StatusServiceUnavailable || failed.Header.Get("Retry-After") == "" {
		t.Fatalf("queue down: %d %v %s", failed.Status, failed.Header, failed.Body)
	}
	retry := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1")
	if retry.Status != http.StatusAccepted || replayed(retry) {
		t.Fatalf("retry: %d %v %s", retry.Status, retry.Header, retry.Body)
	}
	sameAnswer(t, retry, h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1"))
	if n := queued(t, h); n != 1 {
		t.Errorf("%d events queued, want 1", n)
	}
}

// blockFirst holds the first request of a route inside the handler until release is closed.
func blockFirst(method, path string, started, release chan struct{}) func(h *apptest.Harness) {
	return func(h *apptest.Harness) {
		var once sync.Once
		for _, fn := range h.Functions {
			if fn.HTTP == nil {
				continue
			}
			fn.HTTP.(*httpapi.Server).Use(func(route resources.Route, next httpapi.HandlerFunc) httpapi.HandlerFunc {
				if route.Method != method || route.Path != path {
					return next
				}
				return func(w http.ResponseWriter, r *http.Request) error {
					first := false
					once.Do(func() { first = true; close(started) })
					if first {
						<-release
					}
					return next(w, r)
				}
			})
		}
	}
}

func TestIdempotency_RepeatWhileTheFirstRuns_409RetryAfter_ThenReplay(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	h := apptest.New(t, apptest.Options{Configure: blockFirst(http.MethodPost, "/v1/events", started, release)})
	key := h.CreateAccount(t, "acct_1", "free", nil)
	var first apptest.Response
	done := make(chan struct{})
	go func() {
		defer close(done)
		first = h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1")
	}()
	<-started
	busy := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1")
	if busy.Status != http.StatusConflict || problemType(t, busy) != "idempotency-in-flight" || busy.Header.Get("Retry-After") != "1" {
		t.Errorf("repeat in flight: %d %v %s", busy.Status, busy.Header, busy.Body)
	}
	if r := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_2"), keyHeader, "k1"); r.Status != http.StatusUnprocessableEntity {
		t.Errorf("another request in flight: %d %s", r.Status, r.Body)
	}
	close(release)
	<-done
	if first.Status != http.StatusAccepted {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	sameAnswer(t, first, h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1"))
	if n := queued(t, h); n != 1 {
		t.Errorf("%d events queued, want 1", n)
	}
}

// racers is how many identical requests are sent at the same moment.
const racers = 8

// raceRequests sends n identical requests at once and returns the answers.
func raceRequests(t *testing.T, n int, send func() apptest.Response) []apptest.Response {
	t.Helper()
	answers := make([]apptest.Response, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = send()
		}()
	}
	close(start)
	wg.Wait()
	return answers
}

// Identical requests at the same moment: one runs, each other one is told to retry (409) or gets
// the stored answer; never a second effect.
func TestIdempotency_IdenticalRequestsAtOnce_ExactlyOneEffect(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", nil)

	check := func(name string, answers []apptest.Response, success int) apptest.Response {
		t.Helper()
		var ran []apptest.Response
		for _, r := range answers {
			switch {
			case r.Status == success && !replayed(r):
				ran = append(ran, r)
			case r.Status == success && replayed(r):
			case r.Status == http.StatusConflict && problemType(t, r) == "idempotency-in-flight":
			default:
				t.Errorf("%s: unexpected answer %d %s", name, r.Status, r.Body)
			}
		}
		if len(ran) != 1 {
			t.Fatalf("%s: %d requests ran, want 1", name, len(ran))
		}
		for _, r := range answers {
			if replayed(r) && !bytes.Equal(r.Body, ran[0].Body) {
				t.Errorf("%s: a replay differs from the answer: %s vs %s", name, r.Body, ran[0].Body)
			}
		}
		return ran[0]
	}

	check("events", raceRequests(t, racers, func() apptest.Response {
		return h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1")
	}), http.StatusAccepted)
	if n := queued(t, h); n != 1 {
		t.Errorf("%d events queued, want 1", n)
	}

	created := check("accounts", raceRequests(t, racers, func() apptest.Response {
		return h.Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, map[string]any{"id": "acct_2"}, keyHeader, "k1")
	}), http.StatusCreated)
	apiKey := created.JSON(t)["apiKey"].(string)
	if r := h.Do(t, http.MethodGet, "/v1/usage", apiKey, nil); r.Status != http.StatusOK {
		t.Errorf("the created account's key: %d", r.Status)
	}
}

// crashAfterClaim lets the first write (the claim) commit and then kills the process: every later
// write fails before it reaches DynamoDB.
func crashAfterClaim(op string, _, write int) instrument.Fault {
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem":
		if write == 1 {
			return instrument.CrashAfter
		}
		return instrument.CrashBefore
	}
	return instrument.NoFault
}

// The process dies right after claiming the key. Repeats wait for the lease, then one takes the
// claim over and runs the request, once.
func TestIdempotency_CrashBetweenClaimAndCompletion_TakenOverAfterTheLease(t *testing.T) {
	faults := instrument.NewFaults(nil)
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	key := h.CreateAccount(t, "acct_1", "free", nil)

	faults.SetPlan(crashAfterClaim)
	h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1") // its answer is lost with the process
	if fired := faults.Fired(); len(fired) == 0 || !strings.HasPrefix(fired[0], "CrashAfter PutItem") {
		t.Fatalf("faults fired: %v", fired)
	}
	faults.SetPlan(nil) // a new process

	h.Clock.Advance(idempotency.Lease - time.Second)
	busy := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1")
	if busy.Status != http.StatusConflict || busy.Header.Get("Retry-After") == "" {
		t.Fatalf("within the lease: %d %v %s", busy.Status, busy.Header, busy.Body)
	}
	if n := queued(t, h); n != 0 {
		t.Fatalf("%d events queued before the takeover", n)
	}
	h.Clock.Advance(time.Second)
	ran := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1")
	if ran.Status != http.StatusAccepted || replayed(ran) {
		t.Fatalf("after the lease: %d %v %s", ran.Status, ran.Header, ran.Body)
	}
	sameAnswer(t, ran, h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1"))
	if n := queued(t, h); n != 1 {
		t.Errorf("%d events queued, want 1", n)
	}
}

// The process dies after the effect (the event is queued) but before the answer is stored. The
// takeover runs the request again; the event's own id makes the second run harmless, so the
// meter moves once.
func TestIdempotency_CrashAfterTheEffectBeforeTheRecord_RerunBillsOnce(t *testing.T) {
	faults := instrument.NewFaults(nil)
	h := apptest.New(t, apptest.Options{DynamoDB: []func(*dynamodb.Options){faults.Option}})
	key := h.CreateAccount(t, "acct_1", "free", nil)

	faults.SetPlan(func(op string, _, _ int) instrument.Fault {
		if op == "UpdateItem" { // completing the record
			return instrument.CrashBefore
		}
		return instrument.NoFault
	})
	h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1") // lost with the process
	faults.SetPlan(nil)

	if r := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1"); r.Status != http.StatusConflict {
		t.Fatalf("within the lease: %d %s", r.Status, r.Body)
	}
	h.Clock.Advance(idempotency.Lease)
	ran := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent("evt_1"), keyHeader, "k1")
	if ran.Status != http.StatusAccepted || replayed(ran) {
		t.Fatalf("takeover: %d %v %s", ran.Status, ran.Header, ran.Body)
	}
	if n := queued(t, h); n != 2 {
		t.Errorf("%d events queued, want 2 (the first run's and the takeover's)", n)
	}
	h.Drain(t, 0)
	u := h.Do(t, http.MethodGet, "/v1/usage?feature=events", key, nil).JSON(t)
	if u["used"] != float64(1) {
		t.Errorf("usage %v; want used 1", u)
	}
	if e := h.Do(t, http.MethodGet, "/v1/events/evt_1", key, nil).JSON(t); e["status"] != "INSERTED" {
		t.Errorf("event %v", e)
	}
}

func TestIdempotency_StoredAnswersSurviveARestart(t *testing.T) {
	h := apptest.New(t)
	body := map[string]any{"id": "acct_1", "plan": "plus"}
	first := h.Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, body, keyHeader, "k1")
	if first.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", first.Status, first.Body)
	}
	h.Server.Close()
	sameAnswer(t, first, h.Restart(t).Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, body, keyHeader, "k1"))
}

func TestIdempotency_AfterTheRetention_TheKeyRunsAgain(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_1", "free", nil)
	patch := map[string]any{"status": "inactive"}
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_1", apptest.AdminKey, patch, keyHeader, "k1"); r.Status != http.StatusOK {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	h.Clock.Advance(idempotency.DefaultRetention - time.Second)
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_1", apptest.AdminKey, patch, keyHeader, "k1"); !replayed(r) {
		t.Errorf("within the retention: %d %v", r.Status, r.Header)
	}
	h.Clock.Advance(time.Second)
	if r := h.Do(t, http.MethodPatch, "/v1/accounts/acct_1", apptest.AdminKey, patch, keyHeader, "k1"); r.Status != http.StatusOK || replayed(r) {
		t.Errorf("after the retention: %d %v", r.Status, r.Header)
	}
}

// A batch is one request under its key; its items are keyed by their own ids. A client that
// re-reads a grown buffer and resends it under the old key is refused instead of being told the
// old answer (which would silently drop the new items); under a new key, the items already
// accepted are collapsed by id downstream and bill once.
func TestIdempotency_Batch_GrownBatchUnderTheOldKeyRefused_ItemsBillOnce(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", nil)
	two := []any{cloudEvent("evt_1"), cloudEvent("evt_2")}
	three := []any{cloudEvent("evt_1"), cloudEvent("evt_2"), cloudEvent("evt_3")}
	if r := h.Do(t, http.MethodPost, "/v1/events/batch", key, two, keyHeader, "flush-1"); r.Status != http.StatusAccepted {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, http.MethodPost, "/v1/events/batch", key, three, keyHeader, "flush-1"); r.Status != http.StatusUnprocessableEntity {
		t.Errorf("grown batch under the old key: %d %s", r.Status, r.Body)
	}
	if n := queued(t, h); n != 2 {
		t.Fatalf("%d events queued, want 2", n)
	}
	if r := h.Do(t, http.MethodPost, "/v1/events/batch", key, three, keyHeader, "flush-2"); r.Status != http.StatusAccepted || replayed(r) {
		t.Fatalf("grown batch under a new key: %d %s", r.Status, r.Body)
	}
	h.Drain(t, 0)
	if u := h.Do(t, http.MethodGet, "/v1/usage?feature=events", key, nil).JSON(t); u["used"] != float64(3) {
		t.Errorf("usage %v; want used 3", u)
	}
}

func TestIdempotency_Batch_DuplicateItemsCollapsed_ReplayIdentical(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", nil)
	batch := []any{cloudEvent("evt_1"), cloudEvent("evt_1"), cloudEvent("evt_2")}
	first := h.Do(t, http.MethodPost, "/v1/events/batch", key, batch, keyHeader, "flush-1")
	if first.Status != http.StatusAccepted {
		t.Fatalf("batch: %d %s", first.Status, first.Body)
	}
	results := first.JSON(t)["results"].([]any)
	var statuses []string
	for _, r := range results {
		statuses = append(statuses, r.(map[string]any)["status"].(string))
	}
	if fmt.Sprint(statuses) != "[queued duplicate queued]" {
		t.Errorf("statuses %v", statuses)
	}
	sameAnswer(t, first, h.Do(t, http.MethodPost, "/v1/events/batch", key, batch, keyHeader, "flush-1"))
	if n := queued(t, h); n != 2 {
		t.Errorf("%d events queued, want 2", n)
	}
}

// pathWith fills a route's {params} with value.
func pathWith(path, value string) string {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			seg = value
		}
		out = append(out, seg)
	}
	return strings.Join(out, "/")
}

// Every mutating route, including routes added later, answers a keyed repeat with a replay: a
// route that bypassed the middleware would run twice and say nothing. Safe routes ignore the key.
// Any stored answer will do, so each route gets an empty JSON object: most answer 400, which is
// stored like any 4xx.
func TestIdempotency_EveryMutatingRouteGoesThroughTheMiddleware(t *testing.T) {
	h := apptest.New(t)
	accountKey := h.CreateAccount(t, "acct_1", "free", nil)
	registered := map[string]bool{}
	for _, k := range h.Served() {
		registered[k] = true
	}
	for i, route := range resources.Routes {
		name := route.Method + " " + route.Path
		t.Run(name, func(t *testing.T) {
			if !registered[name] {
				t.Fatalf("%s is in the route table but no function serves it", name)
			}
			path := pathWith(route.Path, "acct_1")
			var body any
			if route.Method != http.MethodGet {
				body = map[string]any{}
			}
			k := fmt.Sprintf("coverage-%d", i)
			bearer := accountKey
			first := h.Do(t, route.Method, path, bearer, body, keyHeader, k)
			if first.Status == http.StatusUnauthorized {
				bearer = apptest.AdminKey
				first = h.Do(t, route.Method, path, bearer, body, keyHeader, k)
			}
			// A webhook route takes no bearer key: its 401 is the provider signature missing,
			// which is its answer to an empty object (and it is not a mutating route).
			signed := first.Status == http.StatusUnauthorized && strings.Contains(string(first.Body), "problem:invalid-signature")
			if first.Status >= 500 || (first.Status == http.StatusUnauthorized && !signed) {
				t.Fatalf("first: %d %s", first.Status, first.Body)
			}
			repeat := h.Do(t, route.Method, path, bearer, body, keyHeader, k)
			if !route.Mutating() {
				if replayed(repeat) {
					t.Errorf("a safe route replayed an answer")
				}
				return
			}
			sameAnswer(t, first, repeat)
		})
	}
}
