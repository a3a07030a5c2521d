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
	"github.com/aws/aws-sdk-go-v2/service/s3"
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

func killEvent(i int) map[string]any {
	return map[string]any{"specversion": "1.0", "id": fmt.Sprintf("evt_kill_%04d", i), "source": "/kill", "type": "api.call"}
}

// The pipeline's crash safety with a real process and a real SIGKILL: the emulators run apart
// (in this test's process, or the endpoints FERRY_*_ENDPOINT name), `ferry dev` runs on them as
// a child, takes 2,000 events for a free account limited to 1,500 (every fifth sent twice), and
// is SIGKILLed while its worker drains them — mid-batch, with claims, checkpoints and archive
// writes in flight. A second `ferry dev` with the same --prefix reuses the resources and their
// state, the killed worker's messages come back after the visibility timeout, and when the
// drain ends the meter is exactly the limit: 1,500 events INSERTED, 500 REJECTED, none left
// INSERTING, and one archived payload for each accepted event and for no other.
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
	key := created.APIKey

	// Every event once, in batches of 100, each batch followed by its fifth again (a client
	// retrying): the retries land while the worker is billing the first copies.
	for start := 0; start < int(fig.events); start += 100 {
		batch, again := []any{}, []any{}
		for i := start; i < start+100; i++ {
			batch = append(batch, killEvent(i))
			if i%killResendNth == 0 {
				again = append(again, killEvent(i))
			}
		}
		var answer struct{ Results []struct{ ID, Status string } }
		if status := dev.call(t, "POST", "/v1/events/batch", key, batch, &answer); status != http.StatusAccepted {
			t.Fatalf("batch at %d: %d (the meter was %d: the worker was faster than the sends)", start, status, dev.used(t, key))
		}
		for _, r := range answer.Results {
			if r.Status != "queued" {
				t.Fatalf("event %s: %s", r.ID, r.Status)
			}
		}
		// A retry is queued again, or refused by the advisory gate once the meter is full and
		// the event not yet in the ledger: either way it was queued once already.
		if status := dev.call(t, "POST", "/v1/events/batch", key, again, nil); status != http.StatusAccepted && status != http.StatusPaymentRequired {
			t.Fatalf("retries at %d: %d", start, status)
		}
	}

	// SIGKILL once the drain is well under way.
	deadline := time.Now().Add(killDrainLimit)
	var atKill int64
	for atKill = dev.used(t, key); atKill < fig.afterUsed; atKill = dev.used(t, key) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker billed %d events in %s", atKill, killDrainLimit)
		}
		time.Sleep(killPoll)
	}
	if err := dev.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = dev.cmd.Wait()
	if atKill >= fig.limit {
		t.Fatalf("the meter was already %d when ferry dev was killed: the kill did not land mid-drain", atKill)
	}
	counts := ledgerCounts(t, clients, names)
	t.Logf("killed at used=%d; the ledger then: %v", atKill, counts)

	dev = startDevOn(t, endpoints, prefix, dir)
	if again := devNames(t, dir); !sameNames(again, names) {
		t.Fatalf("the restarted stack uses other resources: %+v, first %+v", again, names)
	}
	restarted := time.Now()
	deadline = restarted.Add(killDrainLimit)
	lastLog := restarted
	// The queue's attributes are cheap; the ledger is scanned only once the queue is empty (a
	// scan holds minidyn's one lock for the whole table, which would slow the drain it waits on).
	for {
		if queueEmpty(t, clients, names) {
			counts = ledgerCounts(t, clients, names)
			if counts[ledger.Inserted]+counts[ledger.Rejected] == int(fig.events) {
				break
			}
		}
		if time.Since(lastLog) > 10*time.Second {
			t.Logf("%s after the restart: used %d", time.Since(restarted).Round(time.Second), dev.used(t, key))
			lastLog = time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drain did not finish in %s: %v, used %d\n%s\nferry dev's log ends:\n%s", killDrainLimit,
				ledgerCounts(t, clients, names), dev.used(t, key), stuck(t, clients, names), lastLines(dev.stderr.String(), 30))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("drained %s after the restart", time.Since(restarted).Round(time.Second))
	if got := dev.used(t, key); got != fig.limit {
		t.Errorf("used %d, want %d", got, fig.limit)
	}
	if counts[ledger.Inserted] != int(fig.limit) || counts[ledger.Rejected] != int(fig.events-fig.limit) || counts[ledger.Inserting] != 0 || len(counts) != 2 {
		t.Errorf("the ledger: %v; want %d INSERTED, %d REJECTED, nothing else", counts, fig.limit, fig.events-fig.limit)
	}
	checkArchive(t, clients, names)
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

// killEntry is the part of a ledger entry the scenario counts.
type killEntry struct {
	AccountID           string `dynamodbav:"accountId"`
	EventID             string `dynamodbav:"eventId"`
	Status              string `dynamodbav:"status"`
	RowInsertedAtMs     int64  `dynamodbav:"rowInsertedAtMs"`
	BillingAcceptedAtMs int64  `dynamodbav:"billingAcceptedAtMs"`
	UpdatedAtMs         int64  `dynamodbav:"updatedAtMs"`
}

// stuck describes, for a failure's message, the entries still INSERTING and the queues' depths.
func stuck(t *testing.T, c cloud.Clients, names resources.Names) string {
	t.Helper()
	var b strings.Builder
	for _, e := range ledgerEntries(t, c, names) {
		if ledger.Status(e.Status) == ledger.Inserting {
			fmt.Fprintf(&b, "INSERTING %s billed=%v updated %s ago\n", e.EventID, e.BillingAcceptedAtMs != 0, time.Since(time.UnixMilli(e.UpdatedAtMs)).Round(time.Second))
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

// ledgerEntries reads the whole ledger, strongly consistent.
func ledgerEntries(t *testing.T, c cloud.Clients, names resources.Names) []killEntry {
	t.Helper()
	var out []killEntry
	p := dynamodb.NewScanPaginator(c.DynamoDB, &dynamodb.ScanInput{TableName: aws.String(names.Table(resources.TableLedger)), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("scan the ledger: %v", err)
		}
		var entries []killEntry
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &entries); err != nil {
			t.Fatal(err)
		}
		out = append(out, entries...)
	}
	return out
}

// ledgerCounts counts the ledger's entries by status.
func ledgerCounts(t *testing.T, c cloud.Clients, names resources.Names) map[ledger.Status]int {
	t.Helper()
	counts := map[ledger.Status]int{}
	for _, e := range ledgerEntries(t, c, names) {
		counts[ledger.Status(e.Status)]++
	}
	return counts
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

// checkArchive checks the archive holds exactly one object per INSERTED event, under the key
// its ledger entry names, and none for a REJECTED one.
func checkArchive(t *testing.T, c cloud.Clients, names resources.Names) {
	t.Helper()
	objects := map[string]bool{}
	p := s3.NewListObjectsV2Paginator(c.S3, &s3.ListObjectsV2Input{Bucket: aws.String(names.Bucket(resources.BucketArchive))})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("list the archive: %v", err)
		}
		for _, o := range page.Contents {
			objects[aws.ToString(o.Key)] = true
		}
	}
	want := 0
	for _, e := range ledgerEntries(t, c, names) {
		k := archive.Key(e.AccountID, e.EventID, e.RowInsertedAtMs)
		switch ledger.Status(e.Status) {
		case ledger.Inserted:
			want++
			if !objects[k] {
				t.Errorf("INSERTED %s has no archived payload at %s", e.EventID, k)
			}
		default:
			if objects[k] {
				t.Errorf("%s %s has an archived payload", e.Status, e.EventID)
			}
		}
	}
	if len(objects) != want {
		t.Errorf("%d archive objects for %d accepted events", len(objects), want)
	}
}
