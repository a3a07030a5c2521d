package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithymw "github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Fault is what a released call meets.
type Fault int

// Faults at the wire. Faults of the environment (duplicate deliveries, a lease running out, the
// sweeper starting, a crash between two steps) are counted by the pipelines under their own
// names.
const (
	None Fault = iota
	// KillBefore: the process dies before the call leaves; nothing is written.
	KillBefore
	// KillAfter: the call commits, and the process dies before it reads the answer.
	KillAfter
	// LostAnswer: the call commits, and its answer is lost: the caller sees an error and goes on.
	LostAnswer
	// NetworkError: the call never reaches the service; the caller sees an error and goes on.
	NetworkError
	// Throttle: DynamoDB refuses the call as over its throughput.
	Throttle
	// TxnConflict: a transaction cancelled by a conflicting transaction on one of its items.
	TxnConflict
	// ItemConflict: a single-item write refused because a transaction is in progress on it.
	ItemConflict
	// ServiceError: S3 or SQS answers 500 InternalError; nothing is written.
	ServiceError
	// Dead is what every call of a killed actor meets.
	Dead
)

var faultNames = map[Fault]string{
	None: "none", KillBefore: "kill-before-call", KillAfter: "kill-after-commit", LostAnswer: "commit-answer-lost",
	NetworkError: "network-error", Throttle: "throttle", TxnConflict: "transaction-conflict", ItemConflict: "item-conflict",
	ServiceError: "service-error", Dead: "dead",
}

func (f Fault) String() string { return faultNames[f] }

// Kills reports whether the fault kills the calling actor's process.
func (f Fault) Kills() bool { return f == KillBefore || f == KillAfter }

// commits reports whether the call is sent despite the fault.
func (f Fault) commits() bool { return f == None || f == KillAfter || f == LostAnswer }

// Injected errors. They wrap instrument.ErrInjectedCrash, so code under test can never tell them
// from the real thing by anything but their effect.
var (
	errKilled  = fmt.Errorf("the process was killed: %w", instrument.ErrInjectedCrash)
	errLost    = fmt.Errorf("the answer was lost after the call committed (a timeout): %w", instrument.ErrInjectedCrash)
	errNetwork = fmt.Errorf("the connection was reset before the call was sent: %w", instrument.ErrInjectedCrash)
)

// faultsFor lists the faults a call can meet.
func faultsFor(c Call) []Fault {
	switch c.Service {
	case "DynamoDB":
		if !c.Write {
			if c.Op == "TransactGetItems" {
				return []Fault{NetworkError, Throttle, TxnConflict, KillBefore}
			}
			return []Fault{NetworkError, Throttle, KillBefore}
		}
		if c.Op == "TransactWriteItems" {
			// Conflicts weigh more: the emulator never produces them, and they are what the
			// cancellation paths are made for.
			return []Fault{KillBefore, KillAfter, LostAnswer, NetworkError, Throttle, TxnConflict, TxnConflict, TxnConflict}
		}
		return []Fault{KillBefore, KillAfter, LostAnswer, NetworkError, Throttle, ItemConflict}
	case "S3", "SQS":
		if c.Write {
			return []Fault{ServiceError, ServiceError, LostAnswer, KillBefore, KillAfter}
		}
		return []Fault{ServiceError}
	case providerService:
		return providerFaults(c)
	}
	return nil
}

// injected is the error a fault that stops the call returns.
func injected(f Fault, c Call, params any) error {
	switch f {
	case Dead, KillBefore:
		return errKilled
	case NetworkError:
		return errNetwork
	case Throttle:
		return &types.ProvisionedThroughputExceededException{Message: aws.String("injected: the request rate is too high")}
	case ItemConflict:
		return &types.TransactionConflictException{Message: aws.String("injected: a transaction is in progress on the item")}
	case TxnConflict:
		n := 1
		if in, ok := params.(*dynamodb.TransactWriteItemsInput); ok {
			n = len(in.TransactItems)
		}
		if in, ok := params.(*dynamodb.TransactGetItemsInput); ok {
			n = len(in.TransactItems)
		}
		reasons := make([]types.CancellationReason, n)
		for i := range reasons {
			reasons[i] = types.CancellationReason{Code: aws.String("None")}
		}
		reasons[0] = types.CancellationReason{Code: aws.String("TransactionConflict"), Message: aws.String("injected: transaction conflict")}
		return &types.TransactionCanceledException{
			Message:             aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict]"),
			CancellationReasons: reasons,
		}
	case ServiceError:
		return &smithy.GenericAPIError{Code: "InternalError", Message: "injected: we encountered an internal error; please try again", Fault: smithy.FaultServer}
	}
	return nil
}

