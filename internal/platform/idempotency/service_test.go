package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/devkit/testclock"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is a Service over a fresh idempotency table with a settable clock.
type fixture struct {
	svc   *idempotency.Service
	store *idempotency.Table
	clock *testclock.Clock
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	env := testenv.New(t)
	clock := testclock.New(time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC))
	store := &idempotency.Table{DB: env.Clients.DynamoDB, Table: env.Names.Table(resources.TableIdempotency)}
	return fixture{svc: &idempotency.Service{Store: store, Now: clock.Now}, store: store, clock: clock}
}

func request(key, fingerprint string) idempotency.Request {
	// The event routes keep their answers EventRetention (their entry in the route table).
	return idempotency.Request{Scope: "account:acct_1", Route: "POST /v1/events", Key: key, Fingerprint: fingerprint, Retention: idempotency.EventRetention}
}

var created = idempotency.Response{
	Status: 201,
	Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/things/1"},
	Body:   []byte("{\"id\":\"1\",\"secret\":\"s3cr3t\"}\n"),
}

func begin(t *testing.T, f fixture, req idempotency.Request) (idempotency.Outcome, error) {
	t.Helper()
	return f.svc.Begin(context.Background(), req)
}

func mustRun(t *testing.T, f fixture, req idempotency.Request) *idempotency.Claim {
	t.Helper()
	out, err := begin(t, f, req)
	if err != nil || out.Decision != idempotency.Run || out.Claim == nil {
		t.Fatalf("Begin = %v, %v; want run", out.Decision, err)
	}
	return out.Claim
}

func mustFinish(t *testing.T, f fixture, c *idempotency.Claim, resp idempotency.Response) bool {
	t.Helper()
	stored, err := f.svc.Finish(context.Background(), c, resp)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return stored
}

func TestService_FirstRunsRepeatReplaysTheStoredAnswer(t *testing.T) {
	f := newFixture(t)
	req := request("k1", "fp")
	c := mustRun(t, f, req)
	if !mustFinish(t, f, c, created) {
		t.Fatal("a 201 was not stored")
	}
	f.clock.Advance(time.Hour)
	out, err := begin(t, f, req)
	if err != nil || out.Decision != idempotency.Replay {
		t.Fatalf("repeat: %v, %v", out.Decision, err)
	}
	if out.Response.Status != created.Status || !bytes.Equal(out.Response.Body, created.Body) ||
		out.Response.Header["Location"] != "/v1/things/1" || out.Response.Header["Content-Type"] != "application/json" {
		t.Errorf("replayed %+v", out.Response)
	}
}

func TestService_RepeatWhileInFlight_Waits_ThenReplays(t *testing.T) {
	f := newFixture(t)
	req := request("k1", "fp")
	c := mustRun(t, f, req)
	f.clock.Advance(idempotency.Lease - time.Millisecond)
	if _, err := begin(t, f, req); !errors.Is(err, idempotency.ErrInFlight) {
		t.Fatalf("repeat in flight: %v", err)
	}
	mustFinish(t, f, c, created)
	if out, err := begin(t, f, req); err != nil || out.Decision != idempotency.Replay {
		t.Fatalf("repeat after completion: %v, %v", out.Decision, err)
	}
}

func TestService_SameKeyAnotherRequest_RefusedInFlightAndAfterCompletion(t *testing.T) {
	f := newFixture(t)
	c := mustRun(t, f, request("k1", "fp"))
	if _, err := begin(t, f, request("k1", "other")); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("in flight: %v", err)
	}
	mustFinish(t, f, c, created)
	if _, err := begin(t, f, request("k1", "other")); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("completed: %v", err)
	}
	// Another key, another caller or another route is another record.
	mustRun(t, f, request("k2", "other"))
	mustRun(t, f, idempotency.Request{Scope: "account:acct_2", Route: "POST /v1/events", Key: "k1", Fingerprint: "other"})
	mustRun(t, f, idempotency.Request{Scope: "account:acct_1", Route: "POST /v1/events/batch", Key: "k1", Fingerprint: "other"})
}

func TestService_ServerErrorReleasesTheKey_RetryRuns(t *testing.T) {
	for _, status := range []int{500, 503, 429} {
		f := newFixture(t)
		req := request("k1", "fp")
		c := mustRun(t, f, req)
		if mustFinish(t, f, c, idempotency.Response{Status: status, Body: []byte(`{}`)}) {
			t.Errorf("%d was stored", status)
		}
		c2 := mustRun(t, f, req)
		mustFinish(t, f, c2, created)
	}
}

func TestService_ClientErrorIsStoredAndReplayed(t *testing.T) {
	f := newFixture(t)
	req := request("k1", "fp")
	refused := idempotency.Response{Status: 402, Header: map[string]string{"Content-Type": "application/problem+json"}, Body: []byte(`{"status":402}`)}
	mustFinish(t, f, mustRun(t, f, req), refused)
	out, err := begin(t, f, req)
	if err != nil || out.Decision != idempotency.Replay || out.Response.Status != 402 || !bytes.Equal(out.Response.Body, refused.Body) {
		t.Fatalf("repeat: %v %+v %v", out.Decision, out.Response, err)
	}
}

