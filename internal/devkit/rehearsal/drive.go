package rehearsal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// Bounds of the drive.
const (
	// pollWait is how long the rehearsal, playing Lambda's SQS poller, waits for a batch.
	pollWait = 5 * time.Second
	// maxPolls bounds the receives for one batch.
	maxPolls = 3
	// fixtureAccountID is the account the API Gateway fixtures create and send events for.
	fixtureAccountID = "acct_fixture"
	// eventFixture is the event ingest is sent; its body's id is the event the worker meters.
	eventFixture = "apigw/post-event.json"
	// accountKeyPlaceholder and operatorKeyPlaceholder are the fixtures' Authorization values,
	// replaced by the account's key and by the stack's operator key.
	accountKeyPlaceholder  = "Bearer fk_REPLACED_BY_THE_ACCOUNTS_KEY"
	operatorKeyPlaceholder = "Bearer dev-admin-key"
)

// Drive is the rehearsal's traffic: AWS-shaped invocations of the stack's functions, each under
// the Runtime Interface Emulator with the environment and the role CloudFormation gave it.
type Drive struct {
	Moto     *Moto
	Template Template
	Stack    Stack
	// RIE is the emulator binary; Build holds <function>/bootstrap for this machine.
	RIE, Build string
	// Testdata is the repository's testdata folder (the fixtures).
	Testdata string
	// Log receives one line per step.
	Log func(format string, args ...any)

	functions map[string]Function // by logical id
	consumers []consumer
	admin     Clients
	// lastLogs is what the last consumer invocation logged, shown when its effect is missing.
	lastLogs string
}

