package resources

import "time"

// Logical names of the webhook inbox's resources.
const (
	// TableInbox holds every stored billing event (one small item), its verified payload (one
	// item) and one receipt per delivery, all in the event's partition; and, in partitions of
	// their own, the marks that tell the reconciler a provider's meter changed.
	TableInbox = "inbox"
	// TableGrants holds the keyed allowance grant rows of each (account, feature, cycle) and the
	// head item that versions them.
	TableGrants = "grants"
	// QueueInbox carries nudges: "event <id> may be ready to apply". A lost nudge strands
	// nothing, because the sweep finds every due event.
	QueueInbox = "inbox"
)

// Indexes of the inbox table. Every one projects keys only: a page of an index is read, then
// its events are fetched in one BatchGetItem, so no index carries a copy of an event.
const (
	// IndexInboxAll lists every event, newest first (the operator's view).
	IndexInboxAll = "byAll"
	// IndexInboxStatus lists the events in one status.
	IndexInboxStatus = "byStatus"
	// IndexInboxAccount lists one account's events.
	IndexInboxAccount = "byAccount"
	// IndexInboxAccountStatus lists one account's events in one status.
	IndexInboxAccountStatus = "byAccountStatus"
	// IndexInboxDue lists the events that are not final by the instant they are due: received,
	// failed and waiting for their next attempt, or processing under a lease that may lapse.
	IndexInboxDue = "byDue"
)

// Attributes the inbox's indexes are keyed by.
const (
	InboxAttrListAll           = "listAll"
	InboxAttrListStatus        = "listStatus"
	InboxAttrListAccount       = "listAccount"
	InboxAttrListAccountStatus = "listAccountStatus"
	InboxAttrListOrder         = "listOrder"
	InboxAttrDueShard          = "dueShard"
	InboxAttrDueAtMs           = "dueAtMs"
	// InboxTTLAttribute is the epoch-seconds attribute the inbox's items expire by.
	InboxTTLAttribute = "expiresAt"
)

// Functions of the webhook inbox.
const (
	// FunctionWebhooks verifies and stores Kinde and Stripe deliveries.
	FunctionWebhooks = "webhooks"
	// FunctionInbox is the inbox worker: it claims stored events and applies them.
	FunctionInbox = "inbox"
	// FunctionInboxSweep finds due and lease-expired events and nudges the worker.
	FunctionInboxSweep = "inboxsweep"
)

// Timeouts of the inbox's functions. The worker's queue keeps a message invisible for six times
// the worker's timeout, as AWS recommends for SQS event sources; that is longer than an event's
// 30 s lease, so a message redelivered after a crash finds the lease lapsed and re-claims.
const (
	InboxWorkerTimeout = 30 * time.Second
	InboxSweepTimeout  = 50 * time.Second
	WebhooksTimeout    = 10 * time.Second
)

// Environment variables of the webhook inbox.
const (
	// EnvKindeWebhookJWKSURL is where Kinde's webhook signing keys are published; default
	// https://<FERRY_KINDE_DOMAIN>/.well-known/jwks. http:// is accepted for loopback hosts only.
	EnvKindeWebhookJWKSURL = "FERRY_KINDE_WEBHOOK_JWKS_URL"
	// EnvStripeWebhookSecret is the Stripe endpoint's signing secret itself (local use);
	// EnvStripeWebhookSecretARN names the Secrets Manager secret holding it (AWS).
	EnvStripeWebhookSecret    = "FERRY_STRIPE_WEBHOOK_SECRET"
	EnvStripeWebhookSecretARN = "FERRY_STRIPE_WEBHOOK_SECRET_ARN"
	// EnvStripeRefetch ("true") makes the worker re-read a Stripe event's object from Stripe's
	// API by id before applying it, through FERRY_STRIPE_API_BASE (default Stripe's; http only
	// for loopback) with the key FERRY_STRIPE_API_KEY (or the secret FERRY_STRIPE_API_KEY_SECRET_ARN).
	EnvStripeRefetch         = "FERRY_STRIPE_REFETCH"
	EnvStripeAPIBase         = "FERRY_STRIPE_API_BASE"
	EnvStripeAPIKey          = "FERRY_STRIPE_API_KEY"
	EnvStripeAPIKeySecretARN = "FERRY_STRIPE_API_KEY_SECRET_ARN"
)
