// Package testclock is the clock of tests and of the fault harness: it moves only when it is
// moved, so a test decides when a lease lapses or a cycle closes. Ferry's services take their
// clock as a func() time.Time; a test hands them Clock.Now.
package testclock

import (
	"sync"
	"time"
)

// Clock is a settable clock, safe for concurrent use: the functions a test drives read it from
// their own goroutines while the test moves it.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New starts a clock at t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
