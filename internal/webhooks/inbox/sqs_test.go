package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/webhooks/inbox"
)

// drainInbox runs the inbox worker's event source until the queue shows nothing for a poll.
func (h *harness) drainInbox(t *testing.T) int {
	t.Helper()
	var source *devstack.EventSource
	for _, s := range h.Sources {
		if s.QueueURL == h.Env.Names.QueueURL(resources.QueueInbox) {
			source = s
		}
	}
	if source == nil {
		t.Fatal("no event source on the inbox queue")
	}
	total := 0
	for range 50 {
		n, err := source.PollOnce(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
	t.Fatal("the inbox queue never drained")
	return total
}

// lostNudges fails every nudge, as SQS does when it is unreachable.
type lostNudges struct{}

func (lostNudges) Nudge(context.Context, string, time.Duration) error {
	return errors.New("SQS unreachable")
}
func (lostNudges) NudgeAll(context.Context, []string) error { return errors.New("SQS unreachable") }

// The path AWS runs: intake nudges through the queue, the worker's event source applies.
func TestSQS_TheNudgeStartsTheWorker(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
	if n := h.drainInbox(t); n != 1 {
		t.Errorf("%d messages; want the one nudge", n)
	}
	if e := h.event(t, id); e.Status != inbox.Applied {
		t.Errorf("%s; want APPLIED", e.Status)
	}
}

// A lost nudge strands nothing: the event is stored (the provider got its 200), and the sweep
// finds it and nudges the worker.
func TestSweep_FindsWhatALostNudgeLeftBehind(t *testing.T) {
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	h.intake().Nudger = lostNudges{}
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "customer_1", plan: "customer_pro_plan"}, false)
	if n := h.drainInbox(t); n != 0 {
		t.Fatalf("%d messages after a lost nudge", n)
	}
	res, err := h.sweeper().Sweep(context.Background())
	if err != nil || res.Found != 1 || res.Nudged != 1 {
		t.Fatalf("sweep %+v %v", res, err)
	}
	h.drainInbox(t)
	if e := h.event(t, id); e.Status != inbox.Applied {
		t.Errorf("%s; want APPLIED", e.Status)
	}
	// Nothing is due any more: the next sweep nudges nothing.
	if res, err := h.sweeper().Sweep(context.Background()); err != nil || res.Found != 0 {
		t.Errorf("second sweep %+v %v", res, err)
	}
}

// A nudge for an event that is not due yet is answered with a nudge of its own, delayed until
// it is (here: a lease that lapses), and the message is deleted.
func TestSQS_NotDueYet_NudgedAgainWithADelay(t *testing.T) {
	h := newHarness(t)
	id := h.deliver(t, kindeEvent{id: "event_1", typ: "customer.plan_changed", at: start, customer: "c", plan: "customer_pro_plan"}, false)
	// Another worker holds the lease for 30 more seconds.
	e := h.event(t, id)
	claimed := e
	claimed.Status, claimed.Attempts, claimed.Rev = inbox.Processing, 1, e.Rev+1
	claimed.LeaseExpiresAtMs = h.Clock.Now().Add(inbox.LeaseDuration).UnixMilli()
	if err := h.store().Transition(context.Background(), e.Rev, claimed); err != nil {
		t.Fatal(err)
	}
	if n := h.drainInbox(t); n != 1 {
		t.Fatalf("%d messages", n)
	}
	attrs, err := h.Env.Clients.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(h.Env.Names.QueueURL(resources.QueueInbox)),
		AttributeNames: []sqstypes.QueueAttributeName{"ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessages"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if attrs.Attributes["ApproximateNumberOfMessagesDelayed"] != "1" {
		t.Errorf("queue %v; want one delayed nudge", attrs.Attributes)
	}
}
