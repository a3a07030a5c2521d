package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/notifytest"
	standin "github.com/ferrymeter/ferry/internal/devkit/standin/stripe"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
)

// deadNotes are the outbox.dead notifications in the test's notifications table, each with its
// message.
func deadNotes(t *testing.T, db *dynamodb.Client, table string) []notify.Message {
	t.Helper()
	var out []notify.Message
	for _, n := range notifytest.ReadTable(t, db, table) {
		if n.Stored.Kind == notify.OutboxDead {
			out = append(out, n.Message)
		}
	}
	return out
}

func (r *rig) deadNotes(t *testing.T) []notify.Message {
	t.Helper()
	return deadNotes(t, r.h.Env.Clients.DynamoDB, r.h.Env.Names.Table(resources.TableNotifications))
}

// wantDeadNote fails unless there is exactly one outbox.dead notification, keyed by the row's
// identifier and carrying its account, feature, cycle and last error.
func wantDeadNote(t *testing.T, got []notify.Message, row outbox.Row, reason string) {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("%d outbox.dead notifications %+v; want one", len(got), got)
	}
	m := got[0]
	id := notify.Notification{Kind: notify.OutboxDead, Subject: row.Identifier()}.ID()
	if m.ID != id || m.Type != notify.OutboxDead || m.Data.Account != row.Account || m.Data.Feature != row.Feature ||
		m.Data.Cycle != row.Cycle || m.Data.Reason != reason || reason == "" || m.Data.Limit != nil || m.Data.Used != nil {
		t.Errorf("outbox.dead reads %+v (data %+v); want id %s for %s, reason %q", m, m.Data, id, row.Identifier(), reason)
	}
}

// failEverySend makes Stripe refuse the next n meter events (retryably).
func (r *rig) failEverySend(n int) {
	faults := make([]standin.Fault, n)
	for i := range faults {
		faults[i] = standin.Fail
	}
	r.stand.Stripe.FailNext(standin.EndpointMeterEvents, faults...)
}

// A row that is sent, and a row that fails and backs off, tell nothing. The row that fails its
// last try is marked DEAD with its notification, once: later runs (a DEAD row is never due
// again) and a drainer asked for the row by name write no second one.
func TestDrainer_DeadRow_ToldOnceWithItsLastError_SentAndRetryingRowsTellNothing(t *testing.T) {
	r := newRig(t)
	sent := r.row(t)
	if res := r.run(t, r.d); res.Sent != 1 {
		t.Fatalf("result %+v", res)
	}
	if got := r.deadNotes(t); len(got) != 0 {
		t.Fatalf("a sent row told %+v", got)
	}

	row := sent
	row.Key, row.Total, row.Delta = outbox.ReportKey(9, 0), 9, 2
	item, err := r.h.MeterAPI().Outbox.InsertItem(row)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.h.MeterAPI().State.Commit(context.Background(), item); err != nil {
		t.Fatal(err)
	}
	r.failEverySend(outbox.MaxAttempts)
	for attempt := 1; attempt < outbox.MaxAttempts; attempt++ {
		if res := r.run(t, r.d); res.Retrying != 1 {
			t.Fatalf("attempt %d: %+v", attempt, res)
		}
		if got := r.deadNotes(t); len(got) != 0 {
			t.Fatalf("attempt %d: a row backing off told %+v", attempt, got)
		}
		r.h.Clock.Advance(outbox.Backoff(attempt))
	}
	if res := r.run(t, r.d); res.Dead != 1 {
		t.Fatalf("last attempt: %+v", res)
	}
	dead := r.get(t, row)
	if dead.Status != outbox.Dead {
		t.Fatalf("row %+v", dead)
	}
	wantDeadNote(t, r.deadNotes(t), row, dead.LastError)

	r.h.Clock.Advance(24 * time.Hour)
	r.run(t, r.d)
	if out, err := r.other().Drain(context.Background(), outbox.RefOf(row)); err != nil || out != outbox.OutcomeSkipped {
		t.Errorf("a DEAD row drained by name: %s, %v", out, err)
	}
	wantDeadNote(t, r.deadNotes(t), row, dead.LastError)
}

