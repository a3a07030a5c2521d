package functions_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/functions"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

func TestDefinitions_AreBuildable(t *testing.T) {
	if err := functions.Definitions().Validate(); err != nil {
		t.Fatal(err)
	}
}

// Every function is built from its entry in resources.Functions — its clients refusing what its
// IAM grant refuses — and driven through its kind once: each route of an HTTP function answers a
// request (no 5xx, no 401: the function has what its routes and their auth need), the consumer
// processes a real SQS batch, the scheduled function runs. A builder that reaches for a resource
// its entry does not grant fails to build, and a call its role would refuse in AWS fails the test
// (see testenv.ClientsFor): IAM drift is a failing unit test.
func TestEveryFunction_BuildsFromItsEntry_AndServesItsKind(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", map[string]any{"tokens": 100_000})
	defs := functions.Definitions()
	driven := map[compose.Kind]int{}
	for _, f := range defs.Functions {
		fn := h.Fn(f.Name)
		kinds := defs.Kinds(f)
		if len(kinds) != 1 || fn.Kind() != kinds[0] {
			t.Fatalf("%s: built a %v function, its entry says %v", f.Name, fn.Kind(), kinds)
		}
		t.Run(f.Name, func(t *testing.T) {
			switch fn.Kind() {
			case compose.HTTP:
				for _, r := range fn.HTTP.Routes() {
					if r.Auth == resources.WebhookSignature {
						// Authenticated by the provider's signature: a real-shaped signed delivery.
						provider := strings.TrimPrefix(r.Path, "/v1/webhooks/")
						path, body, headers := h.Webhook(t, provider, webhookFixtures[provider])
						if resp := h.Do(t, r.Method, path, "", body, headers...); resp.Status != http.StatusOK {
							t.Errorf("%s: %d %s", r.Key(), resp.Status, resp.Body)
						}
						continue
					}
					bearer := key
					if r.Auth == resources.Operator || r.Auth == resources.OperatorSignIn {
						bearer = apptest.AdminKey
					}
					var body any
					if r.Method != http.MethodGet {
						body = map[string]any{}
					}
					path := strings.NewReplacer("{id}", "acct_1").Replace(r.Path)
					resp := h.Do(t, r.Method, path, bearer, body)
					if resp.Status >= 500 || resp.Status == http.StatusUnauthorized || resp.Status == http.StatusMethodNotAllowed {
						t.Errorf("%s: %d %s", r.Key(), resp.Status, resp.Body)
					}
				}
				if f.Name == resources.DefaultRouteFunction {
					if resp := h.Do(t, http.MethodGet, "/v1/nowhere", key, nil); resp.Status != http.StatusNotFound {
						t.Errorf("$default: %d %s", resp.Status, resp.Body)
					}
				}
			case compose.Consumer:
				if f.Name == resources.FunctionInbox {
					consumeInboxNudge(t, h, fn)
					break
				}
				batch := apptest.SQSEvent(t, "sqs/worker-batch.json")
				out, err := fn.Consume(context.Background(), batch)
				if err != nil || len(out.BatchItemFailures) != 0 {
					t.Fatalf("consume: %+v, %v", out, err)
				}
				e, err := h.Worker().Ledger.Get(context.Background(), "acct_fixture", "evt_fixture_1")
				if err != nil || e.Status != ledger.Inserted {
					t.Errorf("the fixture's event: %+v, %v", e, err)
				}
			case compose.Scheduled:
				if err := fn.Run(context.Background()); err != nil {
					t.Errorf("run: %v", err)
				}
			}
			driven[fn.Kind()]++
		})
	}
	for _, k := range []compose.Kind{compose.HTTP, compose.Consumer, compose.Scheduled} {
		if driven[k] == 0 {
			t.Errorf("no %v function was driven", k)
		}
	}
}

// webhookFixtures are the deliveries the webhook routes are driven with, by provider.
var webhookFixtures = map[string]string{"kinde": "plan_changed", "stripe": "invoice_paid_basil"}

