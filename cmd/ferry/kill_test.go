package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// The SIGKILL scenario's figures: 2,000 distinct events against a free account whose events
// limit is 1,500 (the plan's own is 1,000; the account overrides it), every fifth sent twice, the
// kill once 300 are billed: well into the drain, well short of done.
var killFigures = killScenario{events: 2000, limit: 1500, afterUsed: 300}

// Against endpoints FERRY_*_ENDPOINT names (make test-moto's moto), the scenario runs at a
// tenth of that size: the same kill mid-drain, restart and exact counts, at a size such an
// emulator drains in minutes (moto's SQS scans the whole queue on every receive, in Python, and
// its DynamoDB serves one request at a time; 2,000 events took over 15 minutes there).
var killFiguresExternal = killScenario{events: 200, limit: 150, afterUsed: 30}

type killScenario struct{ events, limit, afterUsed int64 }

const (
	killResendNth = 5
	// killDrainLimit bounds the wait for the restarted stack to finish the drain; the killed
	// worker's messages come back after ferry dev's 5 s visibility timeout, behind the backlog.
	// On a 2-core machine at a load average of 40 the drain took 3 to over 5 minutes; the bound
	// is for such a machine, and a failure prints what is left (INSERTING entries, queue depths).
	killDrainLimit = 10 * time.Minute
	killPoll       = 50 * time.Millisecond
)

// devOn is a `ferry dev` on the given endpoints under prefix, with its stderr kept for a
// failure's message.
type devOn struct {
	cmd    *exec.Cmd
	url    string
	dir    string
	stderr *bytes.Buffer
}

