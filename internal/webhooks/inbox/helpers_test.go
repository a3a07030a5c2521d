package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/allowance"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/inboxfault"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	webhooks "github.com/ferrymeter/ferry/internal/webhooks/intake"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// start is every harness's clock start: T in the reference scenario.
var start = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

// kindeTime formats t as Kinde does: an offset and nanoseconds.
func kindeTime(t time.Time) string {
	return t.In(time.FixedZone("", 11*3600)).Format("2006-01-02T15:04:05.000000000Z07:00")
}

// harness is one test's Ferry with a Kinde signer and an apply-crash injector.
type harness struct {
	*apptest.Harness
	crash *inboxfault.CrashApply
}

func newHarness(t *testing.T, opts ...apptest.Options) *harness {
	t.Helper()
	crash := inboxfault.New()
	var o apptest.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Start = start
	o.DynamoDB = append(o.DynamoDB, crash.Option)
	h := &harness{Harness: apptest.New(t, o), crash: crash}
	h.Signer(t)
	return h
}

// The composed functions' services the tests drive directly, each from the function that has it
// in AWS (and with that function's IAM-guarded clients).
func (h *harness) worker() *inbox.Applier  { return h.Inbox().Worker }
func (h *harness) store() *inbox.Table     { return h.Inbox().Store }
func (h *harness) sweeper() *inbox.Applier { return h.InboxSweep().Worker }
func (h *harness) intake() *inbox.Intake   { return h.Webhooks().Intake }
func (h *harness) meterMarks() inbox.MeterMarks {
	return h.Inbox().MeterMarks
}
func (h *harness) receiver() *webhooks.Receiver {
	return h.Webhooks().Receiver
}
func (h *harness) accounts() *accounts.Service    { return h.API().Accounts }
func (h *harness) allowances() *allowance.Service { return h.Inbox().Allowances }

// account creates a free account linked to a Kinde customer (and a Stripe one) and returns its
// key.
func (h *harness) account(t *testing.T, id, kindeCustomer, stripeCustomer string) string {
	t.Helper()
	body := map[string]any{"id": id, "plan": "free"}
	if kindeCustomer != "" {
		body["kindeCustomerId"] = kindeCustomer
	}
	if stripeCustomer != "" {
		body["stripeCustomerId"] = stripeCustomer
	}
	resp := h.Do(t, http.MethodPost, "/v1/accounts", apptest.AdminKey, body)
	if resp.Status != http.StatusCreated {
		t.Fatalf("create %s: %d %s", id, resp.Status, resp.Body)
	}
	return resp.JSON(t)["apiKey"].(string)
}

// kindeEvent is one Kinde billing event: its claims, minus the sending time.
type kindeEvent struct {
	id        string
	typ       string
	at        time.Time
	customer  string
	plan      string // data.plan.key
	extraData map[string]any
}

func (e kindeEvent) claims(sentAt time.Time) map[string]any {
	data := map[string]any{"customer_id": e.customer, "user_id": "kp_user", "customer_type": "user"}
	if e.plan != "" {
		data["plan"] = map[string]any{"key": e.plan}
	}
	for k, v := range e.extraData {
		data[k] = v
	}
	return map[string]any{
		"type": e.typ, "event_id": e.id, "source": "api", "data": data,
		"event_timestamp": kindeTime(e.at), "timestamp": kindeTime(sentAt),
	}
}