// consumeInboxNudge stores a delivery and hands the inbox worker the nudge for it, as its queue's
// event source does: the event is decided (its customer links no account: IGNORED, with why).
func consumeInboxNudge(t *testing.T, h *apptest.Harness, fn *compose.Function) {
	t.Helper()
	path, body, headers := h.Webhook(t, "stripe", webhookFixtures["stripe"])
	resp := h.Do(t, http.MethodPost, path, "", body, headers...)
	if resp.Status != http.StatusOK {
		t.Fatalf("store the delivery: %d %s", resp.Status, resp.Body)
	}
	id, _ := resp.JSON(t)["id"].(string)
	batch := apptest.SQSEvent(t, "sqs/inbox-batch.json")
	batch.Records[0].Body = `{"id":"` + id + `"}`
	out, err := fn.Consume(context.Background(), batch)
	if err != nil || len(out.BatchItemFailures) != 0 {
		t.Fatalf("consume: %+v, %v", out, err)
	}
	if e, err := h.Inbox().Store.Get(context.Background(), id); err != nil || e.Status != inbox.Ignored || e.Reason == "" {
		t.Errorf("the stored event: %+v, %v; want it IGNORED with its reason", e, err)
	}
}

// A builder that uses a resource its entry does not grant, or uses one beyond the access it
// grants, fails to build, naming the function and the resource: the mistake that would be an
// AccessDenied in AWS surfaces when the function is composed.
func TestBuild_AResourceTheEntryDoesNotGrantFailsAtBuildTime(t *testing.T) {
	cases := []struct {
		name     string
		function string
		build    func(c *compose.Composer) (*compose.Function, error)
		want     string
	}{
		{"a table the entry does not list", resources.FunctionSweeper, func(c *compose.Composer) (*compose.Function, error) {
			c.Table(resources.TableLedger, resources.Read)
			return sweepOnly(c), nil
		}, "function sweeper uses table ledger (read), which its entry in resources.Functions does not grant"},
		{"a queue the entry does not list", resources.FunctionSweeper, func(c *compose.Composer) (*compose.Function, error) {
			c.QueueURL(resources.QueueEvents, resources.Send)
			return sweepOnly(c), nil
		}, "function sweeper uses queue events (send), which its entry in resources.Functions does not grant"},
		{"more access than the entry grants", resources.FunctionIngest, func(c *compose.Composer) (*compose.Function, error) {
			c.Table(resources.TableLedger, resources.ReadWrite)
			return sweepOnly(c), nil
		}, "function ingest uses table ledger for read-write, and its entry grants only read"},
		{"a builder that makes the wrong kind", resources.FunctionSweeper, func(c *compose.Composer) (*compose.Function, error) {
			return c.Function(nil), nil
		}, "its entry makes it [scheduled], and its builder made a function with no handler"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defs := functions.Definitions()
			for i, b := range defs.Builders {
				if b.Function == c.function {
					defs.Builders[i].Build = c.build
				}
			}
			_, err := defs.Build(c.function, compose.Env{Names: allNames(), Config: compose.DefaultConfig(), Log: apptest.Logger(t)})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v; want it to say %q", err, c.want)
			}
		})
	}
}

func sweepOnly(c *compose.Composer) *compose.Function {
	fn := c.Function(nil)
	fn.Run = func(context.Context) error { return nil }
	return fn
}

// allNames names every resource after itself: enough to compose functions without emulators.
func allNames() resources.Names {
	names := resources.Names{Tables: map[string]string{}, Queues: map[string]string{}, Buckets: map[string]string{}}
	for _, tbl := range resources.Tables {
		names.Tables[tbl.Logical] = tbl.Logical
	}
	for _, q := range resources.Queues {
		names.Queues[q.Logical], names.Queues[q.DLQLogical()] = q.Logical, q.DLQLogical()
	}
	for _, b := range resources.Buckets {
		names.Buckets[b.Logical] = b.Logical
	}
	return names
}

// Every consumer is served the way the deployment's event source mappings serve it: as many
// messages an invocation and the same batching window (infra reads the same constants), so
// `ferry dev` and the tests run the units the worker makes in AWS.
func TestEveryConsumer_GetsTheDeploymentsBatch(t *testing.T) {
	h := apptest.New(t)
	consumed := 0
	for _, f := range functions.Definitions().Functions {
		consumed += len(compose.Consumes(f))
	}
	if len(h.Sources) != consumed || consumed == 0 {
		t.Fatalf("%d event sources for %d consumed queues", len(h.Sources), consumed)
	}
	for _, s := range h.Sources {
		if s.BatchSize != resources.EventSourceBatchSize || s.Window != resources.EventSourceBatchingWindow {
			t.Errorf("%s: batch %d, window %v; the deployment's is %d, %v", s.QueueURL, s.BatchSize, s.Window,
				resources.EventSourceBatchSize, resources.EventSourceBatchingWindow)
		}
	}
}
