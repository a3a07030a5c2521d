package resources

import "time"

// Logical names of the alerts' resources.
const (
	// TableNotifications is the notifications outbox: per notification, its item (written in the
	// transaction that decides it, once) and one delivery item per endpoint it is for, all in the
	// notification's partition.
	TableNotifications = "notifications"
	// TableWebhookEndpoints holds the endpoints the operator registered: URL, the kinds and
	// accounts they want, their signing secrets.
	TableWebhookEndpoints = "webhookendpoints"
)

// The webhook endpoints' list index: every endpoint carries IndexWebhookEndpointsListKey =
// WebhookEndpointsListValue, so they are listed with Query (no function may Scan).
const (
	IndexWebhookEndpointsList    = "byList"
	IndexWebhookEndpointsListKey = "listKey"
	WebhookEndpointsListValue    = "endpoints"
)

// Indexes of the notifications table.
const (
	// IndexNotificationsDue lists what the notifier still has to do, by the instant it is due: a
	// notification not yet fanned out to its endpoints, a delivery waiting for its next attempt
	// or sending under a claim that may lapse. Only such items carry NotificationsAttrDueShard.
	IndexNotificationsDue     = "byDue"
	NotificationsAttrDueShard = "dueShard"
	NotificationsAttrDueAtMs  = "dueAtMs"
	NotificationsDueShards    = 8
	// IndexNotificationsByEndpoint is an endpoint's delivery log, newest first: every delivery
	// item carries its endpoint (NotificationsAttrEndpoint) and its order (created instant and
	// notification id).
	IndexNotificationsByEndpoint = "byEndpoint"
	NotificationsAttrEndpoint    = "endpoint"
	NotificationsAttrLogOrder    = "logOrder"
	// IndexNotificationsByAccount lists an account's notifications, newest first.
	IndexNotificationsByAccount = "byAccount"
	NotificationsAttrAccount    = "listAccount"
	NotificationsAttrListOrder  = "listOrder"
	// NotificationsTTLAttribute is the epoch-seconds attribute finished notifications and their
	// deliveries expire by.
	NotificationsTTLAttribute = "expiresAt"
)

// FunctionNotifier fans new notifications out to the endpoints that want them and delivers
// them, signed, with retries.
const FunctionNotifier = "notifier"

// NotifierTimeout is the notifier's function timeout: well inside its schedule, and longer than
// a few sends of ten seconds each.
const NotifierTimeout = 50 * time.Second

// NotifierEvery is how often the notifier runs in AWS; NotifierLocalEvery in ferry dev.
const (
	NotifierEvery      = time.Minute
	NotifierLocalEvery = 2 * time.Second
)

// EnvAlertsAllowLoopback ("true") lets webhook endpoints be registered at, and deliveries reach,
// loopback addresses over http: ferry dev sets it so a developer's receiver (ferry listen) gets
// notifications. No function lists it in its Settings, so a deployment never sets it, and in AWS
// the sender refuses loopback, private and metadata addresses.
const EnvAlertsAllowLoopback = "FERRY_ALERTS_ALLOW_LOOPBACK"
