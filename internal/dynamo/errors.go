// Package dynamo holds the DynamoDB helpers every Ferry adapter shares: recognising
// conditional-check failures and cancelled transactions, bounded retries of keyed operations, and
// a client middleware that counts round trips and request units per operation.
package dynamo

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// IsConditionFailed reports whether err is a failed condition on a single-item write.
func IsConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// IsTransactionCanceled reports whether err is a cancelled TransactWriteItems. Callers resolve
// what happened from durable state, never from the cancellation reasons: the reasons describe one
// attempt, and emulators code only the first failing item.
func IsTransactionCanceled(err error) bool {
	var tce *types.TransactionCanceledException
	return errors.As(err, &tce)
}

// IsConflictOrThrottle reports whether err is worth retrying for a keyed operation: a
// transaction conflict, a throttle, or an in-progress idempotent transaction.
func IsConflictOrThrottle(err error) bool {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if r.Code != nil && (*r.Code == "TransactionConflict" || *r.Code == "ThrottlingError") {
				return true
			}
		}
		return false
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "TransactionConflictException", "TransactionInProgressException",
			"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded":
			return true
		}
	}
	return false
}

// IsValidation reports whether DynamoDB refused a request as invalid (for example an item over
// the 400 KB limit). Such a request fails the same way every time.
func IsValidation(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException"
}

// Retry limits for keyed operations on contended rows.
const (
	MaxConflictTries = 8
	backoffBase      = 20 * time.Millisecond
	backoffCap       = time.Second
)

// Backoff is the wait before retry number attempt (0-based): full jitter over an exponential
// window capped at one second.
func Backoff(attempt int) time.Duration {
	window := backoffBase << min(attempt, 16)
	if window > backoffCap {
		window = backoffCap
	}
	return time.Duration(rand.Int64N(int64(window)) + 1)
}

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// RetryConflicts runs op up to MaxConflictTries times while it fails with a conflict or a
// throttle. Use it only for operations that are keyed, so running one twice cannot apply twice.
func RetryConflicts(ctx context.Context, op func() error) error {
	var err error
	for attempt := range MaxConflictTries {
		if err = op(); err == nil || !IsConflictOrThrottle(err) {
			return err
		}
		if attempt == MaxConflictTries-1 {
			break
		}
		if serr := Sleep(ctx, Backoff(attempt)); serr != nil {
			return errors.Join(err, serr)
		}
	}
	return err
}
