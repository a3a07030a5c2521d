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

// NotifierEvery is how often the notifier runs in AWS.
const NotifierEvery = time.Minute