// Prepare loads every created function (its resolved environment, checked for values that did
// not resolve) and takes each one's role credentials. Call it before IAM is enforced.
func (d *Drive) Prepare(ctx context.Context) error {
	d.admin = d.Moto.Admin()
	d.functions = map[string]Function{}
	var errs []error
	for _, id := range sortedKeys(d.Template.Resources) {
		r := d.Template.Resources[id]
		if r.Type != "AWS::Lambda::Function" {
			continue
		}
		physical, ok := d.Stack.Physical[id]
		if !ok {
			errs = append(errs, fmt.Errorf("function %s was not created", id))
			continue
		}
		fn, err := LoadFunction(ctx, d.admin, physical, id, d.Build)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := checkEnvironment(r, fn); err != nil {
			errs = append(errs, err)
		}
		d.functions[id] = fn
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return d.loadConsumers(ctx)
}

// checkEnvironment reports each variable the template sets that CloudFormation did not resolve
// into the created function: missing, empty, or naming a resource that does not exist.
func checkEnvironment(r Resource, fn Function) error {
	env, _ := r.Properties["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	var errs []error
	for _, k := range sortedKeys(vars) {
		if v, ok := fn.Env[k]; !ok || unresolved(v) {
			errs = append(errs, fmt.Errorf("function %s: %s resolved to %q from %v", fn.Name, k, v, vars[k]))
		}
	}
	return errors.Join(errs...)
}

// Run drives the stack, in order: an account, an event through ingest, the stack's queue and
// the worker into the stack's tables; a hold and the usage read; a signed Stripe webhook
// through webhooks and the inbox queue into the inbox worker; the reconcile route; every
// schedule. It stops at the first failure. Call it once IAM is enforced.
func (d *Drive) Run(ctx context.Context) error {
	operatorKey, err := d.secretValue(ctx, "AdminKeySecretArn")
	if err != nil {
		return err
	}
	var accountKey string
	withKey := func(raw []byte) ([]byte, error) {
		return setHeader(raw, "authorization", func(v string) string {
			switch v {
			case accountKeyPlaceholder:
				return "Bearer " + accountKey
			case operatorKeyPlaceholder:
				return "Bearer " + operatorKey
			}
			return v
		})
	}

	// An account, created on the operator route, as API Gateway would invoke the route's function.
	created, err := d.httpRoute(ctx, "apigw/create-account.json", withKey, http.StatusCreated)
	if err != nil {
		return err
	}
	accountKey, _ = created["apiKey"].(string)
	if accountKey == "" {
		return fmt.Errorf("POST /v1/accounts: no apiKey in %v", created)
	}
	// An event: ingest queues it on the stack's queue.
	if _, err := d.httpRoute(ctx, eventFixture, withKey, http.StatusAccepted); err != nil {
		return err
	}
	eventID, err := d.fixtureEventID()
	if err != nil {
		return err
	}
	// The worker, given the batch the stack's queue holds, as its event source would.
	worker, err := d.consumer(ctx, resources.FunctionWorker)
	if err != nil {
		return err
	}
	if err := d.pollAndInvoke(ctx, worker, "the events queue"); err != nil {
		return err
	}
	if err := d.checkMetered(ctx, worker, eventID); err != nil {
		return err
	}
	if _, err := d.httpRoute(ctx, "apigw/reserve-hold.json", withKey, http.StatusCreated); err != nil {
		return err
	}
	if _, err := d.httpRoute(ctx, "apigw/get-usage.json", withKey, http.StatusOK); err != nil {
		return err
	}
	if _, err := d.httpRoute(ctx, "apigw/reconcile.json", withKey, http.StatusOK); err != nil {
		return err
	}

	// A Stripe delivery, signed as Stripe signs it with the secret the stack created: stored and
	// nudged onto the inbox queue; the inbox worker, given that batch, settles it.
	stripeSecret, err := d.secretValue(ctx, "StripeWebhookSecretArn")
	if err != nil {
		return err
	}
	signed := func(raw []byte) ([]byte, error) {
		var req events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			return nil, err
		}
		req.Headers["stripe-signature"] = stripewebhook.Sign([]byte(req.Body), stripeSecret, time.Now())
		return json.Marshal(req)
	}
	stored, err := d.httpRoute(ctx, "apigw/stripe-webhook.json", signed, http.StatusOK)
	if err != nil {
		return err
	}
	billingEventID, _ := stored["id"].(string)
	inboxWorker, err := d.consumer(ctx, resources.FunctionInbox)
	if err != nil {
		return err
	}
	if err := d.pollAndInvoke(ctx, inboxWorker, "the inbox queue"); err != nil {
		return err
	}
	if err := d.checkSettled(ctx, inboxWorker, billingEventID); err != nil {
		return err
	}

	// Every schedule the template declares, with Scheduler's input to its target.
	return d.schedules(ctx)
}

// fixtureEventID is the id of the event the event fixture sends.
func (d *Drive) fixtureEventID() (string, error) {
	raw, err := os.ReadFile(filepath.Join(d.Testdata, eventFixture))
	if err != nil {
		return "", err
	}
	var req events.APIGatewayV2HTTPRequest
	var body struct{ ID string }
	if err := json.Unmarshal(raw, &req); err != nil {
		return "", err
	}
	if err := json.Unmarshal([]byte(req.Body), &body); err != nil || body.ID == "" {
		return "", fmt.Errorf("%s: no event id in its body (%v)", eventFixture, err)
	}
	return body.ID, nil
}

// secretValue reads the secret an output names, as the operator would.
func (d *Drive) secretValue(ctx context.Context, output string) (string, error) {
	arn := d.Stack.Outputs[output]
	out, err := d.admin.SecretsManager.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return "", fmt.Errorf("read %s (%s): %w", output, arn, err)
	}
	return aws.ToString(out.SecretString), nil
}

// httpRoute sends an API Gateway request fixture to the function the template's route for its
// routeKey integrates (or the $default route's), and checks the status.
func (d *Drive) httpRoute(ctx context.Context, fixture string, adjust func([]byte) ([]byte, error), status int) (map[string]any, error) {
	raw, err := os.ReadFile(filepath.Join(d.Testdata, fixture))
	if err != nil {
		return nil, err
	}
	if raw, err = adjust(raw); err != nil {
		return nil, err
	}
	var req events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, fmt.Errorf("%s: %w", fixture, err)
	}
	logical, err := RouteFunction(d.Template, req.RouteKey)
	if err != nil {
		return nil, err
	}
	fn, ok := d.functions[logical]
	if !ok {
		return nil, fmt.Errorf("route %s: function %s was not created", req.RouteKey, logical)
	}
	inv, err := Invoke(ctx, d.RIE, fn, d.Moto.URL, raw)
	if err != nil {
		return nil, err
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(inv.Answer, &resp); err != nil {
		return nil, &FunctionError{Function: fn.Name, Reason: "not an API Gateway v2 response: " + string(inv.Answer), Logs: inv.Logs}
	}
	if resp.StatusCode != status {
		return nil, &FunctionError{Function: fn.Name, Reason: fmt.Sprintf("%s answered %d, want %d: %s", req.RouteKey, resp.StatusCode, status, resp.Body), Logs: inv.Logs}
	}
	var body map[string]any
	_ = json.Unmarshal([]byte(resp.Body), &body)
	d.Log("%-28s → %-10s %d", req.RouteKey, fn.Name, resp.StatusCode)
	return body, nil
}

