package holds

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Sweep bounds. A run reads at most defaultSweepMaxPages pages of defaultSweepPageSize lapsed
// leases from each shard and settles at most defaultSweepMaxHolds holds; whatever is left waits
// a minute for the next run.
const (
	defaultSweepPageSize = 100
	defaultSweepMaxPages = 5
	defaultSweepMaxHolds = 2_000
	// sweepConcurrency is how many shards are swept at once.
	sweepConcurrency = 4
	// sweepDeadlineMargin stops starting new settlements this long before the run's deadline,
	// so that a run ends by itself rather than being cut off mid-way.
	sweepDeadlineMargin = 5 * time.Second
)

// SweepResult says what one sweep did.
type SweepResult struct {
	// Found is how many lapsed leases the index listed.
	Found int
	// Expired is how many holds this run settled as EXPIRED.
	Expired int
	// Skipped were settled or renewed by the time they were re-read.
	Skipped int
	Failed  int
	// Truncated: the run stopped at one of its bounds; the next run continues.
	Truncated bool
}

// Sweep settles, as EXPIRED and at the usage their charges recorded, the RUNNING holds whose
// lease ran out: their workers stopped, and their capacity goes back to the budget. It reads
// the sparse lease index shard by shard — never a scan — and re-reads every hold before acting,
// so a hold renewed or settled since the index saw it is left alone. A worker that comes back
// later finds its hold final: its charges are refused and its settle returns this settlement.
// The returned error reports holds that could not be settled; they are retried next run.
func (s *Service) Sweep(ctx context.Context) (SweepResult, error) {
	pageSize, maxPages, maxHolds := s.SweepPageSize, s.SweepMaxPages, s.SweepMaxHolds
	if pageSize <= 0 {
		pageSize = defaultSweepPageSize
	}
	if maxPages <= 0 {
		maxPages = defaultSweepMaxPages
	}
	if maxHolds <= 0 {
		maxHolds = defaultSweepMaxHolds
	}
	concurrency := s.SweepConcurrency
	if concurrency <= 0 {
		concurrency = sweepConcurrency
	}
	nowMs := s.Now().UnixMilli()

	var (
		mu     sync.Mutex
		res    SweepResult
		errs   []error
		wg     sync.WaitGroup
		slots  = make(chan struct{}, concurrency)
		budget = maxHolds
	)
	// take reserves one settlement from the run's budget.
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if budget == 0 || nearDeadline(ctx) {
			res.Truncated = true
			return false
		}
		budget--
		return true
	}
	for shard := range resources.HoldsLeaseShards {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			refs, err := s.Store.LapsedLeases(ctx, shard, nowMs, pageSize, maxPages)
			mu.Lock()
			res.Found += len(refs)
			if len(refs) == int(pageSize)*maxPages {
				res.Truncated = true
			}
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
			for _, ref := range refs {
				if !take() {
					return
				}
				st, err := s.settle(ctx, ref.AccountID, ref.HoldID, Expired, nil, lapsed, nil)
				mu.Lock()
				switch {
				case err != nil:
					res.Failed++
					errs = append(errs, fmt.Errorf("expire hold %s of %s: %w", ref.HoldID, ref.AccountID, err))
				case st.settledNow:
					res.Expired++
				default:
					res.Skipped++
				}
				mu.Unlock()
				if err != nil {
					s.Metrics.Count(metrics.SweepFailures, 1)
					s.Log.Error("could not expire a lapsed hold; the next run retries", "account", ref.AccountID, "hold", ref.HoldID, "err", err)
				} else if st.settledNow {
					s.Metrics.Count(metrics.HoldsExpired, 1)
					s.Log.Info("hold expired", "account", ref.AccountID, "hold", ref.HoldID,
						"used", st.Used, "charged", st.Charged, "released", st.Released)
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return res, fmt.Errorf("sweep: %d failures: %w", len(errs), errors.Join(errs...))
	}
	return res, nil
}

// lapsed is the sweeper's decision on a freshly read hold: settle it only if its lease has run
// out. A charge since the index listed it renewed the lease, and its worker is alive.
func lapsed(h Hold, nowMs int64) bool { return h.LeaseExpired(nowMs) }

func nearDeadline(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) < sweepDeadlineMargin
}
