package httpapi_test

// The cases of a hostile client, end to end through the real local stack: ingest over the
// gateway, the SQS emulator, the worker driven like Lambda's event source, and the ledger,
// archive and analytics rows the worker writes.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// rawEvent is an event's JSON with id and data spliced in as raw JSON text.
func rawEvent(idJSON, dataJSON string) string {
	s := `{"specversion":"1.0","id":` + idJSON + `,"source":"/tests","type":"api.call"`
	if dataJSON != "" {
		s += `,"data":` + dataJSON
	}
	return s + "}"
}

// ledgerItems counts the events' entries in the ledger table.
func ledgerItems(t *testing.T, h *apptest.Harness) int {
	t.Helper()
	// Events' entries only: a unit's record of being done (pk "#batch#…") is not an event's.
	out, err := h.Env.Clients.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{
		TableName: aws.String(h.Env.Names.Table(resources.TableLedger)), Select: types.SelectCount,
		FilterExpression:          aws.String("NOT begins_with(pk, :record)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":record": &types.AttributeValueMemberS{Value: "#batch#"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(out.Count)
}

// storedEvent checks an event the worker processed: INSERTED and billed, archived as the exact
// bytes sent, one analytics row under the exact id (where its entry says: its unit's rows item,
// or a row of its own); it returns the row.
func storedEvent(t *testing.T, h *apptest.Harness, accountID, id string, sent []byte) analytics.Row {
	t.Helper()
	ctx := context.Background()
	e, err := h.Worker().Ledger.Get(ctx, accountID, id)
	if err != nil {
		t.Fatalf("ledger %q: %v", id, err)
	}
	if e.Status != ledger.Inserted || !e.Billed() || e.EventID != id {
		t.Errorf("%q: status %s billed %v id %q", id, e.Status, e.Billed(), e.EventID)
	}
	obj, err := h.Worker().Archive.Read(ctx, e.ArchiveLocation())
	if err != nil {
		t.Fatalf("archive %q: %v", id, err)
	}
	if sent != nil && !bytes.Equal(obj, bytes.TrimSpace(sent)) {
		t.Errorf("%q: the archive holds other bytes than were sent:\n%s\n%s", id, obj, sent)
	}
	if ok, err := h.Worker().Analytics.Exists(ctx, e.RowRef()); err != nil || !ok {
		t.Fatalf("analytics row %q where its entry says (%+v): %v %v", id, e.RowRef(), ok, err)
	}
	rows, err := h.Worker().Analytics.Rows(ctx, accountID, 0, analytics.MaxInstantMs)
	if err != nil {
		t.Fatal(err)
	}
	var found []analytics.Row
	for _, r := range rows {
		if r.EventID == id {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%q has %d analytics rows, want 1", id, len(found))
	}
	return found[0]
}

// Defect 1: an id holding invalid UTF-8 was enqueued, answered 503 after the SQS client's MD5
// check failed, and billed under an id rewritten with U+FFFD. Invalid UTF-8 anywhere in a body
// is now a 400 before anything is queued, on every route that takes a body.
func TestHostile_InvalidUTF8_RefusedBeforeAnythingIsQueued(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_u", "free", map[string]any{"tokens": 1000})
	for _, c := range []struct{ name, path, body, want string }{
		{"an event id", "/v1/events", rawEvent("\"bad\xff\"", ""), `"id" is not valid UTF-8`},
		{"event data", "/v1/events", rawEvent(`"evt_u1"`, "{\"m\":\"\xc3\"}"), `"data.m" is not valid UTF-8`},
		{"a batch item", "/v1/events/batch", "[" + rawEvent(`"evt_u2"`, "") + "," + rawEvent("\"bad\xfe\"", "") + "]", "not valid UTF-8"},
		{"a hold key", "/v1/holds", "{\"key\":\"job\xff\",\"feature\":\"tokens\",\"amount\":1}", `"key" is not valid UTF-8`},
		{"an account id", "/v1/accounts", "{\"id\":\"acct\xff\"}", `"id" is not valid UTF-8`},
	} {
		t.Run(c.name, func(t *testing.T) {
			auth := key
			if c.path == "/v1/accounts" {
				auth = apptest.AdminKey
			}
			p := assertProblem(t, h.Do(t, "POST", c.path, auth, []byte(c.body)), 400, "invalid-request")
			if !strings.Contains(fmt.Sprint(p["detail"]), c.want) {
				t.Errorf("detail %q, want %q", p["detail"], c.want)
			}
		})
	}
	if n := queued(t, h); n != 0 {
		t.Errorf("%d events queued for refused bodies", n)
	}
	h.Drain(t, 0)
	if n := ledgerItems(t, h); n != 0 {
		t.Errorf("%d ledger entries for refused bodies", n)
	}
}

// spoilSendMD5 lets every send reach the queue, then spoils the MD5 of the body in SQS's
// answer, as a queue that rewrote the body would: the SDK's checksum check fails after the
// message is queued — the failure of defect 1.
func spoilSendMD5(stack *middleware.Stack) error {
	const wrong = "00000000000000000000000000000000"
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("SpoilMD5", func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleDeserialize(ctx, in)
		if err == nil {
			switch o := out.Result.(type) {
			case *sqs.SendMessageOutput:
				o.MD5OfMessageBody = aws.String(wrong)
			case *sqs.SendMessageBatchOutput:
				for i := range o.Successful {
					o.Successful[i].MD5OfMessageBody = aws.String(wrong)
				}
			}
		}
		return out, md, err
	}), middleware.Before)
}

// A send that may have landed is never answered "not accepted": it is a 502 outcome-unknown,
// the event is billed once, and the retry the answer asks for is safe.
func TestHostile_ASendThatLandedAndThenFailed_IsOutcomeUnknown_BilledOnce(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_l", "free", map[string]any{"events": 10})
	faulty, err := cloud.New(context.Background(), h.Env.Endpoints, cloud.Options{SQS: []func(*sqs.Options){func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, spoilSendMD5)
	}}})
	if err != nil {
		t.Fatal(err)
	}
	good := h.Ingest().Ingest.Queue
	h.Ingest().Ingest.Queue = &ingest.SQSQueue{Client: faulty.SQS, URL: h.Env.Names.QueueURL(resources.QueueEvents)}
	r := h.Do(t, "POST", "/v1/events", key, ce("evt_l1"))
	p := assertProblem(t, r, 502, "outcome-unknown")
	if r.Header.Get("Retry-After") == "" || !strings.Contains(fmt.Sprint(p["detail"]), "Retry with the same event id") {
		t.Errorf("502 without Retry-After or the advice: %v %v", r.Header, p)
	}
	assertProblem(t, h.Do(t, "POST", "/v1/events/batch", key, []any{ce("evt_l2"), ce("evt_l3")}), 502, "outcome-unknown")

	// The client retries with the same ids, as the answer asks; the queue answers properly now.
	h.Ingest().Ingest.Queue = good
	if r := h.Do(t, "POST", "/v1/events", key, ce("evt_l1")); r.Status != 202 {
		t.Fatalf("retry: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, "POST", "/v1/events/batch", key, []any{ce("evt_l2"), ce("evt_l3")}); r.Status != 202 {
		t.Fatalf("batch retry: %d %s", r.Status, r.Body)
	}
	h.Drain(t, 0)
	for _, id := range []string{"evt_l1", "evt_l2", "evt_l3"} {
		storedEvent(t, h, "acct_l", id, nil)
	}
	if u := h.Do(t, "GET", "/v1/usage", key, nil).JSON(t); u["used"] != float64(3) {
		t.Errorf("usage %v: each event landed twice and must be billed once", u)
	}
}