// RouteFunction finds, in the template, the function an HTTP API route key is integrated with:
// Route.Target "integrations/<Ref Integration>", Integration.IntegrationUri the function's ARN.
// A key no route declares goes to the $default route.
func RouteFunction(t Template, routeKey string) (string, error) {
	find := func(key string) (string, bool) {
		for _, id := range sortedKeys(t.Resources) {
			r := t.Resources[id]
			if r.Type != "AWS::ApiGatewayV2::Route" || r.Properties["RouteKey"] != key {
				continue
			}
			for _, integration := range refs(r.Properties["Target"]) {
				for _, fn := range refs(t.Resources[integration].Properties["IntegrationUri"]) {
					if t.Resources[fn].Type == "AWS::Lambda::Function" {
						return fn, true
					}
				}
			}
		}
		return "", false
	}
	if fn, ok := find(routeKey); ok {
		return fn, nil
	}
	if fn, ok := find("$default"); ok {
		return fn, nil
	}
	return "", fmt.Errorf("no route for %s and no $default route in the template", routeKey)
}

// consumer is a queue consumer with its event source mapping, as moto's Lambda holds it.
type consumer struct {
	fn        Function
	queueURL  string
	queueArn  string
	batchSize int32
}

// consumer is the function named name (its definition's name) with the queue its created event
// source mapping reads.
func (d *Drive) consumer(_ context.Context, name string) (consumer, error) {
	for _, c := range d.consumers {
		if functionDirName(c.fn.Name) == name {
			return c, nil
		}
	}
	return consumer{}, fmt.Errorf("no created function %s with an event source mapping", name)
}

// loadConsumers reads every created event source mapping and the queue it reads. moto's Lambda
// answers a signed ListEventSourceMappings with a signature mismatch once IAM is enforced, so
// this runs before.
func (d *Drive) loadConsumers(ctx context.Context) error {
	for _, id := range sortedKeys(d.functions) {
		fn := d.functions[id]
		out, err := d.admin.Lambda.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{FunctionName: aws.String(fn.Name)})
		if err != nil {
			return fmt.Errorf("event source mappings of %s: %w", fn.Name, err)
		}
		for _, m := range out.EventSourceMappings {
			arn := aws.ToString(m.EventSourceArn)
			url, err := d.admin.SQS.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(arn[strings.LastIndex(arn, ":")+1:])})
			if err != nil {
				return fmt.Errorf("queue %s of %s's event source: %w", arn, fn.Name, err)
			}
			d.consumers = append(d.consumers, consumer{fn: fn, queueURL: aws.ToString(url.QueueUrl), queueArn: arn, batchSize: aws.ToInt32(m.BatchSize)})
		}
	}
	return nil
}

// pollAndInvoke plays Lambda's SQS poller: it receives a batch from the consumer's queue with
// the function's own role (as the event source mapping does), invokes the function with it as
// an SQS event, and deletes what the function did not report as failed.
func (d *Drive) pollAndInvoke(ctx context.Context, c consumer, what string) error {
	asFunction := d.Moto.clients(c.fn.Creds).SQS
	var msgs []sqstypes.Message
	for i := 0; i < maxPolls && len(msgs) == 0; i++ {
		out, err := asFunction.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(c.queueURL), MaxNumberOfMessages: min(c.batchSize, 10), WaitTimeSeconds: int32(pollWait / time.Second),
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			return fmt.Errorf("receive from %s with the role of %s: %w", what, c.fn.Name, err)
		}
		msgs = out.Messages
	}
	if len(msgs) == 0 {
		return fmt.Errorf("%s is empty: nothing reached it for %s", what, c.fn.Name)
	}
	batch := events.SQSEvent{}
	for _, m := range msgs {
		attrs := map[string]string{}
		for k, v := range m.Attributes {
			attrs[k] = v
		}
		batch.Records = append(batch.Records, events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Md5OfBody: aws.ToString(m.MD5OfBody), Attributes: attrs, EventSource: "aws:sqs", EventSourceARN: c.queueArn, AWSRegion: Region,
		})
	}
	event, err := json.Marshal(batch)
	if err != nil {
		return err
	}
	inv, err := Invoke(ctx, d.RIE, c.fn, d.Moto.URL, event)
	if err != nil {
		return err
	}
	d.lastLogs = inv.Logs
	var resp events.SQSEventResponse
	if err := json.Unmarshal(inv.Answer, &resp); err != nil || len(resp.BatchItemFailures) != 0 {
		return &FunctionError{Function: c.fn.Name, Reason: fmt.Sprintf("answered %s (%v); want no batch item failures", inv.Answer, err), Logs: inv.Logs}
	}
	for _, m := range msgs {
		if _, err := asFunction.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(c.queueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
			return fmt.Errorf("delete from %s with the role of %s: %w", what, c.fn.Name, err)
		}
	}
	d.Log("%-28s → %-10s %d message(s), no failure", what, c.fn.Name, len(msgs))
	return nil
}

