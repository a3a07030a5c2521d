package drain_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mathrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/ferrymeter/ferry/internal/alerts/drain"
	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/alerts/send"
	"github.com/ferrymeter/ferry/internal/devkit/testclock"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// errCrash stands for the notifier dying at a hook point.
var errCrash = errors.New("killed here")

// Test secrets: fixed keys, so every run signs the same way.
var (
	secretA   = "whsec_" + base64.StdEncoding.EncodeToString([]byte("ferry-drain-key-a-0123456789abcd"))
	secretB   = "whsec_" + base64.StdEncoding.EncodeToString([]byte("ferry-drain-key-b-0123456789abcd"))
	secretOld = "whsec_" + base64.StdEncoding.EncodeToString([]byte("ferry-drain-key-old-123456789abc"))
)

// epID is the id of the test's endpoint name, spelled as endpoints mints ids.
func epID(name string) string {
	return endpoints.IDPrefix + strings.TrimPrefix(notify.IDOf("endpoint "+name), "ntf_")
}

// sorted is ids in order, as a notification records the endpoints it went to.
func sorted(ids ...string) []string { return slices.Sorted(slices.Values(ids)) }

// start is the test clock's first instant.
var start = time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)

// jitterSeed seeds the drainers' jitter, so a test can draw the same waits.
const jitterSeed1, jitterSeed2 = 7, 11

// rig is one test's notifier: fresh tables, a clock that moves only when moved, a receiver on
// 127.0.0.1, and a drainer with the notifier function's own clients (its IAM grant enforced).
type rig struct {
	env     *testenv.Env
	db      *dynamodb.Client
	clock   *testclock.Clock
	store   *drain.Store
	eps     *endpoints.Store
	sender  *send.Sender
	metrics *metrics.Counter
	rcv     *receiver
	d       *drain.Drainer
}

func newRig(t *testing.T) *rig {
	t.Helper()
	env := testenv.New(t)
	fn, ok := resources.FunctionByName(resources.FunctionNotifier)
	if !ok {
		t.Fatal("no notifier in resources.Functions")
	}
	return rigOn(t, env, env.ClientsFor(t, fn).DynamoDB)
}

// rigOn is a rig on env's tables whose notifiers use db (a guard test's client, the guard
// removed or not).
func rigOn(t *testing.T, env *testenv.Env, db *dynamodb.Client) *rig {
	t.Helper()
	r := &rig{
		env: env, db: db, clock: testclock.New(start),
		store: &drain.Store{DB: db, Table: env.Names.Table(resources.TableNotifications)},
		// The endpoints are read with the operator's client: endpoints.Store.All scans the table,
		// and no function's grant allows Scan (resources.TableReadActions). Until the endpoints
		// can be listed by Query, the notifier's own client would be refused here.
		eps:     &endpoints.Store{DB: env.Clients.DynamoDB, Table: env.Names.Table(resources.TableWebhookEndpoints)},
		sender:  send.New(send.Config{Policy: send.Policy{AllowLoopback: true}}),
		metrics: metrics.NewCounter(),
	}
	r.rcv = newReceiver(t, r.clock)
	r.d = r.drainer("notifier-one")
	return r
}

// drainer is a notifier on the rig's tables, as another Lambda instance would be.
func (r *rig) drainer(owner string) *drain.Drainer {
	return &drain.Drainer{
		Store: r.store, Endpoints: r.eps, Sender: r.sender, Metrics: r.metrics,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: r.clock.Now,
		Rand: mathrand.NewPCG(jitterSeed1, jitterSeed2), Owner: owner, Concurrency: 1,
	}
}

// endpoint registers an endpoint on the receiver at /<id>, signing with secrets (newest first; a
// secret after the first expires at the clock's instant plus an hour).
func (r *rig) endpoint(t *testing.T, id string, kinds, accounts []string, secrets ...string) endpoints.Endpoint {
	t.Helper()
	return r.endpointAt(t, endpoints.Endpoint{ID: id, URL: r.rcv.url(id), Kinds: kinds, Accounts: accounts}, secrets...)
}

