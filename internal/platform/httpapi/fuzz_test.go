package httpapi_test

// Fuzz targets, one per request body. Each drives the whole stack (the gateway, the handlers,
// DynamoDB, the SQS emulator and, for events, the worker) and checks, for every input:
//
//   - the answer is a problem document or the route's documented success, never a 5xx;
//   - a refused input (400, 413, 415) wrote nothing: no DynamoDB write, nothing queued;
//   - an accepted input is stored under exactly the values sent: an event's id reads back
//     byte-identical and its archived bytes are the bytes sent; an account, a hold, a charge
//     and a settlement read back with the values of the request.
//
// Seeds are the readable files under the repository's testdata/fuzz/<target>/; inputs the
// fuzzer finds interesting go to testdata/fuzz/FuzzXxx beside this file, as go test keeps them.
// Run them with `make fuzz FUZZTIME=2m`.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	smithymw "github.com/aws/smithy-go/middleware"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// seedDir holds the readable seed inputs of each fuzz target.
const seedDir = "../../../testdata/fuzz"

// recordingQueue records what ingest queues, and queues it.
type recordingQueue struct {
	ingest.Queue
	sent []event.Envelope
}

func (q *recordingQueue) Send(ctx context.Context, env event.Envelope) error {
	q.sent = append(q.sent, env)
	return q.Queue.Send(ctx, env)
}

func (q *recordingQueue) SendBatch(ctx context.Context, envs []event.Envelope) error {
	q.sent = append(q.sent, envs...)
	return q.Queue.SendBatch(ctx, envs)
}

// fuzzStack is one fuzz worker's Ferry. The fuzz engine calls a target's function one input at
// a time in each worker process, so the stack needs no locking.
type fuzzStack struct {
	h      *apptest.Harness
	writes *tableWrites
	queue  *recordingQueue
	key    string
	// firstBytes is the first event accepted under each id: a later event with the same id is
	// a retry of it, and the archive keeps the first.
	firstBytes map[string][]byte
	// seen counts the accepted deliveries of each billing event.
	seen map[string]int
}

func newFuzzStack(f *testing.F, target string) *fuzzStack {
	f.Helper()
	w := &tableWrites{}
	s := &fuzzStack{writes: w, firstBytes: map[string][]byte{}, seen: map[string]int{}}
	s.h = apptest.New(f, apptest.Options{
		DynamoDB: []func(*dynamodb.Options){func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, w.install) }},
		Configure: func(h *apptest.Harness) {
			ing := h.Ingest().Ingest
			s.queue = &recordingQueue{Queue: ing.Queue}
			ing.Queue = s.queue
		},
	})
	// An internal account meters nothing and has no limit, and its tokens are unlimited: no
	// input is refused for want of room.
	s.key = s.h.CreateAccount(f, "acct_fuzz", "internal", map[string]any{"tokens": nil})
	entries, err := os.ReadDir(filepath.Join(seedDir, target))
	if err != nil {
		f.Fatalf("seeds of %s: %v", target, err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(seedDir, target, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	if len(entries) == 0 {
		f.Fatalf("no seeds in %s", filepath.Join(seedDir, target))
	}
	return s
}

// tableWrites counts the DynamoDB writes made since its last reset, by table.
type tableWrites struct {
	mu     sync.Mutex
	tables map[string]int
}

func (w *tableWrites) install(stack *smithymw.Stack) error {
	return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.fuzz.TableWrites",
		func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
			var tables []*string
			switch p := in.Parameters.(type) {
			case *dynamodb.PutItemInput:
				tables = append(tables, p.TableName)
			case *dynamodb.UpdateItemInput:
				tables = append(tables, p.TableName)
			case *dynamodb.DeleteItemInput:
				tables = append(tables, p.TableName)
			case *dynamodb.BatchWriteItemInput:
				for name := range p.RequestItems {
					tables = append(tables, &name)
				}
			case *dynamodb.TransactWriteItemsInput:
				for _, item := range p.TransactItems {
					switch {
					case item.Put != nil:
						tables = append(tables, item.Put.TableName)
					case item.Update != nil:
						tables = append(tables, item.Update.TableName)
					case item.Delete != nil:
						tables = append(tables, item.Delete.TableName)
					}
				}
			}
			w.mu.Lock()
			if w.tables == nil {
				w.tables = map[string]int{}
			}
			for _, t := range tables {
				w.tables[aws.ToString(t)]++
			}
			w.mu.Unlock()
			return next.HandleInitialize(ctx, in)
		}), smithymw.After)
}

func (w *tableWrites) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tables = nil
}