// checkMetered reads, in the tables the worker's environment names, the fixture event: INSERTED
// in the ledger, and its account's usage counted.
func (d *Drive) checkMetered(ctx context.Context, worker consumer, eventID string) error {
	env := worker.fn.Env
	store := &ledger.Table{DB: d.admin.DynamoDB, Table: env[resources.EnvVar("TABLE", resources.TableLedger)],
		Usage: usage.Table{DB: d.admin.DynamoDB, Name: env[resources.EnvVar("TABLE", resources.TableUsage)]}}
	e, err := store.Get(ctx, fixtureAccountID, eventID)
	if err != nil || e.Status != ledger.Inserted {
		return &FunctionError{Function: worker.fn.Name, Reason: fmt.Sprintf("the event %s in %s: %v (status %q); want it INSERTED", eventID, store.Table, err, e.Status), Logs: d.lastLogs}
	}
	d.Log("%-28s   %-10s %s %s", "the meter", store.Table, eventID, e.Status)
	return nil
}

// checkSettled reads the billing event in the table the inbox worker's environment names: its
// customer links no account, so it is IGNORED with its reason.
func (d *Drive) checkSettled(ctx context.Context, worker consumer, id string) error {
	store := &inbox.Table{DB: d.admin.DynamoDB, Table: worker.fn.Env[resources.EnvVar("TABLE", resources.TableInbox)]}
	e, err := store.Get(ctx, id)
	if err != nil || e.Status != inbox.Ignored || e.Reason == "" {
		return &FunctionError{Function: worker.fn.Name, Reason: fmt.Sprintf("the billing event %s in %s: %v (status %q, reason %q); want it IGNORED with its reason", id, store.Table, err, e.Status, e.Reason), Logs: d.lastLogs}
	}
	d.Log("%-28s   %-10s %s %s", "the inbox", store.Table, id, e.Status)
	return nil
}

// schedules invokes the target of every schedule in the template with the input Scheduler
// sends (the target's Input, or {}), and wants a run without error.
func (d *Drive) schedules(ctx context.Context) error {
	var ids []string
	for _, id := range sortedKeys(d.Template.Resources) {
		if d.Template.Resources[id].Type == "AWS::Scheduler::Schedule" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		target, _ := d.Template.Resources[id].Properties["Target"].(map[string]any)
		var fnID string
		for _, ref := range refs(target["Arn"]) {
			if d.Template.Resources[ref].Type == "AWS::Lambda::Function" {
				fnID = ref
			}
		}
		fn, ok := d.functions[fnID]
		if !ok {
			return fmt.Errorf("schedule %s: its target %v is not a created function", id, target["Arn"])
		}
		input := "{}"
		if s, ok := target["Input"].(string); ok {
			input = s
		}
		inv, err := Invoke(ctx, d.RIE, fn, d.Moto.URL, []byte(input))
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(inv.Answer)) != "null" {
			return &FunctionError{Function: fn.Name, Reason: "answered " + string(inv.Answer) + ", want null (a run without error)", Logs: inv.Logs}
		}
		d.Log("%-28s → %-10s ran", "schedule "+scheduleRate(d.Template.Resources[id]), fn.Name)
	}
	return nil
}

func scheduleRate(r Resource) string {
	s, _ := r.Properties["ScheduleExpression"].(string)
	return s
}

// setHeader rewrites one header of an API Gateway v2 request fixture.
func setHeader(raw []byte, name string, f func(string) string) ([]byte, error) {
	var req events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, err
	}
	if v, ok := req.Headers[name]; ok {
		req.Headers[name] = f(v)
	}
	return json.Marshal(req)
}