func (r *rig) endpointAt(t *testing.T, ep endpoints.Endpoint, secrets ...string) endpoints.Endpoint {
	t.Helper()
	nowMs := r.clock.Now().UnixMilli()
	for i, s := range secrets {
		sec := endpoints.Secret{Value: s, CreatedAtMs: nowMs}
		if i > 0 {
			sec.ExpiresAtMs = nowMs + time.Hour.Milliseconds()
		}
		ep.Secrets = append(ep.Secrets, sec)
	}
	ep.CreatedAtMs, ep.UpdatedAtMs, ep.Rev = nowMs, nowMs, 1
	item, err := attributevalue.MarshalMap(ep)
	if err != nil {
		t.Fatal(err)
	}
	// The endpoints package writes its own items; the notifier only reads them, so the test
	// writes them as they are stored.
	if _, err := r.env.Clients.DynamoDB.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(r.env.Names.Table(resources.TableWebhookEndpoints)), Item: item,
	}); err != nil {
		t.Fatal(err)
	}
	r.rcv.hold(ep.ID, secrets...)
	return ep
}

// notification writes a threshold.crossed notification for account, decided now, as the
// worker's transaction writes it (its put-once condition is the worker's, tested in notify).
func (r *rig) notification(t *testing.T, account string, threshold int64) notify.Notification {
	t.Helper()
	n := notify.Notification{
		Kind: notify.ThresholdCrossed, Account: account, Feature: "events", Cycle: "2026-11",
		Threshold: threshold, Percent: threshold / 10, Limit: 1000, Used: threshold + 3, AtMs: r.clock.Now().UnixMilli(),
	}
	r.put(t, n.Item())
	return n
}

func (r *rig) put(t *testing.T, item map[string]types.AttributeValue) {
	t.Helper()
	if _, err := r.env.Clients.DynamoDB.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(r.env.Names.Table(resources.TableNotifications)), Item: item,
	}); err != nil {
		t.Fatal(err)
	}
}