// refusedWrites counts the writes a refused input must not make: every table's but the
// idempotency table's. A keyed request's refusal is stored there by the Idempotency-Key contract
// (a 4xx is the request's answer, replayed to a retry), and that is all it may store.
func (s *fuzzStack) refusedWrites() int {
	s.writes.mu.Lock()
	defer s.writes.mu.Unlock()
	n := 0
	for table, c := range s.writes.tables {
		if table != s.h.Env.Names.Table(resources.TableIdempotency) {
			n += c
		}
	}
	return n
}

// do sends one fuzzed request and checks what every answer must be: a problem document or one
// of the route's successes, no 5xx, and nothing written for a refused input.
func (s *fuzzStack) do(t *testing.T, method, path, key string, body []byte, successes ...int) apptest.Response {
	t.Helper()
	s.writes.reset()
	s.queue.sent = nil
	r := s.h.Do(t, method, path, key, body)
	s.judge(t, r, body, successes)
	return r
}

// judge checks what every answer must be: a problem document or one of the route's successes,
// no 5xx, and nothing written or queued for a refused input.
func (s *fuzzStack) judge(t *testing.T, r apptest.Response, body []byte, successes []int) {
	t.Helper()
	ok := false
	for _, code := range successes {
		ok = ok || r.Status == code
	}
	switch {
	case ok:
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%d with Content-Type %q for %q", r.Status, ct, body)
		}
	case r.Status >= 500:
		t.Fatalf("%d for %q: %s", r.Status, body, r.Body)
	default:
		checkProblem(t, r, body)
	}
	switch r.Status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		if w := s.refusedWrites(); w != 0 || len(s.queue.sent) != 0 {
			t.Fatalf("a refused input (%d) made %d DynamoDB writes and queued %d events: %q", r.Status, w, len(s.queue.sent), body)
		}
	}
}

// trimJSONSpace is body without JSON's whitespace around it.
func trimJSONSpace(body []byte) []byte { return bytes.Trim(body, " \t\r\n") }

// checkProblem checks an error answer is an RFC 9457 document in Ferry's words.
func checkProblem(t *testing.T, r apptest.Response, body []byte) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%d with Content-Type %q for %q: %s", r.Status, ct, body, r.Body)
	}
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	if err := json.Unmarshal(r.Body, &p); err != nil || !strings.HasPrefix(p.Type, problemPrefix) || p.Title == "" || p.Status != r.Status {
		t.Fatalf("not a problem document (%v): %s", err, r.Body)
	}
	// What the detail quotes is the client's own (a member name); the rest is Ferry's words.
	words := quoted.ReplaceAllString(p.Detail, `""`)
	for _, leak := range leaks {
		if strings.Contains(words, leak) {
			t.Fatalf("the detail %q shows the parser's %q (input %q)", p.Detail, leak, body)
		}
	}
}

// quoted matches a quoted string in a detail, escapes included.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// member reads one member of an accepted JSON object as it was sent.
func member(t *testing.T, body []byte, name string, into any) bool {
	t.Helper()
	var m map[string]jsontext.Value
	if err := jsonv2.Unmarshal(body, &m); err != nil {
		t.Fatalf("an accepted body does not decode: %v", err)
	}
	raw, ok := m[name]
	if !ok {
		return false
	}
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("member %s of an accepted body: %v", name, err)
	}
	return true
}

// checkEvent processes the queued event with the worker and checks it is stored under the id
// the answer gave and that id only, with the bytes that were sent.
func (s *fuzzStack) checkEvent(t *testing.T, id string, sent []byte) {
	t.Helper()
	if first, seen := s.firstBytes[id]; seen {
		sent = first // a retry of an earlier event: the first bytes stay
	} else {
		s.firstBytes[id] = append([]byte(nil), sent...)
	}
	got := s.h.Do(t, "GET", "/v1/events/"+url.PathEscape(id), s.key, nil)
	if got.Status != http.StatusOK {
		t.Fatalf("accepted event %q reads back %d: %s", id, got.Status, got.Body)
	}
	var entry struct{ ID, Status string }
	if err := json.Unmarshal(got.Body, &entry); err != nil || entry.ID != id || entry.Status != "INSERTED" {
		t.Fatalf("accepted event %q reads back as %s (%v)", id, got.Body, err)
	}
	e, err := s.h.Worker().Ledger.Get(context.Background(), "acct_fuzz", id)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.h.Worker().Archive.Read(context.Background(), e.ArchiveLocation())
	if err != nil {
		t.Fatalf("archive of %q: %v", id, err)
	}
	if !bytes.Equal(obj, bytes.Trim(sent, " \t\r\n")) {
		t.Fatalf("event %q is archived as other bytes than were sent:\n%q\n%q", id, obj, sent)
	}
}