// token signs the event as Kinde sends it now (by the harness clock).
func (h *harness) token(t *testing.T, e kindeEvent) string {
	t.Helper()
	tok, err := h.Signer(t).Sign(e.claims(h.Clock.Now()))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// deliver delivers a Kinde event and returns the stored event's id; it fails unless the answer
// is 200 with the expected duplicate flag.
func (h *harness) deliver(t *testing.T, e kindeEvent, wantDuplicate bool) string {
	t.Helper()
	resp := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(h.token(t, e)), "Content-Type", "application/jwt", "webhook-id", "wh_"+e.id)
	if resp.Status != http.StatusOK {
		t.Fatalf("deliver %s: %d %s", e.id, resp.Status, resp.Body)
	}
	var body struct {
		ID        string
		Duplicate bool
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Duplicate != wantDuplicate {
		t.Fatalf("deliver %s: duplicate %v, want %v", e.id, body.Duplicate, wantDuplicate)
	}
	return body.ID
}

// send posts a raw body with headers (pairs) and no bearer key.
func (h *harness) send(t *testing.T, method, path string, body []byte, headers ...string) apptest.Response {
	t.Helper()
	return h.Do(t, method, path, "", body, headers...)
}

// process runs the worker on one event, as its nudge would.
func (h *harness) process(t *testing.T, id string) (inbox.Outcome, error) {
	t.Helper()
	return h.worker().Process(context.Background(), id)
}

// settle runs what the sweep and the worker do together until nothing is due: every due
// event (the sweep's query) is processed.
func (h *harness) settle(t *testing.T) {
	t.Helper()
	for range 20 {
		ids, err := h.store().Due(context.Background(), h.Clock.Now().UnixMilli(), 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 {
			return
		}
		for _, id := range ids {
			if _, err := h.process(t, id); err != nil {
				t.Fatalf("process %s: %v", id, err)
			}
		}
	}
	t.Fatal("events still due after 20 rounds")
}

func (h *harness) event(t *testing.T, id string) inbox.Event {
	t.Helper()
	e, err := h.store().Get(context.Background(), id)
	if err != nil {
		t.Fatalf("event %s: %v", id, err)
	}
	return e
}

func (h *harness) receipts(t *testing.T, id string) []inbox.Receipt {
	t.Helper()
	r, err := h.store().Receipts(context.Background(), id, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (h *harness) grants(t *testing.T, accountID, cycle string) allowance.Cycle {
	t.Helper()
	c, err := h.allowances().Store.Read(context.Background(), accountID, "credits", cycle)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tableItems counts the items of a table: how "nothing stored" is asserted.
func (h *harness) tableItems(t *testing.T, logical string) int {
	t.Helper()
	n := 0
	var start map[string]types.AttributeValue
	for {
		out, err := h.Env.Clients.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{
			TableName: aws.String(h.Env.Names.Table(logical)), ExclusiveStartKey: start,
		})
		if err != nil {
			t.Fatal(err)
		}
		n += len(out.Items)
		if len(out.LastEvaluatedKey) == 0 {
			return n
		}
		start = out.LastEvaluatedKey
	}
}

// state is what the reference scenario and its permutations compare.
type state struct {
	Plan          string
	Status        string
	PlanChangedAt int64
	Grants        string
	CreditsLimit  int64
	Stored        int
	Seen          string
	Receipts      int
}

func (s state) String() string {
	return fmt.Sprintf("plan %s, status %s, planChangedAt %d, grants [%s], credits limit %d, %d stored (seen %s), %d receipts",
		s.Plan, s.Status, s.PlanChangedAt, s.Grants, s.CreditsLimit, s.Stored, s.Seen, s.Receipts)
}

// stateOf reads the account's state and the stored events ids name.
func (h *harness) stateOf(t *testing.T, key, accountID string, ids []string) state {
	t.Helper()
	acct, err := h.accounts().Get(context.Background(), accountID)
	if err != nil {
		t.Fatal(err)
	}
	c := h.grants(t, accountID, "2026-11")
	var rows []string
	for _, g := range c.Grants {
		rows = append(rows, fmt.Sprintf("%s %d", g.Plan, g.Amount))
	}
	sort.Strings(rows)
	usage := h.Do(t, http.MethodGet, "/v1/usage?feature=credits", key, nil).JSON(t)
	s := state{
		Plan: acct.Plan, Status: string(acct.Status), PlanChangedAt: acct.PlanChangedAtMs,
		Grants: strings.Join(rows, ", "), CreditsLimit: int64(usage["limit"].(float64)),
	}
	seen := map[string]bool{}
	var counts []string
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		e := h.event(t, id)
		s.Stored++
		counts = append(counts, fmt.Sprint(e.SeenCount))
		s.Receipts += len(h.receipts(t, id))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(counts)))
	s.Seen = strings.Join(counts, ", ")
	return s
}
