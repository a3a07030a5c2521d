// Package ledger is the authority on "has this event been processed?". One item per (account,
// event id) is claimed by a conditional put that exactly one delivery's claim wins, and it is
// claimed already checkpointed: the worker claims a unit of one account's events in the same
// transaction that moves the meter (batch.go), so the billing checkpoint billingAcceptedAtMs
// never exists without the money, nor the money without it. The entry doubles as the resume
// pointer: the ordered scenario table picks every re-entry point from durable state alone.
package ledger

import (
	"errors"
	"fmt"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Status of a ledger entry.
type Status string

// Statuses. INSERTING is the only non-terminal one.
const (
	Inserting    Status = "INSERTING"
	Inserted     Status = "INSERTED"
	Rejected     Status = "REJECTED"
	Uninsertable Status = "UNINSERTABLE"
)

// Terminal reports whether no further step will ever run for the status.
func (s Status) Terminal() bool { return s == Inserted || s == Rejected || s == Uninsertable }

// Entry is one event's ledger item.
type Entry struct {
	AccountID string
	EventID   string
	Status    Status
	// RowInsertedAtMs is the timestamp the analytics row and the archive key are stamped with,
	// fixed by the claim so that every retry writes byte-identical storage.
	RowInsertedAtMs int64
	ReceivedAtMs    int64
	// Cycle is the billing cycle the event counts toward, fixed by the claim.
	Cycle string
	// BillingAcceptedAtMs is the checkpoint: non-zero once the event is billed (or accepted
	// without consuming, for tiers that are not capped).
	BillingAcceptedAtMs int64
	Tier                plans.Tier
	Reason              string
	QuarantineCount     int
	CreatedAtMs         int64
	UpdatedAtMs         int64
	InsertedAtMs        int64
	// ArchiveKey, ArchiveOffset and ArchiveLength locate the payload of an event claimed in a
	// batch: a byte range of its batch's archive object, fixed by the claim. Empty ArchiveKey:
	// the payload is an object of its own (archive.Key).
	ArchiveKey    string
	ArchiveOffset int64
	ArchiveLength int64
	// Batch is the batch that claimed the event, if one did.
	Batch string
	// RowInUnit: the batch's claim wrote the event's analytics row, in the batch's rows item
	// (analytics.UnitItem), in the same transaction as the entry.
	RowInUnit bool
	// MeterRow is the events counter row the event was billed against, if it was.
	MeterRow string
	// Meters are the values the event moved on its meters (the plain events count apart: see
	// MeterValues), or, for an entry not yet claimed, the values its claim will move.
	Meters []MeterValue
}

// RowRef is where the event's analytics row is: its batch's rows item if the claim wrote it
// there, else a row of its own.
func (e Entry) RowRef() analytics.RowRef {
	ref := analytics.RowRef{AccountID: e.AccountID, EventID: e.EventID, RowInsertedAtMs: e.RowInsertedAtMs}
	if e.RowInUnit {
		ref.Unit = e.Batch
	}
	return ref
}

// ArchiveLocation is where the event's payload is archived.
func (e Entry) ArchiveLocation() archive.Location {
	if e.ArchiveKey == "" {
		return archive.Location{Key: archive.Key(e.AccountID, e.EventID, e.RowInsertedAtMs)}
	}
	return archive.Location{Key: e.ArchiveKey, Offset: e.ArchiveOffset, Length: e.ArchiveLength}
}

// Billed reports whether the checkpoint is present.
func (e Entry) Billed() bool { return e.BillingAcceptedAtMs != 0 }

// Errors the adapter translates DynamoDB outcomes into.
var (
	// ErrNotFound: no entry for the event.
	ErrNotFound = problem.New(problem.NotFound, "ledger entry not found", "No such resource.")
	// ErrNotInserting: the entry left INSERTING under us (another delivery finished it).
	ErrNotInserting = errors.New("ledger entry is no longer INSERTING")
)

// Key is the ledger partition key of an event. Account ids never contain '#'.
func Key(accountID, eventID string) string { return accountID + "#" + eventID }

// BillingKind is how a claim bills the events it admits, by the account's tier and status.
type BillingKind int

// Billing kinds.
const (
	// BillCapped moves the budget row against the monthly limit, admitting only what fits.
	BillCapped BillingKind = iota + 1
	// BillCounted stamps the checkpoints and moves one sharded counter, uncapped.
	BillCounted
	// BillCheckpointOnly stamps the checkpoint and consumes nothing.
	BillCheckpointOnly
	// BillReject rejects the event terminally with Reason.
	BillReject
)

// Billing is the decision of how to bill one event.
type Billing struct {
	Kind    BillingKind
	Tier    plans.Tier
	Feature string
	Amount  int64
	Limit   plans.Limit
	Reason  string
}

// BillingFor decides how to bill one event for an account: a pure function of the account, its
// plan and the catalog.
func BillingFor(a accounts.Account, catalog plans.Catalog) Billing {
	plan := a.PlanOf(catalog)
	c := Billing{Tier: plan.Tier, Feature: plans.FeatureEvents, Amount: plans.EventAmount, Limit: a.Limit(plans.FeatureEvents, catalog)}
	if err := a.CanSpend(); err != nil {
		c.Kind, c.Reason = BillReject, err.Error()
		return c
	}
	switch plan.Tier {
	case plans.Internal:
		c.Kind = BillCheckpointOnly
	case plans.Counted:
		c.Kind = BillCounted
	default:
		c.Kind = BillCapped
	}
	return c
}

// LimitReason is the reason stored on an event refused at the limit.
func LimitReason(c Billing) string {
	return fmt.Sprintf("monthly limit reached: %s limit is %d", c.Feature, c.Limit.Max)
}
