package resources

import "time"

// TableConsole is the operator console's state: one item per signed-in console session (keyed by
// the SHA-256 of its token, never the token itself) and one item per lab slot (a lease that
// bounds how many labs run at once across every container). Both expire by TTL; the code never
// trusts the TTL to have run and compares each item's own expiry with its clock.
const TableConsole = "console"

// ConsoleTTLAttribute is the epoch-seconds attribute the console's items expire by.
const ConsoleTTLAttribute = "expiresAt"

// The indexes the console's lists read. Every one is sparse and keys only: a page of the index
// is read, then its items are fetched in one strongly consistent BatchGetItem.
const (
	// IndexLedgerByFailure lists one account's REJECTED or UNINSERTABLE events, newest first: an
	// entry carries IndexLedgerFailureKey ("<account>#<status>") and IndexLedgerFailedAt only
	// while it is in one of those statuses. A redrive takes both off.
	IndexLedgerByFailure  = "byFailure"
	IndexLedgerFailureKey = "failureKey"
	IndexLedgerFailedAt   = "failedAtMs"
	// IndexHoldsByAccount lists one account's holds in one status, newest first: a hold carries
	// IndexHoldsAccountStatus ("<account>#<status>") and its creation time. A charge changes
	// neither, so it costs the index nothing; a settlement moves the hold once.
	IndexHoldsByAccount     = "byAccountStatus"
	IndexHoldsAccountStatus = "accountStatus"
	IndexHoldsCreatedAt     = "createdAtMs"
)

// APITimeout is the api function's timeout: under API Gateway's 30 s integration limit, and long
// enough for the console's labs that run inside one request (ConsoleLabTimeout).
const APITimeout = 29 * time.Second

// ConsoleLabSlots bounds how many labs run at once, across every container of the api function:
// each run holds one slot item under a lease for as long as it may run.
const ConsoleLabSlots = 2

// EnvAPIURL is the stack's own public base URL (the HTTP API's endpoint), which the console's labs
// drive the stack through, exactly as ferry lab does from outside. ferry dev sets it to its own
// address; the CDK app to the HTTP API's endpoint.
const EnvAPIURL = "FERRY_API_URL"
