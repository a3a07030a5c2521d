// Package dynamo holds the DynamoDB helpers every Ferry adapter shares: recognising
// conditional-check failures, cancelled transactions and refused requests, attribute values, and
// expression attribute names. Retries live in package retry.
package dynamo

import (
	"errors"

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

// IsValidation reports whether DynamoDB refused a request as invalid (for example an item over
// the 400 KB limit). Such a request fails the same way every time.
func IsValidation(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException"
}