// startDevOn starts `ferry dev` against endpoints (emulators it did not start) under prefix,
// and waits until it answers /healthz.
func startDevOn(t *testing.T, e cloud.Endpoints, prefix, dir string) *devOn {
	t.Helper()
	cmd := exec.Command(ferryBinary(t), "dev", "--addr", "127.0.0.1:0", "--prefix", prefix)
	cmd.Dir = dir // it writes _dev.env there
	cmd.Env = append(os.Environ(),
		cloud.EnvDynamoDBEndpoint+"="+e.DynamoDB, cloud.EnvS3Endpoint+"="+e.S3, cloud.EnvSQSEndpoint+"="+e.SQS)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &devOn{cmd: cmd, dir: dir, stderr: &bytes.Buffer{}}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	deadline := time.After(devStartLimit)
	for d.url == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("ferry dev ended before it printed its address:\n%s", lastLines(d.stderr.String(), 20))
			}
			if rest, ok := strings.CutPrefix(line, "Ferry is running on "); ok {
				d.url = strings.TrimSpace(rest)
			}
		case <-deadline:
			t.Fatalf("ferry dev did not print its address in %s:\n%s", devStartLimit, lastLines(d.stderr.String(), 20))
		}
	}
	go func() {
		for range lines {
		}
	}()
	for {
		if resp, err := http.Get(d.url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		select {
		case <-deadline:
			t.Fatalf("ferry dev did not become healthy in %s", devStartLimit)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// call sends one request to the stack and decodes a JSON answer into out (if not nil).
func (d *devOn) call(t *testing.T, method, path, key string, body any, out any) int {
	t.Helper()
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, d.url+path, reader)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// A request's bound, not a figure: against an endpoint that serves DynamoDB one request at a
	// time (moto, as make test-moto runs it) on a busy machine, a 100-event batch takes seconds.
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}

// used reads the account's events meter.
func (d *devOn) used(t *testing.T, key string) int64 {
	t.Helper()
	var u struct{ Used int64 }
	if status := d.call(t, "GET", "/v1/usage?feature=events", key, nil, &u); status != http.StatusOK {
		t.Fatalf("usage: %d", status)
	}
	return u.Used
}

// usedNow reads the meter, or reports that the stack did not answer (it was killed).
func (d *devOn) usedNow(key string) (int64, bool) {
	req, err := http.NewRequest("GET", d.url+"/v1/usage?feature=events", nil)
	if err != nil {
		return 0, false
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var u struct{ Used int64 }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&u) != nil {
		return 0, false
	}
	return u.Used, true
}

// post sends one batch as a client does, and returns its answer's status, or false when no
// answer came (the process was killed before or while it was served).
func (d *devOn) post(key string, batch []any) (int, []byte, bool) {
	raw, err := json.Marshal(batch)
	if err != nil {
		return 0, nil, false
	}
	req, err := http.NewRequest("POST", d.url+"/v1/events/batch", bytes.NewReader(raw))
	if err != nil {
		return 0, nil, false
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	// A request's bound, not a figure (see call).
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return 0, nil, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, false
	}
	return resp.StatusCode, body, true
}

func killEvent(i int) map[string]any {
	return map[string]any{"specversion": "1.0", "id": fmt.Sprintf("evt_kill_%04d", i), "source": "/kill", "type": "api.call"}
}

// killClient is the scenario's client: the requests it sends, in order, and what each event's
// answers said.
type killClient struct {
	key      string
	requests [][]any
	// queued: an answer 202 said the event is queued; sent: the event went out in some request.
	queued, sent map[string]bool
}

// send posts the requests in order while stop is open, and returns those that got no answer (or
// were not sent because the stack was killed): the client sends them again later. A 202 must say
// every event is queued; a 402 (the account at its limit, new events in the batch) queues none.
func (c *killClient) send(t *testing.T, dev *devOn, requests [][]any, stop <-chan struct{}) [][]any {
	t.Helper()
	var unanswered [][]any
	for i, batch := range requests {
		select {
		case <-stop:
			return append(unanswered, requests[i:]...)
		default:
		}
		for _, ev := range batch {
			c.sent[ev.(map[string]any)["id"].(string)] = true
		}
		status, body, ok := dev.post(c.key, batch)
		switch {
		case !ok:
			unanswered = append(unanswered, batch)
		case status == http.StatusAccepted:
			var answer struct{ Results []struct{ ID, Status string } }
			if err := json.Unmarshal(body, &answer); err != nil {
				t.Fatalf("a 202 that is not a batch answer: %s", body)
			}
			for _, r := range answer.Results {
				if r.Status != "queued" {
					t.Fatalf("event %s: %s", r.ID, r.Status)
				}
				c.queued[r.ID] = true
			}
		case status == http.StatusPaymentRequired:
			// Refused at the door: the meter is at the limit and the batch holds events the
			// ledger does not know. None of them is queued by this request.
		default:
			t.Fatalf("a batch answered %d: %s", status, body)
		}
	}
	return unanswered
}

// The pipeline's crash safety with a real process and a real SIGKILL: the emulators run apart
// (in this test's process, or the endpoints FERRY_*_ENDPOINT name), `ferry dev` runs on them as
// a child, and a client sends it 2,000 events for a free account limited to 1,500, in batches of
// 100, each followed by its fifth again (a client retrying). The worker drains while the client
// is still sending — units of one account's events, claimed and metered in one transaction each —
// and once 300 are billed `ferry dev` is SIGKILLed: mid-drain, with claims and archive writes in
// flight and requests without an answer. A second `ferry dev` with the same --prefix reuses the
// resources and their state, the killed worker's messages come back after the visibility
// timeout, and the client sends again every request that got no answer, with the same event ids.
// When the drain ends the money is exact: the meter is the limit, 1,500 events INSERTED, every
// other event the stack ever queued REJECTED, none left INSERTING, every event answered "queued"
// in the ledger, and every accepted event's payload archived where its entry says. (A batch
// answered 402 — the limit reached while new events were still arriving — queued none of its
// events; only the events of a request that got no answer may be in the ledger without a
// "queued" answer.)
func TestDev_SIGKILLWhileTheWorkerDrains_TheRestartedStackBillsExactlyTheLimit(t *testing.T) {
	fig := killFigures
	if testenv.External() {
		fig = killFiguresExternal
	}
	endpoints := testenv.Endpoints(t)
	prefix := testenv.UniquePrefix()
	dir := t.TempDir()
	dev := startDevOn(t, endpoints, prefix, dir)
	names := devNames(t, dir)
	clients, err := cloud.New(context.Background(), endpoints, cloud.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := devstack.Teardown(ctx, clients, names); err != nil {
			t.Logf("teardown %s: %v", prefix, err)
		}
	})

	var created struct{ APIKey string }
	if status := dev.call(t, "POST", "/v1/accounts", devstack.DefaultAdminKey, map[string]any{
		"id": "acct_kill", "plan": "free", "limits": map[string]any{"events": fig.limit},
	}, &created); status != http.StatusCreated {
		t.Fatalf("create account: %d", status)
	}
	c := &killClient{key: created.APIKey, queued: map[string]bool{}, sent: map[string]bool{}}
	// Every event once, in batches of 100, each batch followed by its fifth again.
	var requests [][]any
	for start := 0; start < int(fig.events); start += 100 {
		batch, again := []any{}, []any{}
		for i := start; i < min(start+100, int(fig.events)); i++ {
			batch = append(batch, killEvent(i))
			if i%killResendNth == 0 {
				again = append(again, killEvent(i))
			}
		}
		requests = append(requests, batch, again)
	}

	// The watcher SIGKILLs ferry dev once the drain is well under way, while the client sends.
	killed := make(chan struct{})
	var atKill int64
	go func() {
		defer close(killed)
		for deadline := time.Now().Add(killDrainLimit); time.Now().Before(deadline); time.Sleep(killPoll) {
			if used, ok := dev.usedNow(c.key); ok && used >= fig.afterUsed {
				atKill = used
				_ = dev.cmd.Process.Signal(syscall.SIGKILL)
				return
			}
		}
	}()
	unanswered := c.send(t, dev, requests, killed)
	<-killed
	_ = dev.cmd.Wait()
	if atKill == 0 {
		t.Fatalf("the worker did not bill %d events in %s", fig.afterUsed, killDrainLimit)
	}
	if atKill >= fig.limit {
		t.Fatalf("the meter was already %d when ferry dev was killed: the kill did not land mid-drain", atKill)
	}
	t.Logf("killed at used=%d with %d of %d requests unanswered; the ledger then: %v", atKill, len(unanswered), len(requests), killLedger(t, clients, names).counts)

	dev = startDevOn(t, endpoints, prefix, dir)
	if again := devNames(t, dir); !sameNames(again, names) {
		t.Fatalf("the restarted stack uses other resources: %+v, first %+v", again, names)
	}
	if left := c.send(t, dev, unanswered, nil); len(left) > 0 {
		t.Fatalf("%d requests got no answer from the restarted stack", len(left))
	}
	restarted := time.Now()
	deadline := restarted.Add(killDrainLimit)
	lastLog := restarted
	// The queue's attributes are cheap; the ledger is scanned only once the queue is empty (a
	// scan holds minidyn's one lock for the whole table, which would slow the drain it waits on).
	var l killLedgerState
	for {
		if queueEmpty(t, clients, names) {
			if l = killLedger(t, clients, names); l.counts[ledger.Inserting] == 0 && l.missing(c.queued) == "" {
				break
			}
		}
		if time.Since(lastLog) > 10*time.Second {
			t.Logf("%s after the restart: used %d", time.Since(restarted).Round(time.Second), dev.used(t, c.key))
			lastLog = time.Now()
		}
		if time.Now().After(deadline) {
			l = killLedger(t, clients, names)
			t.Fatalf("the drain did not finish in %s: %v, used %d, %s\n%s\nferry dev's log ends:\n%s", killDrainLimit,
				l.counts, dev.used(t, c.key), l.missing(c.queued), stuck(t, clients, names, l), lastLines(dev.stderr.String(), 30))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("drained %s after the restart: %v; %d events answered queued, %d sent", time.Since(restarted).Round(time.Second), l.counts, len(c.queued), len(c.sent))
	if got := dev.used(t, c.key); got != fig.limit {
		t.Errorf("used %d, want %d", got, fig.limit)
	}
	entries := l.counts[ledger.Inserted] + l.counts[ledger.Rejected]
	if l.counts[ledger.Inserted] != int(fig.limit) || len(l.counts) != 2 || entries < len(c.queued) {
		t.Errorf("the ledger: %v; want %d INSERTED, every other event queued (%d answered so) REJECTED, nothing else", l.counts, fig.limit, len(c.queued))
	}
	for id := range l.status {
		if !c.sent[id] {
			t.Errorf("%s is in the ledger and was never sent", id)
		}
	}
	checkArchive(t, clients, names, l)
	if err := dev.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = dev.cmd.Wait()
}

// devNames reads the resource names ferry dev wrote to _dev.env in dir.
func devNames(t *testing.T, dir string) resources.Names {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "_dev.env"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "export ")
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = strings.Trim(v, `"'`)
		}
	}
	names, err := resources.NamesFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("names in _dev.env: %v", err)
	}
	return names
}