// The write that marks the row DEAD commits and its answer is lost: the notification was in that
// write, so it is there, once, though the drainer never learnt the row went DEAD.
func TestDrainer_DeadWriteWhoseAnswerIsLost_StillTold(t *testing.T) {
	faults := instrument.NewFaults(nil)
	r := newRig(t, faults.Option)
	row := r.row(t)
	r.failEverySend(outbox.MaxAttempts)
	for attempt := 1; attempt < outbox.MaxAttempts; attempt++ {
		r.run(t, r.d)
		r.h.Clock.Advance(outbox.Backoff(attempt))
	}
	// The last attempt writes twice: the claim, then the DEAD row with its notification.
	faults.SetPlan(instrument.CrashAfterWrite(2))
	if _, err := r.d.Run(context.Background()); !errors.Is(err, instrument.ErrInjectedCrash) {
		t.Fatalf("the last attempt: %v; want the injected crash (fired %v)", err, faults.Fired())
	}
	got := r.get(t, row)
	if got.Status != outbox.Dead {
		t.Fatalf("row %+v; want it DEAD (the write committed)", got)
	}
	wantDeadNote(t, r.deadNotes(t), row, got.LastError)
}

// RewriteNotifying writes the row and its notification together; a drainer that decided on a
// revision someone wrote since changes neither (ErrChanged); and a row still at the revision
// read, whose notification exists already, is marked without a second one.
func TestOutbox_RewriteNotifying_OneNotificationWhateverWroteFirst(t *testing.T) {
	env := testenv.New(t)
	db, ctx := env.Clients.DynamoDB, context.Background()
	notes := env.Names.Table(resources.TableNotifications)
	s := &outbox.Table{DB: db, Table: env.Names.Table(resources.TableOutbox), Notifications: notes}
	insert := func(row outbox.Row) {
		t.Helper()
		item, err := s.InsertItem(row)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{item}}); err != nil {
			t.Fatal(err)
		}
	}
	deadOf := func(row outbox.Row, reason string) (outbox.Row, notify.Notification) {
		d := row
		d.Status, d.LastError, d.UpdatedAtMs, d.Attempts = outbox.Dead, reason, 2_000, outbox.MaxAttempts
		return d, notify.Notification{Kind: notify.OutboxDead, Account: d.Account, Feature: d.Feature, Cycle: d.Cycle,
			Subject: d.Identifier(), AtMs: d.UpdatedAtMs, Detail: notify.Detail{Reason: reason}}
	}

	row := guardRow()
	insert(row)
	dead, n := deadOf(row, "stripe said no")
	if _, err := s.RewriteNotifying(ctx, dead, 1, n); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RewriteNotifying(ctx, dead, 1, n); !errors.Is(err, outbox.ErrChanged) {
		t.Fatalf("a second mark from revision 1: %v; want ErrChanged", err)
	}
	if got, err := s.Get(ctx, outbox.RefOf(row)); err != nil || got.Status != outbox.Dead || got.Rev != 2 {
		t.Fatalf("row %+v, %v", got, err)
	}
	wantDeadNote(t, deadNotes(t, db, notes), row, "stripe said no")

	// The notification is there before the row is marked (told by a mark whose row write was
	// lost): the row is marked, and the notification stays the one it was.
	other := guardRow()
	other.Key = "total#6"
	insert(other)
	dead, n = deadOf(other, "the first reason")
	if told, err := notify.Tell(ctx, db, notes, n); err != nil || !told {
		t.Fatalf("tell: %v %v", told, err)
	}
	again, n2 := deadOf(other, "a later reason")
	if _, err := s.RewriteNotifying(ctx, again, 1, n2); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, outbox.RefOf(other)); err != nil || got.Status != outbox.Dead || got.LastError != "a later reason" {
		t.Fatalf("row %+v, %v", got, err)
	}
	var theirs []notify.Message
	for _, m := range deadNotes(t, db, notes) {
		if m.ID == n.ID() {
			theirs = append(theirs, m)
		}
	}
	wantDeadNote(t, theirs, dead, "the first reason")
}