// item reads an item of the notifications table as it is stored.
func (r *rig) item(t *testing.T, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := r.env.Clients.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(r.env.Names.Table(resources.TableNotifications)), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": dynamo.S(pk), "sk": dynamo.S(sk)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// delivery reads the delivery of n to endpoint.
func (r *rig) delivery(t *testing.T, n notify.Notification, endpoint string) notify.Delivery {
	t.Helper()
	d, err := r.store.Delivery(context.Background(), endpoint, n.ID())
	if err != nil {
		t.Fatalf("the delivery of %s to %s: %v", n.ID(), endpoint, err)
	}
	return d
}

// run runs d once; a crash at a hook is expected, anything else fails the test.
func (r *rig) run(t *testing.T, d *drain.Drainer) drain.Result {
	t.Helper()
	res, err := d.Run(context.Background())
	if err != nil && !errors.Is(err, errCrash) {
		t.Fatalf("run: %v", err)
	}
	return res
}

// crashAt is a hook that kills the notifier at p, once.
func crashAt(p drain.Point) func(context.Context, drain.Point, drain.Ref) error {
	var once sync.Once
	return func(_ context.Context, at drain.Point, _ drain.Ref) error {
		var err error
		if at == p {
			once.Do(func() { err = errCrash })
		}
		return err
	}
}

// received is one request that reached the receiver.
type received struct {
	endpoint  string
	id        string
	timestamp time.Time
	body      []byte
	// signatures counts the entries of webhook-signature: one per secret the endpoint signs with.
	signatures int
}

// receiver is a platform's endpoints on 127.0.0.1, one per path. Each request must verify, with
// the Standard Webhooks library, under every secret its endpoint holds, with a timestamp within
// the library's tolerance of the test's clock (the receiver's clock); what does not is recorded
// as a failure and fails the test when it ends.
type receiver struct {
	srv   *httptest.Server
	clock *testclock.Clock

	mu      sync.Mutex
	secrets map[string][]string
	answer  map[string]int
	got     []received
	bad     []string
}

// tolerance is the Standard Webhooks reference library's tolerance for a timestamp.
const tolerance = 5 * time.Minute

func newReceiver(t *testing.T, clock *testclock.Clock) *receiver {
	t.Helper()
	rcv := &receiver{clock: clock, secrets: map[string][]string{}, answer: map[string]int{}}
	rcv.srv = httptest.NewServer(http.HandlerFunc(rcv.serve))
	t.Cleanup(func() {
		rcv.srv.Close()
		for _, b := range rcv.failures() {
			t.Errorf("receiver: %s", b)
		}
	})
	return rcv
}

func (rcv *receiver) url(endpoint string) string { return rcv.srv.URL + "/" + endpoint }

// hold gives the receiver the secrets the endpoint's deliveries must each verify under.
func (rcv *receiver) hold(endpoint string, secrets ...string) {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	rcv.secrets[endpoint] = secrets
}

// answerWith makes the endpoint answer status (204 until told otherwise).
func (rcv *receiver) answerWith(endpoint string, status int) {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	rcv.answer[endpoint] = status
}

func (rcv *receiver) serve(w http.ResponseWriter, req *http.Request) {
	endpoint := req.URL.Path[1:]
	body, _ := io.ReadAll(req.Body)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	id := req.Header.Get(standardwebhooks.HeaderWebhookID)
	secs, err := strconv.ParseInt(req.Header.Get(standardwebhooks.HeaderWebhookTimestamp), 10, 64)
	if err != nil {
		rcv.bad = append(rcv.bad, fmt.Sprintf("%s: %s: timestamp %q", endpoint, id, req.Header.Get(standardwebhooks.HeaderWebhookTimestamp)))
	}
	at := time.Unix(secs, 0)
	if skew := rcv.clock.Now().Sub(at); skew > tolerance || skew < -tolerance {
		rcv.bad = append(rcv.bad, fmt.Sprintf("%s: %s: timestamp %v is %v from the receiver's clock", endpoint, id, at.UTC(), skew))
	}
	if len(rcv.secrets[endpoint]) == 0 {
		rcv.bad = append(rcv.bad, fmt.Sprintf("%s: a delivery to an endpoint holding no secret", endpoint))
	}
	for i, secret := range rcv.secrets[endpoint] {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err == nil {
			// The timestamp is checked above against the test's clock, which is not the wall
			// clock the library's Verify reads.
			err = wh.VerifyIgnoringTimestamp(body, req.Header)
		}
		if err != nil {
			rcv.bad = append(rcv.bad, fmt.Sprintf("%s: %s does not verify under secret %d: %v", endpoint, id, i+1, err))
		}
	}
	rcv.got = append(rcv.got, received{endpoint: endpoint, id: id, timestamp: at, body: body,
		signatures: len(strings.Fields(req.Header.Get(standardwebhooks.HeaderWebhookSignature)))})
	status, ok := rcv.answer[endpoint]
	if !ok {
		status = http.StatusNoContent
	}
	w.WriteHeader(status)
}

// requests returns what reached endpoint, in order.
func (rcv *receiver) requests(endpoint string) []received {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var out []received
	for _, g := range rcv.got {
		if g.endpoint == endpoint {
			out = append(out, g)
		}
	}
	return out
}

// distinctIDs counts the webhook-ids that reached endpoint, as a receiver that dedupes counts
// messages.
func (rcv *receiver) distinctIDs(endpoint string) int {
	ids := map[string]bool{}
	for _, g := range rcv.requests(endpoint) {
		ids[g.id] = true
	}
	return len(ids)
}

func (rcv *receiver) total() int {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return len(rcv.got)
}

func (rcv *receiver) failures() []string {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return append([]string(nil), rcv.bad...)
}
