package testclock

import (
	"sync"
	"testing"
	"time"
)

// The clock stands still until it is moved, and moves by exactly what it is told, also when many
// goroutines move it at once.
func TestClock_MovesOnlyWhenMoved(t *testing.T) {
	start := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	c := New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want the start %v", got, start)
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Advance(time.Millisecond)
			_ = c.Now()
		}()
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(50*time.Millisecond); !got.Equal(want) {
		t.Errorf("after 50 advances of 1ms: %v, want %v", got, want)
	}
	c.Set(start)
	if got := c.Now(); !got.Equal(start) {
		t.Errorf("after Set: %v, want %v", got, start)
	}
}