// The owner of a claim died: repeats wait until its lease ends, then one takes it over, and the
// old owner (had it only been slow) can no longer complete or release the claim.
func TestService_CrashedClaim_TakenOverAfterTheLease_OldOwnerLockedOut(t *testing.T) {
	f := newFixture(t)
	req := request("k1", "fp")
	dead := mustRun(t, f, req)
	f.clock.Advance(idempotency.Lease - time.Second)
	if _, err := begin(t, f, req); !errors.Is(err, idempotency.ErrInFlight) {
		t.Fatalf("within the lease: %v", err)
	}
	f.clock.Advance(time.Second)
	heir := mustRun(t, f, req)
	if _, err := f.svc.Finish(context.Background(), dead, created); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Errorf("the old owner completed: %v", err)
	}
	if _, err := f.svc.Finish(context.Background(), dead, idempotency.Response{Status: 500}); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Errorf("the old owner released: %v", err)
	}
	mustFinish(t, f, heir, created)
	if out, err := begin(t, f, req); err != nil || out.Decision != idempotency.Replay {
		t.Fatalf("after the takeover: %v, %v", out.Decision, err)
	}
}

func TestService_RetentionOver_KeyIsFreeAgain(t *testing.T) {
	f := newFixture(t)
	req := idempotency.Request{Scope: "operator", Route: "POST /v1/accounts", Key: "k1", Fingerprint: "fp"}
	mustFinish(t, f, mustRun(t, f, req), created)
	f.clock.Advance(idempotency.DefaultRetention - time.Second)
	if out, _ := begin(t, f, req); out.Decision != idempotency.Replay {
		t.Fatalf("within retention: %v", out.Decision)
	}
	f.clock.Advance(time.Second)
	// Past retention the record is gone for everyone, even a different request (DynamoDB's TTL
	// deletes it lazily; until then it reads as absent).
	mustRun(t, f, idempotency.Request{Scope: "operator", Route: "POST /v1/accounts", Key: "k1", Fingerprint: "another"})
}

func TestService_RetentionFollowsTheRoute(t *testing.T) {
	f := newFixture(t)
	req := request("k1", "fp") // POST /v1/events: EventRetention
	mustFinish(t, f, mustRun(t, f, req), created)
	f.clock.Advance(idempotency.EventRetention - time.Second)
	if out, _ := begin(t, f, req); out.Decision != idempotency.Replay {
		t.Fatalf("within the event retention: %v", out.Decision)
	}
	rec, err := f.store.Get(context.Background(), idempotency.RecordID(req.Scope, req.Route, req.Key))
	if err != nil {
		t.Fatal(err)
	}
	if want := f.clock.Now().Add(time.Second).Unix(); rec.ExpiresAt != want {
		t.Errorf("expiresAt %d, want %d", rec.ExpiresAt, want)
	}
}

// Many requests with one key at the same moment: exactly one runs.
func TestService_ConcurrentClaims_ExactlyOneRuns(t *testing.T) {
	f := newFixture(t)
	const racers = 16
	decisions := race(t, racers, func() (idempotency.Outcome, error) { return begin(t, f, request("k1", "fp")) })
	if decisions[idempotency.Run] != 1 || decisions[idempotency.Wait] != racers-1 {
		t.Errorf("decisions %v; want 1 run and %d waits", decisions, racers-1)
	}
}

// Many repeats finding one expired claim at the same moment: exactly one takes it over.
func TestService_ConcurrentTakeovers_ExactlyOneRuns(t *testing.T) {
	f := newFixture(t)
	mustRun(t, f, request("k1", "fp"))
	f.clock.Advance(idempotency.Lease)
	const racers = 16
	decisions := race(t, racers, func() (idempotency.Outcome, error) { return begin(t, f, request("k1", "fp")) })
	if decisions[idempotency.Run] != 1 || decisions[idempotency.Wait] != racers-1 {
		t.Errorf("decisions %v; want 1 run and %d waits", decisions, racers-1)
	}
}

func race(t *testing.T, n int, begin func() (idempotency.Outcome, error)) map[idempotency.Decision]int {
	t.Helper()
	var mu sync.Mutex
	decisions := map[idempotency.Decision]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := begin()
			if err != nil && !errors.Is(err, idempotency.ErrInFlight) {
				t.Errorf("Begin: %v", err)
				return
			}
			mu.Lock()
			decisions[out.Decision]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return decisions
}

// The table alone reveals neither the client's key nor the answer: an account's creation answer
// carries its API key, which Ferry otherwise stores only as a hash.
func TestTable_HoldsNeitherTheKeyNorAReadableAnswer(t *testing.T) {
	f := newFixture(t)
	key := "0f1e2d3c-client-key"
	req := idempotency.Request{Scope: "operator", Route: "POST /v1/accounts", Key: key, Fingerprint: "fp"}
	mustFinish(t, f, mustRun(t, f, req), created)
	out, err := f.store.DB.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(f.store.Table)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 1 {
		t.Fatalf("%d items", len(out.Items))
	}
	for name, v := range out.Items[0] {
		var raw []byte
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			raw = []byte(v.Value)
		case *types.AttributeValueMemberB:
			raw = v.Value
		}
		if bytes.Contains(raw, []byte(key)) || bytes.Contains(raw, []byte("s3cr3t")) {
			t.Errorf("attribute %s holds the key or the answer in the clear", name)
		}
	}
}
