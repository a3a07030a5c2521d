// Package fanout runs one piece of work per item with a bound on how many run at once: the
// reporter's cycles, the drainer's rows and the reconciler's accounts all fan out this way.
package fanout

import (
	"sync"

	"golang.org/x/sync/errgroup"
)

// Each calls do for every item, at most limit at once, and hands each outcome to done, one call
// at a time (done needs no lock of its own). It returns once every call has returned. A failing
// item does not stop the others: done sees its error and decides what it means.
func Each[T, R any](items []T, limit int, do func(T) (R, error), done func(T, R, error)) {
	var (
		g  errgroup.Group
		mu sync.Mutex
	)
	g.SetLimit(limit)
	for _, item := range items {
		g.Go(func() error {
			out, err := do(item)
			mu.Lock()
			defer mu.Unlock()
			done(item, out, err)
			return nil
		})
	}
	_ = g.Wait() // every call returns nil: errors reach done
}
