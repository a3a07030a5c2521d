package holds_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// maxBusyRetries bounds how often a test client repeats a request answered 503 (the budget row
// stayed contended). Repeating with the same key is what the API asks clients to do; on the
// emulator, whose transactions never conflict, it never happens.
const maxBusyRetries = 5

// do sends a request and, like a well-behaved client, repeats it with the same keys on a 503.
func do(t *testing.T, h *apptest.Harness, method, path, key string, body any) apptest.Response {
	t.Helper()
	var r apptest.Response
	for range maxBusyRetries {
		r = h.Do(t, method, path, key, body)
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
			return r
		}
		time.Sleep(time.Second)
	}
	return r
}

func reserve(t *testing.T, h *apptest.Harness, apiKey, job string, amount int64) apptest.Response {
	t.Helper()
	return do(t, h, http.MethodPost, "/v1/holds", apiKey, map[string]any{"key": job, "feature": "tokens", "amount": amount})
}

func charge(t *testing.T, h *apptest.Harness, apiKey, holdID, step string, amount int64) apptest.Response {
	t.Helper()
	return do(t, h, http.MethodPost, "/v1/holds/"+holdID+"/charges", apiKey, map[string]any{"key": step, "amount": amount})
}

func settleHold(t *testing.T, h *apptest.Harness, apiKey, holdID string, body any) apptest.Response {
	t.Helper()
	return do(t, h, http.MethodPost, "/v1/holds/"+holdID+"/settle", apiKey, body)
}

// mustStatus fails the test unless r has the status, and returns its JSON body.
func mustStatus(t *testing.T, r apptest.Response, status int) map[string]any {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	return r.JSON(t)
}

// num reads a JSON number as an integer.
func num(t *testing.T, m map[string]any, field string) int64 {
	t.Helper()
	v, ok := m[field].(float64)
	if !ok {
		t.Fatalf("%s = %v (%T), want a number in %v", field, m[field], m[field], m)
	}
	return int64(v)
}

// usageOf is GET /v1/usage?feature=tokens.
func usageOf(t *testing.T, h *apptest.Harness, apiKey string) (used, held int64) {
	t.Helper()
	u := mustStatus(t, h.Do(t, http.MethodGet, "/v1/usage?feature=tokens", apiKey, nil), http.StatusOK)
	return num(t, u, "used"), num(t, u, "held")
}

func wantUsage(t *testing.T, h *apptest.Harness, apiKey string, used, held int64) {
	t.Helper()
	gotUsed, gotHeld := usageOf(t, h, apiKey)
	if gotUsed != used || gotHeld != held {
		t.Errorf("usage: used %d held %d, want used %d held %d", gotUsed, gotHeld, used, held)
	}
}

// race starts n calls of f at the same moment and waits for them all.
func race(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// sweep runs the sweeper until it has expired want holds in total. The lease index is eventually
// consistent on real DynamoDB, so a hold can reach it a moment after its write; the emulator's
// index is immediate and the first run does it all.
func sweep(t *testing.T, h *apptest.Harness, want int) holds.SweepResult {
	t.Helper()
	const maxRuns = 20
	var total holds.SweepResult
	for run := range maxRuns {
		res, err := h.Sweeper().Holds.Sweep(context.Background())
		if err != nil {
			t.Fatalf("sweep: %v", err)
		}
		total.Found += res.Found
		total.Expired += res.Expired
		total.Skipped += res.Skipped
		total.Truncated = total.Truncated || res.Truncated
		if total.Expired >= want {
			break
		}
		if run < maxRuns-1 {
			time.Sleep(250 * time.Millisecond)
		}
	}
	if total.Expired != want {
		t.Fatalf("sweeper expired %d holds, want %d (%+v)", total.Expired, want, total)
	}
	return total
}

// lapsedIDs lists the holds the lease index shows as lapsed at the harness clock's time.
func lapsedIDs(t *testing.T, h *apptest.Harness) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for shard := range resources.HoldsLeaseShards {
		refs, err := h.Sweeper().Holds.Store.LapsedLeases(context.Background(), shard, h.Clock.Now().UnixMilli(), 100, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			ids[r.HoldID] = true
		}
	}
	return ids
}

// waitForIndex waits until the lease index lists exactly the lapsed holds want says. The index
// is eventually consistent on real DynamoDB; the emulator's is immediate.
func waitForIndex(t *testing.T, h *apptest.Harness, want func(ids map[string]bool) bool) {
	t.Helper()
	const maxReads = 40
	for range maxReads {
		if want(lapsedIDs(t, h)) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("the lease index never showed what was expected: %v", lapsedIDs(t, h))
}

// holdItems counts the items in the test's holds table (holds and steps). The table is the
// test's own and small, so a scan is fine here.
func holdItems(t *testing.T, h *apptest.Harness) int {
	t.Helper()
	out, err := h.Env.Clients.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{
		TableName: aws.String(h.Env.Names.Table(resources.TableHolds)), ConsistentRead: aws.Bool(true),
		Select: types.SelectCount,
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(out.Count)
}

func job(i int) string { return fmt.Sprintf("job-%03d", i) }