func sameNames(a, b resources.Names) bool {
	return fmt.Sprint(a.Tables, a.Queues, a.Buckets) == fmt.Sprint(b.Tables, b.Queues, b.Buckets)
}

// killEntry is the part of a ledger item the scenario reads: an event's entry, or (pk starting
// "#batch#") a unit's record of being done.
type killEntry struct {
	PK                  string `dynamodbav:"pk"`
	AccountID           string `dynamodbav:"accountId"`
	EventID             string `dynamodbav:"eventId"`
	Status              string `dynamodbav:"status"`
	RowInsertedAtMs     int64  `dynamodbav:"rowInsertedAtMs"`
	BillingAcceptedAtMs int64  `dynamodbav:"billingAcceptedAtMs"`
	UpdatedAtMs         int64  `dynamodbav:"updatedAtMs"`
	ArchiveKey          string `dynamodbav:"archiveKey"`
	ArchiveOffset       int64  `dynamodbav:"archiveOffset"`
	ArchiveLength       int64  `dynamodbav:"archiveLength"`
	Batch               string `dynamodbav:"batch"`
	DoneAtMs            int64  `dynamodbav:"doneAtMs"`
}

// killLedgerState is the ledger as its readers see it: each entry resolved (a unit's INSERTING
// entry is INSERTED once the unit is recorded done), counted by status.
type killLedgerState struct {
	entries map[string]ledger.Entry
	status  map[string]ledger.Status
	counts  map[ledger.Status]int
}

