package fanout_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/ferrymeter/ferry/internal/platform/fanout"
)

func TestEach_EveryItemOnceAtMostLimitAtOnce(t *testing.T) {
	items := make([]int, 50)
	for i := range items {
		items[i] = i
	}
	var running, peak atomic.Int32
	seen := map[int]int{}
	var failed int
	fanout.Each(items, 3, func(i int) (int, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer running.Add(-1)
		if i%10 == 0 {
			return 0, errors.New("refused")
		}
		return i * 2, nil
	}, func(i, out int, err error) {
		seen[i]++ // unguarded: done is called one at a time (the race detector checks it)
		if err != nil {
			failed++
		} else if out != i*2 {
			t.Errorf("item %d: out %d", i, out)
		}
	})
	if len(seen) != len(items) || failed != 5 {
		t.Fatalf("seen %d items, %d failed; want %d and 5", len(seen), failed, len(items))
	}
	for i, n := range seen {
		if n != 1 {
			t.Errorf("item %d done %d times", i, n)
		}
	}
	if p := peak.Load(); p > 3 {
		t.Errorf("%d ran at once; limit 3", p)
	}
}
