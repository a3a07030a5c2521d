package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	inboxfn "github.com/ferrymeter/ferry/functions/inbox"
	webhooksfn "github.com/ferrymeter/ferry/functions/webhooks"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/functions"
	apifn "github.com/ferrymeter/ferry/functions/api"
	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/operator/deliver"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// Defaults of the inbox benchmark.
const (
	benchInboxAccounts = 100
	benchInboxCopies   = 2
	benchInboxTimeout  = 10 * time.Minute
	benchInboxSecret   = "whsec_bench"
	benchInboxPrice    = "price_ferry_plus_monthly"
)

// InboxOptions shape the inbox benchmark.
type InboxOptions struct {
	// Accounts is how many accounts get one payment and one plan change each.
	Accounts int
	// Copies is how many extra deliveries of each payment arrive (the provider's retries).
	Copies int
}

// DefaultInbox is the run the README reports.
var DefaultInbox = InboxOptions{Accounts: benchInboxAccounts, Copies: benchInboxCopies}

// inboxPhase is what one phase of the benchmark consumed at the DynamoDB client.
type inboxPhase struct {
	name  string
	ops   int
	units instrument.OpUsage
	calls map[string]instrument.OpUsage
}

func (p inboxPhase) per(v float64) float64 { return v / float64(p.ops) }

// calls names the operations of a phase with their count per operation ("TransactWriteItems 1").
func (p inboxPhase) callList() string {
	names := make([]string, 0, len(p.calls))
	for n := range p.calls {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", n, p.per(float64(p.calls[n].Calls))))
	}
	return strings.Join(parts, ", ")
}