// A send SQS refuses (or never sees) is a 503 that means nothing happened.
func TestHostile_ASendNothingReceived_Is503(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_n", "free", nil)
	// Nothing listens on this port: the connection is never made.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	nowhere, err := cloud.New(context.Background(), cloud.Endpoints{DynamoDB: closed, S3: closed, SQS: closed}, cloud.Options{SQS: []func(*sqs.Options){func(o *sqs.Options) {
		o.RetryMaxAttempts = 1
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h.Ingest().Ingest.Queue = &ingest.SQSQueue{Client: nowhere.SQS, URL: closed + "/000000000000/nowhere"}
	assertProblem(t, h.Do(t, "POST", "/v1/events", key, ce("evt_n1")), 503, "unavailable")
	assertProblem(t, h.Do(t, "POST", "/v1/events/batch", key, []any{ce("evt_n2")}), 503, "unavailable")
}

// A 5xx from SQS may come after the message was stored: outcome unknown, not 503.
func TestHostile_ASend5xx_IsOutcomeUnknown(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_5", "free", nil)
	sqs500 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"__type":"com.amazonaws.sqs#InternalError","message":"internal"}`)
	}))
	defer sqs500.Close()
	failing, err := cloud.New(context.Background(), cloud.Endpoints{DynamoDB: sqs500.URL, S3: sqs500.URL, SQS: sqs500.URL}, cloud.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.Ingest().Ingest.Queue = &ingest.SQSQueue{Client: failing.SQS, URL: sqs500.URL + "/000000000000/q"}
	assertProblem(t, h.Do(t, "POST", "/v1/events", key, ce("evt_51")), 502, "outcome-unknown")
	assertProblem(t, h.Do(t, "POST", "/v1/events/batch", key, []any{ce("evt_52")}), 502, "outcome-unknown")
}

// Defect 2: "\ud800" and "\udbff" both became "\uFFFD", and the second event was taken for a
// retry of the first and never billed. A lone surrogate is refused; nothing is merged.
func TestHostile_LoneSurrogates_RefusedNeverMerged(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_s", "free", nil)
	for _, id := range []string{`"sur\ud800"`, `"sur\udbff"`, `"sur\udc00"`, `"sur\ud800\ud800"`, `"sur\ude00\ud83d"`} {
		p := assertProblem(t, h.Do(t, "POST", "/v1/events", key, rawEvent(id, "")), 400, "invalid-request")
		if !strings.Contains(fmt.Sprint(p["detail"]), "lone surrogate") {
			t.Errorf("%s: detail %q", id, p["detail"])
		}
	}
	assertProblem(t, h.Do(t, "POST", "/v1/events/batch", key, "["+rawEvent(`"ok_1"`, "")+","+rawEvent(`"x\ud800"`, "")+"]"), 400, "invalid-request")
	// U+FFFD sent as itself is an id like any other, and distinct from a valid pair.
	sent := []string{rawEvent(`"sur\ufffd"`, ""), rawEvent(`"sur\ud83d\ude00"`, "")}
	for _, body := range sent {
		if r := h.Do(t, "POST", "/v1/events", key, body); r.Status != 202 {
			t.Fatalf("%s: %d %s", body, r.Status, r.Body)
		}
	}
	h.Drain(t, 0)
	storedEvent(t, h, "acct_s", "sur\ufffd", []byte(sent[0]))
	storedEvent(t, h, "acct_s", "sur😀", []byte(sent[1]))
	if n := ledgerItems(t, h); n != 2 {
		t.Errorf("%d ledger entries, want 2", n)
	}
}

// Defect 3: an emoji in id or data got 503 on every try, because the SQS emulator refuses
// characters outside the Basic Multilingual Plane. Queue bodies are base64 now: emoji events
// are queued, billed and stored exactly.
func TestHostile_Emoji_QueuedBilledAndStoredExactly(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_e", "free", nil)
	single := rawEvent(`"emoji-😀"`, `{"m":"🚀 launch","note":"\ud83c\udf89"}`)
	if r := h.Do(t, "POST", "/v1/events", key, single); r.Status != 202 || !strings.Contains(string(r.Body), `"emoji-😀"`) {
		t.Fatalf("single: %d %s", r.Status, r.Body)
	}
	item := rawEvent(`"emoji-🦀"`, `{"m":"𝔽𝕖𝕣𝕣𝕪"}`)
	if r := h.Do(t, "POST", "/v1/events/batch", key, "["+item+"]"); r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	h.Drain(t, 0)
	row := storedEvent(t, h, "acct_e", "emoji-😀", []byte(single))
	storedEvent(t, h, "acct_e", "emoji-🦀", []byte(item))
	if dims := row.Dimensions; dims["m"] != "🚀 launch" || dims["note"] != "🎉" {
		t.Errorf("dimensions %v", dims)
	}
	if got := h.Do(t, "GET", "/v1/events/emoji-%F0%9F%98%80", key, nil).JSON(t); got["id"] != "emoji-😀" || got["status"] != "INSERTED" {
		t.Errorf("read back %v", got)
	}
}

// Defect 4: a valid event with a 2 KB string in data was billed, then refused by the analytics
// row three times and ended UNINSERTABLE with an alarm. The row keeps the lean fields, cut and
// marked; the archive keeps the whole payload; nothing ends UNINSERTABLE.
func TestHostile_ALongPrompt_StoredWhole_ItsRowCutAndMarked(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_p", "free", nil)
	prompt := strings.Repeat("p", 2048)
	long := rawEvent(`"evt_p1"`, `{"prompt":"`+prompt+`","model":"m-1"}`)
	longest := rawEvent(`"evt_p2"`, `{"prompt":"`+strings.Repeat("é", 30<<10)+`"}`) // about 61 KiB
	for _, body := range []string{long, longest} {
		if r := h.Do(t, "POST", "/v1/events", key, body); r.Status != 202 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	h.Drain(t, 0)
	row := storedEvent(t, h, "acct_p", "evt_p1", []byte(long))
	storedEvent(t, h, "acct_p", "evt_p2", []byte(longest))
	if got, _ := row.Dimensions["prompt"].(string); got != prompt[:analytics.MaxDimensionValueBytes] {
		t.Errorf("prompt dimension is %d bytes, want the first %d", len(got), analytics.MaxDimensionValueBytes)
	}
	if cut := row.Truncated; cut["dims.prompt"] != 2048 || len(cut) != 1 {
		t.Errorf("truncated %v, want dims.prompt: 2048", cut)
	}
	if got := h.Counter.Get(metrics.EventsUninsertable) + h.Counter.Get(metrics.EventsQuarantined); got != 0 {
		t.Errorf("%d events quarantined or UNINSERTABLE", got)
	}
}

// Defect 8: a control character in Idempotency-Key got a plain-text 400 from the gateway's HTTP
// server. It is a problem document, and nothing is stored.
func TestHostile_AControlCharacterInIdempotencyKey_IsAProblem(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_k", "free", nil)
	body := rawEvent(`"evt_k1"`, "")
	conn, err := net.DialTimeout("tcp", h.Server.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: ferry\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nIdempotency-Key: k\x01\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assertProblem(t, apptest.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}, 400, "invalid-header")
	if n := queued(t, h); n != 0 || records(t, h) != 0 {
		t.Errorf("%d events queued, %d idempotency records", n, records(t, h))
	}
}

// Defects 7 and 10: an inactive account's events got 402 limit-reached with remaining 0 (while
// GET /v1/usage said 1,000 remain), and its holds, charges and settlements went through. One
// rule now gates every way of spending, with its own problem type, and the worker stores the
// same words as the reason of an event queued before the deactivation.
func TestHostile_AnInactiveAccount_RecordsNoNewUsage(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_i", "free", map[string]any{"tokens": 1000})
	r := h.Do(t, "POST", "/v1/holds", key, map[string]any{"key": "job-1", "feature": "tokens", "amount": 300})
	if r.Status != http.StatusCreated {
		t.Fatalf("hold: %d %s", r.Status, r.Body)
	}
	hold := r.JSON(t)["id"].(string)
	if r := h.Do(t, "POST", "/v1/holds/"+hold+"/charges", key, map[string]any{"key": "step-1", "amount": 100}); r.Status != 200 {
		t.Fatalf("charge: %d %s", r.Status, r.Body)
	}
	// An event queued before the deactivation, processed after it.
	if r := h.Do(t, "POST", "/v1/events", key, ce("evt_before")); r.Status != 202 {
		t.Fatalf("event: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, "PATCH", "/v1/accounts/acct_i", apptest.AdminKey, map[string]any{"status": "inactive"}); r.Status != 200 {
		t.Fatalf("deactivate: %d %s", r.Status, r.Body)
	}
	h.Drain(t, 0)
	refused := []struct{ name, method, path string }{
		{"an event", "POST", "/v1/events"},
		{"a batch", "POST", "/v1/events/batch"},
		{"a new hold", "POST", "/v1/holds"},
		{"a new charge step", "POST", "/v1/holds/" + hold + "/charges"},
		{"a settlement above the recorded usage", "POST", "/v1/holds/" + hold + "/settle"},
	}
	bodies := []any{ce("evt_after"), []any{ce("evt_after")}, map[string]any{"key": "job-2", "feature": "tokens", "amount": 10},
		map[string]any{"key": "step-2", "amount": 50}, map[string]any{"used": 250}}
	var detail string
	for i, c := range refused {
		p := assertProblem(t, h.Do(t, c.method, c.path, key, bodies[i]), http.StatusPaymentRequired, "account-inactive")
		if _, ok := p["remaining"]; ok {
			t.Errorf("%s: an inactive account's 402 says remaining: %v", c.name, p)
		}
		if detail == "" {
			detail = fmt.Sprint(p["detail"])
		} else if fmt.Sprint(p["detail"]) != detail {
			t.Errorf("%s: detail %q differs from %q", c.name, p["detail"], detail)
		}
	}
	// Repeats of what exists record nothing new and answer as before.
	if r := h.Do(t, "POST", "/v1/holds", key, map[string]any{"key": "job-1", "feature": "tokens", "amount": 300}); r.Status != 200 || r.JSON(t)["id"] != hold {
		t.Errorf("the hold's key again: %d %s", r.Status, r.Body)
	}
	if r := h.Do(t, "POST", "/v1/holds/"+hold+"/charges", key, map[string]any{"key": "step-1", "amount": 100}); r.Status != 200 || r.JSON(t)["charged"] != float64(100) {
		t.Errorf("the step key again: %d %s", r.Status, r.Body)
	}
	// The usage it reports agrees: nothing moved, and the hold still holds its 300.
	u := h.Do(t, "GET", "/v1/usage?feature=tokens", key, nil).JSON(t)
	if u["used"] != float64(0) || u["held"] != float64(300) || u["remaining"] != float64(700) {
		t.Errorf("usage %v", u)
	}
	// Settling at the recorded usage releases the rest.
	s := h.Do(t, "POST", "/v1/holds/"+hold+"/settle", key, nil)
	if got := s.JSON(t); s.Status != 200 || got["charged"] != float64(100) || got["released"] != float64(200) {
		t.Errorf("settle at the recorded usage: %d %s", s.Status, s.Body)
	}
	e := h.Do(t, "GET", "/v1/events/evt_before", key, nil).JSON(t)
	if e["status"] != "REJECTED" || !strings.Contains(detail, "inactive account records no new usage") || !strings.Contains(fmt.Sprint(e["reason"]), "inactive account records no new usage") {
		t.Errorf("the event queued before the deactivation: %v; the problem says %q", e, detail)
	}
	if u := h.Do(t, "GET", "/v1/usage", key, nil).JSON(t); u["used"] != float64(0) {
		t.Errorf("events usage %v", u)
	}
}