// wire is the middleware every function's clients carry in the harness: it parks each call of an
// actor until the scheduler releases it, injects the fault the scheduler drew, removes the
// ablated guard, and checks the call against the design (strongly consistent reads, every
// condition clause in the guard table). Calls made outside any actor (the harness setting up
// and reading state) pass untouched.
type wire struct {
	function string
	tables   map[string]string // physical → logical, for tables, buckets and queues
}

func (w *wire) options() cloud.Options {
	add := func(service string) func(*smithymw.Stack) error {
		return func(stack *smithymw.Stack) error {
			return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.Harness",
				func(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
					return w.handle(ctx, service, in, next)
				}), smithymw.Before)
		}
	}
	return cloud.Options{
		DynamoDB: []func(*dynamodb.Options){func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, add("DynamoDB")) }},
		S3:       []func(*s3.Options){func(o *s3.Options) { o.APIOptions = append(o.APIOptions, add("S3")) }},
		SQS:      []func(*sqs.Options){func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, add("SQS")) }},
	}
}

var writeOps = map[string]bool{
	"PutItem": true, "UpdateItem": true, "DeleteItem": true, "TransactWriteItems": true, "BatchWriteItem": true,
	"PutObject": true, "DeleteObject": true, "SendMessage": true, "SendMessageBatch": true, "DeleteMessage": true,
	"DeleteMessageBatch": true, "ChangeMessageVisibility": true,
}

func (w *wire) handle(ctx context.Context, service string, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
	a := ActorFrom(ctx)
	if a == nil {
		return next.HandleInitialize(ctx, in)
	}
	op := middleware.GetOperationName(ctx)
	c := Call{Service: service, Op: op, Table: w.resource(in.Parameters), Write: writeOps[op]}
	s := a.sched.owner
	fault := a.sched.park(a, c)
	if fault != Dead && s.timedOut(a, ctx) {
		fault = Dead
	}
	if fault != Dead {
		s.countFault(fault, c)
	}
	if !fault.commits() {
		return smithymw.InitializeOutput{}, smithymw.Metadata{}, fmt.Errorf("%s %s: %w", service, op, injected(fault, c, in.Parameters))
	}
	asked := in.Parameters
	if service == "DynamoDB" {
		asked = snapshot(in.Parameters)
		s.check(a, w, in.Parameters)
	}
	if c.Table == resources.QueueInbox {
		// The inbox pipeline delivers the inbox queue's nudges itself, each when the harness's
		// clock reaches its delay (observers see the delay asked for); the emulator's copies
		// carry none, so that the schedule can take them all off the queue when it ends: a
		// delayed message cannot be received, and SQS allows one PurgeQueue a minute.
		in.Parameters = undelayed(in.Parameters)
	}
	out, md, err := next.HandleInitialize(ctx, in)
	s.observe(a, c, asked, err == nil)
	if fault == KillAfter || fault == LostAnswer {
		return smithymw.InitializeOutput{}, md, fmt.Errorf("%s %s: %w", service, op, errLost)
	}
	return out, md, err
}

// resource names the logical table, bucket or queue a call is on.
func (w *wire) resource(params any) string {
	var name string
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		name = aws.ToString(in.TableName)
	case *dynamodb.PutItemInput:
		name = aws.ToString(in.TableName)
	case *dynamodb.UpdateItemInput:
		name = aws.ToString(in.TableName)
	case *dynamodb.DeleteItemInput:
		name = aws.ToString(in.TableName)
	case *dynamodb.QueryInput:
		name = aws.ToString(in.TableName)
		if in.IndexName != nil {
			return w.logical(name) + "/" + aws.ToString(in.IndexName)
		}
	case *dynamodb.TransactWriteItemsInput:
		return w.transactTables(in)
	case *dynamodb.TransactGetItemsInput:
		var names []string
		for _, it := range in.TransactItems {
			if it.Get != nil {
				names = append(names, w.logical(aws.ToString(it.Get.TableName)))
			}
		}
		return joinUnique(names)
	case *s3.PutObjectInput:
		name = aws.ToString(in.Bucket)
	case *s3.GetObjectInput:
		name = aws.ToString(in.Bucket)
	case *s3.HeadObjectInput:
		name = aws.ToString(in.Bucket)
	case *sqs.SendMessageInput:
		name = aws.ToString(in.QueueUrl)
	case *sqs.SendMessageBatchInput:
		name = aws.ToString(in.QueueUrl)
	}
	return w.logical(name)
}

func (w *wire) transactTables(in *dynamodb.TransactWriteItemsInput) string {
	var names []string
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			names = append(names, w.logical(aws.ToString(it.Put.TableName)))
		case it.Update != nil:
			names = append(names, w.logical(aws.ToString(it.Update.TableName)))
		case it.Delete != nil:
			names = append(names, w.logical(aws.ToString(it.Delete.TableName)))
		case it.ConditionCheck != nil:
			names = append(names, w.logical(aws.ToString(it.ConditionCheck.TableName)))
		}
	}
	return joinUnique(names)
}