// Inbox measures the webhook inbox on the same emulators: round trips and request units per
// stored delivery, per copy, and per applied event (a payment that opens its cycle and grants a
// plan's allowance; a plan change whose grant row is already there), beside a naive handler that
// applies every delivery on arrival with one write (and so bills every copy again). Stripe
// deliveries are used (the Kinde path does the same DynamoDB calls; its signature check is a
// JWT's, with no DynamoDB).
func Inbox(ctx context.Context, o InboxOptions, stdout, stderr io.Writer) error {
	if o.Accounts < 1 || o.Copies < 0 {
		return errors.New("--accounts must be positive and --copies not negative")
	}
	ctx, cancel := context.WithTimeout(ctx, benchInboxTimeout)
	defer cancel()

	fmt.Fprintln(stderr, "starting the local stack…")
	emu, err := devstack.StartEmulators(devstack.EmulatorOptions{External: cloud.EndpointsFromEnv()})
	if err != nil {
		return err
	}
	defer emu.Stop()
	meter := instrument.NewRequestMeter()
	clients, err := cloud.New(ctx, emu.Endpoints, cloud.Options{DynamoDB: []func(*dynamodb.Options){meter.Option}})
	if err != nil {
		return err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	names, err := devstack.Provision(ctx, clients, "bench-inbox-"+hex.EncodeToString(b[:]), devstack.ProvisionOptions{})
	defer func() {
		tctx, tcancel := context.WithTimeout(context.Background(), time.Minute)
		defer tcancel()
		_ = devstack.Teardown(tctx, clients, names)
	}()
	if err != nil {
		return err
	}
	cfg := compose.DefaultConfig()
	cfg.OperatorKey = benchOperatorKey
	built, err := functions.Definitions().BuildAll(compose.Env{
		Names: names, Clients: clients, Config: cfg, Settings: compose.Settings{resources.EnvStripeWebhookSecret: benchInboxSecret}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: metrics.NewCounter(), Now: time.Now,
	})
	if err != nil {
		return err
	}
	fns := map[string]*compose.Function{}
	for _, fn := range built {
		fns[fn.Entry.Name] = fn
	}
	operator, hooks, worker := fns[resources.FunctionAPI], fns[resources.FunctionWebhooks], fns[resources.FunctionInbox]
	// The nudges go to SQS (one SendMessage per new event); the benchmark drives the worker
	// directly and counts DynamoDB only.
	webhooksfn.PartsOf(hooks).Intake.Nudger = discardNudges{}
	inboxfn.PartsOf(worker).Worker.Nudger = discardNudges{}

	fmt.Fprintf(stderr, "creating %d accounts linked to Stripe customers…\n", o.Accounts)
	for i := range o.Accounts {
		if _, _, err := apifn.PartsOf(operator).Accounts.Create(ctx, accounts.CreateInput{
			ID: fmt.Sprintf("bench-%d", i), Plan: "free", Links: map[accounts.LinkKind]string{accounts.StripeCustomer: fmt.Sprintf("cus_bench_%d", i)},
		}); err != nil {
			return err
		}
	}
	now := time.Now()
	event := func(typ string, i int) ([]byte, error) {
		return deliver.StripeEvent(typ, fmt.Sprintf("evt_%s_%d", strings.ReplaceAll(typ, ".", "_"), i), now, fmt.Sprintf("cus_bench_%d", i), benchInboxPrice, "", map[bool]string{true: "active", false: "paid"}[strings.HasPrefix(typ, "customer.subscription.")])
	}
	store := func(body []byte) (inbox.Stored, error) {
		header := http.Header{}
		header.Set("Content-Type", "application/json")
		header.Set("Stripe-Signature", stripewebhook.Sign(body, benchInboxSecret, time.Now()))
		return webhooksfn.PartsOf(hooks).Receiver.Store(ctx, string(inbox.Stripe), header, body)
	}
	phase := func(name string, n int, op func(i int) error) (inboxPhase, error) {
		fmt.Fprintf(stderr, "measuring %s: %d…\n", name, n)
		meter.Reset()
		for i := range n {
			if err := op(i); err != nil {
				return inboxPhase{}, fmt.Errorf("%s %d: %w", name, i, err)
			}
		}
		return inboxPhase{name: name, ops: n, units: meter.Totals(), calls: meter.Snapshot()}, nil
	}

	payments := make([]string, o.Accounts)
	first, err := phase("first deliveries", o.Accounts, func(i int) error {
		body, err := event("invoice.paid", i)
		if err != nil {
			return err
		}
		s, err := store(body)
		payments[i] = s.ID
		if err == nil && s.Duplicate {
			err = errors.New("stored as a copy")
		}
		return err
	})
	if err != nil {
		return err
	}
	copies, err := phase("copies", o.Accounts*o.Copies, func(i int) error {
		body, err := event("invoice.paid", i%o.Accounts)
		if err != nil {
			return err
		}
		s, err := store(body)
		if err == nil && !s.Duplicate {
			err = errors.New("stored as new")
		}
		return err
	})
	if err != nil {
		return err
	}
	applyAll := func(ids []string) func(i int) error {
		return func(i int) error {
			out, err := inboxfn.PartsOf(worker).Worker.Process(ctx, ids[i])
			if err == nil && out.Status != inbox.Applied {
				err = fmt.Errorf("%s: %+v", ids[i], out)
			}
			return err
		}
	}
	paid, err := phase("payments applied", o.Accounts, applyAll(payments))
	if err != nil {
		return err
	}
	changes := make([]string, o.Accounts)
	for i := range o.Accounts {
		body, err := event("customer.subscription.updated", i)
		if err != nil {
			return err
		}
		s, err := store(body)
		if err != nil {
			return err
		}
		changes[i] = s.ID
	}
	changed, err := phase("plan changes applied", o.Accounts, applyAll(changes))
	if err != nil {
		return err
	}
	// The naive handler: every delivery, copies included, adds the plan's allowance to the
	// account with one write, as it arrives.
	naiveTable := names.Table(resources.TableGrants)
	naive, err := phase("naive apply-on-arrival", o.Accounts*(1+o.Copies), func(i int) error {
		_, err := clients.DynamoDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(naiveTable),
			Key:                       map[string]types.AttributeValue{"pk": dynamo.S(fmt.Sprintf("naive#bench-%d", i%o.Accounts)), "sk": dynamo.S("credits")},
			UpdateExpression:          aws.String("ADD #credits :n"),
			ExpressionAttributeNames:  map[string]string{"#credits": "credits"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":n": dynamo.N(490)},
		})
		return err
	})
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "ferry bench inbox: %d accounts, each sent one Stripe invoice.paid (%d copies more) and one\n", o.Accounts, o.Copies)
	fmt.Fprintln(stdout, "customer.subscription.updated to the plan it paid for; DynamoDB calls and request units counted at the client.")
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "per operation\tround trips\twrite units\tread units\t")
	for _, p := range []inboxPhase{first, copies, paid, changed, naive} {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t\n", p.name, p.per(float64(p.units.Calls)), p.per(p.units.WriteUnits), p.per(p.units.ReadUnits))
	}
	_ = tw.Flush()
	fmt.Fprintln(stdout)
	for _, p := range []inboxPhase{first, copies, paid, changed} {
		fmt.Fprintf(stdout, "%s: %s\n", p.name, p.callList())
	}
	perPaymentFerry := (first.units.WriteUnits + copies.units.WriteUnits + paid.units.WriteUnits) / float64(o.Accounts)
	perPaymentNaive := naive.units.WriteUnits / float64(o.Accounts)
	fmt.Fprintf(stdout, "\nOne payment delivered %d times, stored and applied once: %.1f write units (naive: %.1f, and it granted %d times).\n",
		1+o.Copies, perPaymentFerry, perPaymentNaive, 1+o.Copies)
	fmt.Fprintf(stdout, "At on-demand prices ($%.3f per million writes, $%.3f per million reads) Ferry's whole payment costs $%.2f per million.\n",
		priceDynamoWriteUnitPerMillion, priceDynamoReadUnitPerMillion,
		perPaymentFerry*priceDynamoWriteUnitPerMillion+(first.units.ReadUnits+copies.units.ReadUnits+paid.units.ReadUnits)/float64(o.Accounts)*priceDynamoReadUnitPerMillion)
	source := "DynamoDB's sizing rules (the emulators report no consumed capacity)"
	if first.units.Reported > 0 {
		source = "the capacity DynamoDB reported"
	}
	fmt.Fprintf(stdout, "Request units come from %s; each new event also sends one SQS message (its nudge).\n", source)
	return nil
}

// discardNudges drops the nudges: the benchmark runs the worker itself.
type discardNudges struct{}

func (discardNudges) Nudge(context.Context, string, time.Duration) error { return nil }
func (discardNudges) NudgeAll(context.Context, []string) error           { return nil }