// drain lets the worker process what was queued.
func (s *fuzzStack) drain(t *testing.T) {
	t.Helper()
	for range 20 {
		n, err := s.h.Source.PollOnce(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

func FuzzEvent(f *testing.F) {
	s := newFuzzStack(f, "event")
	f.Fuzz(func(t *testing.T, body []byte) {
		r := s.do(t, "POST", "/v1/events", s.key, body, http.StatusAccepted)
		if r.Status != http.StatusAccepted {
			return
		}
		var answer struct{ ID, Status string }
		if err := json.Unmarshal(r.Body, &answer); err != nil || answer.Status != "queued" {
			t.Fatalf("202 %s", r.Body)
		}
		var sentID string
		member(t, body, "id", &sentID)
		if answer.ID != sentID || len(s.queue.sent) != 1 || s.queue.sent[0].EventID != sentID || !bytes.Equal(s.queue.sent[0].Event, bytes.Trim(body, " \t\r\n")) {
			t.Fatalf("sent id %q, answered %q, queued %+v", sentID, answer.ID, s.queue.sent)
		}
		s.drain(t)
		s.checkEvent(t, sentID, body)
	})
}

func FuzzEventBatch(f *testing.F) {
	s := newFuzzStack(f, "event-batch")
	f.Fuzz(func(t *testing.T, body []byte) {
		r := s.do(t, "POST", "/v1/events/batch", s.key, body, http.StatusAccepted)
		if r.Status != http.StatusAccepted {
			return
		}
		var answer struct{ Results []ingest.ItemResult }
		if err := json.Unmarshal(r.Body, &answer); err != nil {
			t.Fatal(err)
		}
		var items []jsontext.Value
		if err := jsonv2.Unmarshal(body, &items); err != nil || len(items) != len(answer.Results) {
			t.Fatalf("%d items, %d results (%v)", len(items), len(answer.Results), err)
		}
		queued := map[string][]byte{}
		for i, res := range answer.Results {
			if res.Status != ingest.ItemQueued {
				continue
			}
			var id string
			member(t, items[i], "id", &id)
			if res.ID != id {
				t.Fatalf("item %d: sent id %q, answered %q", i, id, res.ID)
			}
			queued[id] = items[i]
		}
		if len(queued) != len(s.queue.sent) {
			t.Fatalf("%d items queued, %d envelopes sent", len(queued), len(s.queue.sent))
		}
		for _, env := range s.queue.sent {
			if !bytes.Equal(env.Event, queued[env.EventID]) {
				t.Fatalf("item %q queued as other bytes:\n%q\n%q", env.EventID, env.Event, queued[env.EventID])
			}
		}
		s.drain(t)
		for id, raw := range queued {
			s.checkEvent(t, id, raw)
		}
	})
}

// checkAccount checks the stored account has what the request sent.
func checkAccount(t *testing.T, s *fuzzStack, id string, body []byte) {
	t.Helper()
	got := s.h.Do(t, "GET", "/v1/accounts/"+url.PathEscape(id), apptest.AdminKey, nil)
	var acct struct {
		ID, Plan, Status string
		Limits           map[string]*int64
		AgreementStart   *int
	}
	if got.Status != http.StatusOK || json.Unmarshal(got.Body, &acct) != nil || acct.ID != id {
		t.Fatalf("account %q reads back %d %s", id, got.Status, got.Body)
	}
	var plan, status string
	if member(t, body, "plan", &plan) && acct.Plan != plan {
		t.Fatalf("plan %q stored as %q", plan, acct.Plan)
	}
	if member(t, body, "status", &status) && acct.Status != status {
		t.Fatalf("status %q stored as %q", status, acct.Status)
	}
	var limits map[string]*int64
	if member(t, body, "limits", &limits) {
		for feature, l := range limits {
			stored := acct.Limits[feature]
			if (l == nil) != (stored == nil) || l != nil && *l != *stored {
				t.Fatalf("limit %s=%v stored as %v", feature, l, stored)
			}
		}
	}
	var day int
	if member(t, body, "agreementStart", &day) && (acct.AgreementStart == nil || *acct.AgreementStart != day) {
		t.Fatalf("agreementStart %d stored as %v", day, acct.AgreementStart)
	}
}

func FuzzAccountCreate(f *testing.F) {
	s := newFuzzStack(f, "account-create")
	f.Fuzz(func(t *testing.T, body []byte) {
		r := s.do(t, "POST", "/v1/accounts", apptest.AdminKey, body, http.StatusCreated)
		if r.Status != http.StatusCreated {
			return
		}
		var id string
		member(t, body, "id", &id)
		var answer struct{ ID string }
		if err := json.Unmarshal(r.Body, &answer); err != nil || answer.ID != id {
			t.Fatalf("sent id %q, answered %s", id, r.Body)
		}
		checkAccount(t, s, id, body)
	})
}

func FuzzAccountUpdate(f *testing.F) {
	s := newFuzzStack(f, "account-update")
	// The updated account never has usage, so its agreement day stays open to change.
	s.h.CreateAccount(f, "acct_patch", "free", nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		r := s.do(t, "PATCH", "/v1/accounts/acct_patch", apptest.AdminKey, body, http.StatusOK)
		if r.Status == http.StatusOK {
			checkAccount(t, s, "acct_patch", body)
		}
	})
}

// checkHold checks the stored hold has the key, feature and amount the request sent.
func checkHold(t *testing.T, s *fuzzStack, body []byte, answer []byte) string {
	t.Helper()
	var h struct {
		ID, Key, Feature string
		Amount           int64
	}
	if err := json.Unmarshal(answer, &h); err != nil {
		t.Fatal(err)
	}
	var key, feature string
	var amount int64
	member(t, body, "key", &key)
	member(t, body, "feature", &feature)
	member(t, body, "amount", &amount)
	got := s.h.Do(t, "GET", "/v1/holds/"+h.ID, s.key, nil)
	var stored struct {
		Key, Feature string
		Amount       int64
	}
	if got.Status != http.StatusOK || json.Unmarshal(got.Body, &stored) != nil {
		t.Fatalf("hold %s reads back %d %s", h.ID, got.Status, got.Body)
	}
	if h.Key != key || stored.Key != key || stored.Feature != feature || stored.Amount != amount || h.ID != holds.ID("acct_fuzz", key) {
		t.Fatalf("sent key %q feature %q amount %d; answered %s; stored %s", key, feature, amount, answer, got.Body)
	}
	return h.ID
}

func FuzzHoldReserve(f *testing.F) {
	s := newFuzzStack(f, "hold-reserve")
	f.Fuzz(func(t *testing.T, body []byte) {
		// A minute a try keeps the account under its 120 new holds a minute.
		s.h.Clock.Advance(time.Minute)
		r := s.do(t, "POST", "/v1/holds", s.key, body, http.StatusCreated, http.StatusOK)
		if r.Status == http.StatusCreated || r.Status == http.StatusOK {
			checkHold(t, s, body, r.Body)
		}
	})
}

// freshHold opens a hold of the largest amount under a key no input uses.
func freshHold(t testing.TB, s *fuzzStack, n int) string {
	t.Helper()
	s.h.Clock.Advance(time.Minute)
	r := s.h.Do(t, "POST", "/v1/holds", s.key, map[string]any{"key": fmt.Sprintf("fuzz-hold-%d", n), "feature": "tokens", "amount": holds.MaxAmount})
	if r.Status != http.StatusCreated {
		t.Fatalf("hold: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

func FuzzHoldCharge(f *testing.F) {
	s := newFuzzStack(f, "hold-charge")
	hold := freshHold(f, s, 0)
	f.Fuzz(func(t *testing.T, body []byte) {
		path := "/v1/holds/" + hold + "/charges"
		r := s.do(t, "POST", path, s.key, body, http.StatusOK)
		if r.Status != http.StatusOK {
			return
		}
		var step struct {
			Charged int64
			Capped  bool
		}
		var amount int64
		member(t, body, "amount", &amount)
		if err := json.Unmarshal(r.Body, &step); err != nil || step.Charged > amount || step.Capped != (step.Charged < amount) {
			t.Fatalf("charged %s for an amount of %d", r.Body, amount)
		}
		// The step is stored under its key as sent: sending it again is the same step.
		again := s.do(t, "POST", path, s.key, body, http.StatusOK)
		var repeat struct{ Charged int64 }
		if err := json.Unmarshal(again.Body, &repeat); again.Status != http.StatusOK || err != nil || repeat.Charged != step.Charged {
			t.Fatalf("the same step again: %d %s after %s", again.Status, again.Body, r.Body)
		}
	})
}

func FuzzHoldSettle(f *testing.F) {
	s := newFuzzStack(f, "hold-settle")
	n := 0
	hold := ""
	f.Fuzz(func(t *testing.T, body []byte) {
		// A refused settlement leaves its hold running, for the next input; a settled one needs
		// a new hold.
		if hold == "" {
			n++
			hold = freshHold(t, s, n)
		}
		r := s.do(t, "POST", "/v1/holds/"+hold+"/settle", s.key, body, http.StatusOK)
		if r.Status != http.StatusOK {
			return
		}
		hold = ""
		var st struct {
			Status                  string
			Used, Charged, Released int64
		}
		if err := json.Unmarshal(r.Body, &st); err != nil || st.Status != "SETTLED" {
			t.Fatalf("settled %s", r.Body)
		}
		var used int64
		if len(bytes.Trim(body, " \t\r\n")) > 0 && member(t, body, "used", &used) && (st.Used != used || st.Charged != min(used, holds.MaxAmount)) {
			t.Fatalf("sent used %d; settled %s", used, r.Body)
		}
	})
}