func (w *wire) logical(physical string) string {
	if l, ok := w.tables[physical]; ok {
		return l
	}
	return physical
}

func joinUnique(names []string) string {
	seen := map[string]bool{}
	out := ""
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if out != "" {
			out += "+"
		}
		out += n
	}
	return out
}

// errorsIsInjected reports whether err is one the harness injected.
func errorsIsInjected(err error) bool { return errors.Is(err, instrument.ErrInjectedCrash) }

// snapshot copies a request's parameters as the code wrote them, before an ablation changes the
// request in place: observers judge what the code asked for, and what the wire did with it.
func snapshot(params any) any {
	copyNames := func(m map[string]string) map[string]string {
		out := make(map[string]string, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	copyValues := func(m map[string]types.AttributeValue) map[string]types.AttributeValue {
		out := make(map[string]types.AttributeValue, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		c := *in
		c.ExpressionAttributeNames, c.ExpressionAttributeValues = copyNames(in.ExpressionAttributeNames), copyValues(in.ExpressionAttributeValues)
		return &c
	case *dynamodb.UpdateItemInput:
		c := *in
		c.ExpressionAttributeNames, c.ExpressionAttributeValues = copyNames(in.ExpressionAttributeNames), copyValues(in.ExpressionAttributeValues)
		return &c
	case *dynamodb.DeleteItemInput:
		c := *in
		c.ExpressionAttributeNames, c.ExpressionAttributeValues = copyNames(in.ExpressionAttributeNames), copyValues(in.ExpressionAttributeValues)
		return &c
	case *dynamodb.TransactWriteItemsInput:
		c := *in
		c.TransactItems = make([]types.TransactWriteItem, len(in.TransactItems))
		for i, it := range in.TransactItems {
			if it.Put != nil {
				p := *it.Put
				p.ExpressionAttributeNames, p.ExpressionAttributeValues = copyNames(p.ExpressionAttributeNames), copyValues(p.ExpressionAttributeValues)
				it.Put = &p
			}
			if it.Update != nil {
				u := *it.Update
				u.ExpressionAttributeNames, u.ExpressionAttributeValues = copyNames(u.ExpressionAttributeNames), copyValues(u.ExpressionAttributeValues)
				it.Update = &u
			}
			if it.Delete != nil {
				d := *it.Delete
				d.ExpressionAttributeNames, d.ExpressionAttributeValues = copyNames(d.ExpressionAttributeNames), copyValues(d.ExpressionAttributeValues)
				it.Delete = &d
			}
			c.TransactItems[i] = it
		}
		return &c
	}
	return params
}

// crashBetweenSteps is a function's hook between two of its steps (what names the step): while
// faults are on, the actor ctx carries dies there, at half the schedule's fault rate, and its
// work is left to whatever redelivers or reruns it.
func crashBetweenSteps(ctx context.Context, what string) error {
	a := ActorFrom(ctx)
	if a == nil {
		return nil
	}
	s := a.sched.owner
	if s.Quiet() || s.FaultRate == 0 || a.Rand.Float64() >= s.FaultRate/2 {
		return nil
	}
	s.Count("crash-between-steps")
	s.Note("#%d %s killed %s", a.ID, a.Name, what)
	a.Kill()
	return errKilled
}

// leaseJumpsAndSweeps is an environment's step (Schedule.beforeStep) for a pipeline with leases
// and a sweep: while faults are on, one step in jumpOneIn the clock jumps past lease, and one in
// sweepOneIn sweep starts (counted as sweepFault), racing whatever is under way.
func leaseJumpsAndSweeps(s *Schedule, jumpOneIn int, lease time.Duration, sweepOneIn int, sweepFault string, sweep func()) func() {
	return func() {
		if s.Quiet() {
			return
		}
		if s.rng.IntN(jumpOneIn) == 0 {
			s.Count("lease-expiry")
			s.Env.Clock.Advance(lease + time.Second)
			s.Note("clock +%s", lease+time.Second)
		}
		if s.rng.IntN(sweepOneIn) == 0 {
			s.Count(sweepFault)
			sweep()
		}
	}
}

// undelayed returns a copy of an SQS send's parameters without its delays (any other call's
// parameters as they are).
func undelayed(params any) any {
	switch in := params.(type) {
	case *sqs.SendMessageInput:
		c := *in
		c.DelaySeconds = 0
		return &c
	case *sqs.SendMessageBatchInput:
		c := *in
		c.Entries = make([]sqstypes.SendMessageBatchRequestEntry, len(in.Entries))
		for i, e := range in.Entries {
			e.DelaySeconds = 0
			c.Entries[i] = e
		}
		return &c
	}
	return params
}
