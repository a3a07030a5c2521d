package console_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/operator/console"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func consoleTable() []resources.Table {
	for _, t := range resources.Tables {
		if t.Logical == resources.TableConsole {
			return []resources.Table{t}
		}
	}
	return nil
}

// A lab slot is held by one run at a time, given back when the run ends, and freed by its lease
// when the run's container died without giving it back.
func TestSlots_BoundTheLabsThatRunAtOnce(t *testing.T) {
	env := testenv.New(t, testenv.Options{Tables: consoleTable()})
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	slots := &console.Slots{
		DB: env.Clients.DynamoDB, Table: env.Names.Table(resources.TableConsole), Count: 2, Now: clock, Log: slog.Default(),
	}
	ctx := context.Background()
	release1, err := slots.Acquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slots.Acquire(ctx, time.Minute); err != nil {
		t.Fatalf("the second slot: %v", err)
	}
	if _, err := slots.Acquire(ctx, time.Minute); !errors.Is(err, console.ErrLabsBusy) {
		t.Fatalf("a third run while two hold the slots: %v, want ErrLabsBusy", err)
	}
	release1()
	if _, err := slots.Acquire(ctx, time.Minute); err != nil {
		t.Fatalf("a slot given back: %v", err)
	}
	// Both slots held again; neither run gives its slot back. Just before the leases lapse the
	// slots are still taken; once they lapse a run takes one.
	mu.Lock()
	now = now.Add(time.Minute - time.Millisecond)
	mu.Unlock()
	if _, err := slots.Acquire(ctx, time.Minute); !errors.Is(err, console.ErrLabsBusy) {
		t.Fatalf("before the leases lapse: %v, want ErrLabsBusy", err)
	}
	mu.Lock()
	now = now.Add(time.Millisecond)
	mu.Unlock()
	release, err := slots.Acquire(ctx, time.Minute)
	if err != nil {
		t.Fatalf("after a lease lapsed: %v", err)
	}
	// A run whose slot was taken over gives back nothing of the new holder's.
	release1()
	if _, err := slots.Acquire(ctx, time.Minute); err != nil {
		t.Fatalf("the other lapsed slot: %v", err)
	}
	if _, err := slots.Acquire(ctx, time.Minute); !errors.Is(err, console.ErrLabsBusy) {
		t.Fatalf("a stale release freed a slot another run holds: %v", err)
	}
	release()
}
