package instrument

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	smithymw "github.com/aws/smithy-go/middleware"
)

// ErrInjectedCrash is what an injected crash returns: the process "died" at this call. Work that
// sees it must stop, as if the process had been killed, and leave recovery to a redelivery.
var ErrInjectedCrash = errors.New("injected crash")

// Fault is what a FaultPlan decides for one call.
type Fault int

// Faults a plan can inject.
const (
	// NoFault lets the call through.
	NoFault Fault = iota
	// CrashBefore fails the call before it reaches DynamoDB: nothing was written.
	CrashBefore
	// CrashAfter lets the call reach DynamoDB and commit, then loses the response: the write
	// happened but the caller dies before it can act on it.
	CrashAfter
)

// FaultPlan decides, per call, whether to inject a fault. Calls are numbered from 1 in the
// order they are made; writes are numbered separately from reads.
type FaultPlan func(op string, call, write int) Fault

// Faults injects crashes into a DynamoDB client's calls. It is a test and harness facility: a
// client without it behaves normally. It works against any endpoint, emulated or real.
type Faults struct {
	mu     sync.Mutex
	plan   FaultPlan
	calls  int
	writes int
	fired  []string
}

// NewFaults returns an injector following plan; a nil plan injects nothing.
func NewFaults(plan FaultPlan) *Faults { return &Faults{plan: plan} }

// CrashAfterWrite crashes right after the nth write call commits, and lets every other call
// through (the calls after it see the same write count).
func CrashAfterWrite(n int) FaultPlan {
	return func(op string, _, write int) Fault {
		if writeOps[op] && write == n {
			return CrashAfter
		}
		return NoFault
	}
}

// SetPlan replaces the plan and restarts the numbering.
func (f *Faults) SetPlan(plan FaultPlan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plan, f.calls, f.writes, f.fired = plan, 0, 0, nil
}

// Fired lists the faults injected so far ("CrashAfter UpdateItem #3").
func (f *Faults) Fired() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.fired...)
}

// Writes returns how many write calls the client has made since the plan was set.
func (f *Faults) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// Option installs the injector on a DynamoDB client.
func (f *Faults) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.Faults", f.handle), smithymw.Before)
	})
}

// writeOps are the operations that change items.
var writeOps = map[string]bool{
	"PutItem": true, "UpdateItem": true, "DeleteItem": true, "TransactWriteItems": true, "BatchWriteItem": true,
}

func (f *Faults) handle(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
	op := middleware.GetOperationName(ctx)
	f.mu.Lock()
	f.calls++
	if writeOps[op] {
		f.writes++
	}
	fault := NoFault
	if f.plan != nil {
		fault = f.plan(op, f.calls, f.writes)
	}
	label := fmt.Sprintf("%s #%d", op, f.calls)
	if fault != NoFault {
		f.fired = append(f.fired, map[Fault]string{CrashBefore: "CrashBefore ", CrashAfter: "CrashAfter "}[fault]+label)
	}
	f.mu.Unlock()

	if fault == CrashBefore {
		return smithymw.InitializeOutput{}, smithymw.Metadata{}, fmt.Errorf("%s: %w", label, ErrInjectedCrash)
	}
	out, md, err := next.HandleInitialize(ctx, in)
	if fault == CrashAfter {
		return smithymw.InitializeOutput{}, md, fmt.Errorf("%s (committed: %v): %w", label, err == nil, ErrInjectedCrash)
	}
	return out, md, err
}
