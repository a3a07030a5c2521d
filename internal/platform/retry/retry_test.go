package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

func TestBackoff_IsJitteredWithinAWindowThatDoublesUpToTheCap(t *testing.T) {
	for attempt := range 12 {
		window := min(BackoffBase<<attempt, BackoffCap)
		for range 200 {
			if d := Contended.Backoff(attempt); d <= 0 || d > window {
				t.Fatalf("attempt %d: %s outside (0, %s]", attempt, d, window)
			}
		}
	}
	if d := Contended.Backoff(1 << 20); d <= 0 || d > BackoffCap {
		t.Errorf("a huge attempt waits %s, want at most the cap %s", d, BackoffCap)
	}
}

// fast is a policy whose waits are negligible, so the loop's decisions are what is measured.
var fast = Policy{Tries: 4, Base: time.Microsecond, Cap: time.Microsecond}

func TestDo_ReturnsTheFirstLapThatEndsTheLoop(t *testing.T) {
	laps := 0
	got, err := Do(context.Background(), fast, func(context.Context, Lap) (int, error) {
		laps++
		if laps < 3 {
			return 0, Again(errors.New("conflict"))
		}
		return 42, nil
	})
	if got != 42 || err != nil || laps != 3 {
		t.Errorf("got %d, %v after %d laps; want 42, nil after 3", got, err, laps)
	}
}

func TestDo_IsBoundedAndSaysItWasExhausted(t *testing.T) {
	laps := 0
	cause := errors.New("the row is busy")
	_, err := Do(context.Background(), fast, func(context.Context, Lap) (int, error) {
		laps++
		return 0, Reread(cause)
	})
	if laps != fast.Tries || !errors.Is(err, ErrExhausted) || !errors.Is(err, cause) {
		t.Errorf("%d laps, err %v; want %d laps and ErrExhausted wrapping the cause", laps, err, fast.Tries)
	}
}

// A decision the lap made from durable state ends the loop: it is never retried.
func TestDo_AnErrorThatIsNotRetryableEndsTheLoop(t *testing.T) {
	laps := 0
	refused := errors.New("limit reached")
	_, err := Do(context.Background(), fast, func(context.Context, Lap) (int, error) {
		laps++
		return 0, refused
	})
	if laps != 1 || !errors.Is(err, refused) || errors.Is(err, ErrExhausted) {
		t.Errorf("%d laps, err %v; want one lap and the lap's own error", laps, err)
	}
}

func TestDo_RetriesThrottlesItSees(t *testing.T) {
	laps := 0
	_, err := Do(context.Background(), fast, func(context.Context, Lap) (int, error) {
		laps++
		if laps == 1 {
			return 0, &smithy.GenericAPIError{Code: "ThrottlingException"}
		}
		return 1, nil
	})
	if laps != 2 || err != nil {
		t.Errorf("%d laps, err %v; want a second lap after the throttle", laps, err)
	}
}

// Again backs off between laps and Reread does not: a lap that re-reads at once decides from
// what it reads whether to wait (Lap.Wait).
func TestDo_AgainWaitsAndRereadDoesNot(t *testing.T) {
	slow := Policy{Tries: 2, Base: time.Hour, Cap: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	laps := 0
	if _, err := Do(ctx, slow, func(context.Context, Lap) (int, error) {
		laps++
		return 0, Reread(errors.New("moved"))
	}); laps != 2 || !errors.Is(err, ErrExhausted) {
		t.Errorf("Reread: %d laps, %v; want both laps at once", laps, err)
	}
	laps = 0
	if _, err := Do(ctx, slow, func(context.Context, Lap) (int, error) {
		laps++
		return 0, Again(errors.New("conflict"))
	}); laps != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Again: %d laps, %v; want one lap, then the wait cut short by the context", laps, err)
	}
}

func TestRetryable(t *testing.T) {
	reason := func(code string) types.CancellationReason { return types.CancellationReason{Code: aws.String(code)} }
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a plain error", errors.New("boom"), false},
		{"a failed condition", &types.ConditionalCheckFailedException{}, false},
		{"a throttle", &smithy.GenericAPIError{Code: "ThrottlingException"}, true},
		{"provisioned throughput exceeded", &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException"}, true},
		{"a transaction conflict", &smithy.GenericAPIError{Code: "TransactionConflictException"}, true},
		{"a transaction in progress", &smithy.GenericAPIError{Code: "TransactionInProgressException"}, true},
		{"a validation error", &smithy.GenericAPIError{Code: "ValidationException"}, false},
		{"a cancellation by conflict", &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{reason("None"), reason("TransactionConflict")}}, true},
		{"a cancellation by throttle", &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{reason("ThrottlingError")}}, true},
		{"a cancellation by a failed condition", &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{reason("ConditionalCheckFailed")}}, false},
		{"a failed condition beside a conflict", &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{reason("TransactionConflict"), reason("ConditionalCheckFailed")}}, false},
		{"a cancellation without reasons", &types.TransactionCanceledException{}, false},
	}
	for _, c := range cases {
		if got := Retryable(c.err); got != c.want {
			t.Errorf("%s: Retryable = %v, want %v", c.name, got, c.want)
		}
	}
}