// missing names an event answered "queued" that has no entry ("" when there is none).
func (l killLedgerState) missing(queued map[string]bool) string {
	for id := range queued {
		if _, ok := l.status[id]; !ok {
			return "queued and not in the ledger: " + id
		}
	}
	return ""
}

// killLedger reads the whole ledger, strongly consistent, and resolves it.
func killLedger(t *testing.T, c cloud.Clients, names resources.Names) killLedgerState {
	t.Helper()
	var items []killEntry
	p := dynamodb.NewScanPaginator(c.DynamoDB, &dynamodb.ScanInput{TableName: aws.String(names.Table(resources.TableLedger)), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("scan the ledger: %v", err)
		}
		var part []killEntry
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &part); err != nil {
			t.Fatal(err)
		}
		items = append(items, part...)
	}
	done := map[string]int64{}
	for _, it := range items {
		if strings.HasPrefix(it.PK, "#batch#") {
			done[it.Batch] = it.DoneAtMs
		}
	}
	l := killLedgerState{entries: map[string]ledger.Entry{}, status: map[string]ledger.Status{}, counts: map[ledger.Status]int{}}
	for _, it := range items {
		if strings.HasPrefix(it.PK, "#batch#") {
			continue
		}
		at, recorded := done[it.Batch]
		e := ledger.Resolve(ledger.Entry{
			AccountID: it.AccountID, EventID: it.EventID, Status: ledger.Status(it.Status), RowInsertedAtMs: it.RowInsertedAtMs,
			BillingAcceptedAtMs: it.BillingAcceptedAtMs, UpdatedAtMs: it.UpdatedAtMs, ArchiveKey: it.ArchiveKey,
			ArchiveOffset: it.ArchiveOffset, ArchiveLength: it.ArchiveLength, Batch: it.Batch,
		}, recorded, at)
		l.entries[e.EventID], l.status[e.EventID] = e, e.Status
		l.counts[e.Status]++
	}
	return l
}

// stuck describes, for a failure's message, the entries still INSERTING and the queues' depths.
func stuck(t *testing.T, c cloud.Clients, names resources.Names, l killLedgerState) string {
	t.Helper()
	var b strings.Builder
	for _, e := range l.entries {
		if e.Status == ledger.Inserting {
			fmt.Fprintf(&b, "INSERTING %s billed=%v unit %q updated %s ago\n", e.EventID, e.Billed(), e.Batch, time.Since(time.UnixMilli(e.UpdatedAtMs)).Round(time.Second))
		}
	}
	for _, q := range []string{resources.QueueEvents, resources.Queues[0].DLQLogical()} {
		out, err := c.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(names.QueueURL(q)), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
		})
		if err == nil {
			fmt.Fprintf(&b, "queue %s: visible %s, in flight %s\n", q, out.Attributes["ApproximateNumberOfMessages"], out.Attributes["ApproximateNumberOfMessagesNotVisible"])
		}
	}
	return b.String()
}

// queueEmpty reports whether the events queue holds nothing, visible or in flight.
func queueEmpty(t *testing.T, c cloud.Clients, names resources.Names) bool {
	t.Helper()
	out, err := c.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(names.QueueURL(resources.QueueEvents)),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		t.Fatalf("queue attributes: %v", err)
	}
	return out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)] == "0" &&
		out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)] == "0"
}

// checkArchive checks that every INSERTED event's payload reads back from where its entry says,
// as the event it is, and that no REJECTED one names an archive location. A unit's object holds
// every member's payload, so an object may hold a rejected member's bytes, and an object whose
// members were all claimed by other units first is pointed to by none: waste, not loss.
func checkArchive(t *testing.T, c cloud.Clients, names resources.Names, l killLedgerState) {
	t.Helper()
	a := &archive.S3{Client: c.S3, Bucket: names.Bucket(resources.BucketArchive)}
	objects := map[string]bool{}
	for _, e := range l.entries {
		switch e.Status {
		case ledger.Inserted:
			objects[e.ArchiveLocation().Key] = true
			payload, err := a.Read(context.Background(), e.ArchiveLocation())
			if err != nil {
				t.Errorf("INSERTED %s has no archived payload at %+v: %v", e.EventID, e.ArchiveLocation(), err)
				continue
			}
			var ev struct{ ID string }
			if err := json.Unmarshal(payload, &ev); err != nil || ev.ID != e.EventID {
				t.Errorf("INSERTED %s: its archived payload is %s", e.EventID, payload)
			}
		default:
			if e.ArchiveKey != "" {
				t.Errorf("%s %s names an archived payload at %s", e.Status, e.EventID, e.ArchiveKey)
			}
		}
	}
	t.Logf("%d archive objects hold the %d accepted events", len(objects), l.counts[ledger.Inserted])
}
