package ferry

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recordingSend accepts every batch and records it; fail, if set, decides a batch's fate.
type recordingSend struct {
	mu      sync.Mutex
	batches [][]CloudEvent
	fail    func(batch []CloudEvent) error
	gate    chan struct{}
}

func (r *recordingSend) send(ctx context.Context, batch []CloudEvent) (*BatchAccepted, error) {
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.mu.Lock()
	r.batches = append(r.batches, batch)
	r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(batch); err != nil {
			return nil, err
		}
	}
	res := &BatchAccepted{Results: make([]BatchItemResult, len(batch))}
	for i, ev := range batch {
		res.Results[i] = BatchItemResult{Id: ev.Id, Status: Queued}
	}
	return res, nil
}

func (r *recordingSend) ids() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, b := range r.batches {
		for _, ev := range b {
			out[ev.Id]++
		}
	}
	return out
}

func testBatcher(t *testing.T, cfg BatcherConfig, r *recordingSend) *Batcher {
	t.Helper()
	b, err := newBatcher(cfg, r.send, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBatcher_FlushesAtSize(t *testing.T) {
	r := &recordingSend{}
	b := testBatcher(t, BatcherConfig{MaxBatch: 10, MaxAge: time.Hour}, r)
	for range 25 {
		if _, err := b.Add(context.Background(), CloudEvent{Source: "/t", Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(r.ids()) < 20 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.mu.Lock()
	sizes := []int{}
	for _, batch := range r.batches {
		sizes = append(sizes, len(batch))
	}
	r.mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 10 || sizes[1] != 10 {
		t.Fatalf("batches before close: %v, want two of 10 (the last 5 wait for age or close)", sizes)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(r.ids()); n != 25 {
		t.Fatalf("%d distinct events sent, want 25", n)
	}
}

func TestBatcher_FlushesAtAge(t *testing.T) {
	r := &recordingSend{}
	b := testBatcher(t, BatcherConfig{MaxAge: 20 * time.Millisecond}, r)
	defer b.Close(context.Background())
	id, _ := b.Add(context.Background(), CloudEvent{Source: "/t", Type: "t"})
	deadline := time.Now().Add(5 * time.Second)
	for r.ids()[id] == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if r.ids()[id] != 1 {
		t.Fatal("a lone event was not sent after MaxAge")
	}
}

func TestBatcher_FullBuffer_FailFastErrorsAndBlockWaits(t *testing.T) {
	r := &recordingSend{gate: make(chan struct{})}
	// One batch of 1 in flight blocks the loop's next dispatch; the buffer holds 2 more.
	b := testBatcher(t, BatcherConfig{MaxBatch: 1, Buffer: 2, Concurrency: 1, Overflow: FailFast}, r)
	added := 0
	var full error
	for range 10 {
		if _, err := b.Add(context.Background(), CloudEvent{Source: "/t", Type: "t"}); err != nil {
			full = err
			break
		}
		added++
	}
	if !errors.Is(full, ErrBufferFull) || added > 4 {
		t.Fatalf("after %d adds: %v, want ErrBufferFull within 4", added, full)
	}
	close(r.gate)
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	r2 := &recordingSend{gate: make(chan struct{})}
	blocking := testBatcher(t, BatcherConfig{MaxBatch: 1, Buffer: 2, Concurrency: 1}, r2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var blockedErr error
	for range 10 {
		if _, err := blocking.Add(ctx, CloudEvent{Source: "/t", Type: "t"}); err != nil {
			blockedErr = err
			break
		}
	}
	if !errors.Is(blockedErr, context.DeadlineExceeded) {
		t.Fatalf("a blocking Add on a full buffer: %v, want it to wait until its context ended", blockedErr)
	}
	close(r2.gate)
	if err := blocking.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestBatcher_CloseAfterBurst_SendsEverything(t *testing.T) {
	r := &recordingSend{}
	b := testBatcher(t, BatcherConfig{MaxAge: time.Hour, Buffer: 500}, r)
	var wg sync.WaitGroup
	var ids sync.Map
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				id, err := b.Add(context.Background(), CloudEvent{Source: "/t", Type: "t"})
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				ids.Store(id, true)
			}
		}()
	}
	wg.Wait()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	sent := r.ids()
	n := 0
	ids.Range(func(k, _ any) bool {
		n++
		if sent[k.(string)] != 1 {
			t.Errorf("event %s sent %d times", k, sent[k.(string)])
		}
		return true
	})
	if n != 2000 || len(sent) != 2000 {
		t.Fatalf("added %d, sent %d distinct, want 2000", n, len(sent))
	}
	if _, err := b.Add(context.Background(), CloudEvent{}); !errors.Is(err, ErrBatcherClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
}

func TestBatcher_Failures_NamedExactly(t *testing.T) {
	var calls atomic.Int64
	r := &recordingSend{fail: func(batch []CloudEvent) error {
		if calls.Add(1) == 2 {
			return &UnavailableError{&ProblemError{Status: 503, Kind: KindUnavailable}}
		}
		return nil
	}}
	var background atomic.Int64
	b := testBatcher(t, BatcherConfig{MaxBatch: 5, MaxAge: time.Hour, Concurrency: 1, OnFailure: func(fs []FailedEvent) { background.Add(int64(len(fs))) }}, r)
	var all []string
	for range 15 {
		id, _ := b.Add(context.Background(), CloudEvent{Source: "/t", Type: "t"})
		all = append(all, id)
	}
	err := b.Close(context.Background())
	var be *BatchError
	if !errors.As(err, &be) || len(be.Failed) != 5 || background.Load() != 5 {
		t.Fatalf("close: %v (background saw %d)", err, background.Load())
	}
	r.mu.Lock()
	second := r.batches[1]
	r.mu.Unlock()
	for i, f := range be.Failed {
		if f.ID != second[i].Id || !errors.Is(f.Err, f.Err) || KindOf(f.Err) != KindUnavailable {
			t.Fatalf("failure %d: %+v, want %s", i, f, second[i].Id)
		}
	}
}

func TestBatcher_InvalidItems_Named(t *testing.T) {
	r := &recordingSend{}
	send := func(ctx context.Context, batch []CloudEvent) (*BatchAccepted, error) {
		res, _ := r.send(ctx, batch)
		detail := "\"type\" is required"
		res.Results[1] = BatchItemResult{Id: batch[1].Id, Status: Invalid, Detail: &detail}
		return res, nil
	}
	b, _ := newBatcher(BatcherConfig{MaxAge: time.Hour}, send, slog.New(slog.DiscardHandler))
	for range 3 {
		b.Add(context.Background(), CloudEvent{Source: "/t", Type: "t"})
	}
	err := b.Flush(context.Background())
	var be *BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 {
		t.Fatalf("flush: %v", err)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatalf("a second flush reports again: %v", err)
	}
	b.Close(context.Background())
}

func TestBatcher_CloseContextEnds_NamesWhatWasNotSent(t *testing.T) {
	r := &recordingSend{gate: make(chan struct{})} // never opens: every send hangs
	b := testBatcher(t, BatcherConfig{MaxBatch: 10, MaxAge: time.Hour, Concurrency: 1}, r)
	for range 35 {
		b.Add(context.Background(), CloudEvent{Source: "/t", Type: "t"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := b.Close(ctx)
	var be *BatchError
	if !errors.As(err, &be) || len(be.Failed) != 35 {
		t.Fatalf("close with hung sends: %v", err)
	}
}

func BenchmarkBatcher_Add(b *testing.B) {
	send := func(_ context.Context, batch []CloudEvent) (*BatchAccepted, error) {
		res := &BatchAccepted{Results: make([]BatchItemResult, len(batch))}
		for i := range res.Results {
			res.Results[i].Status = Queued
		}
		return res, nil
	}
	bt, err := newBatcher(BatcherConfig{MaxAge: time.Hour}, send, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ev := CloudEvent{Id: "evt_bench", Source: "/bench", Type: "api.call"}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := bt.Add(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
	if err := bt.Close(ctx); err != nil {
		b.Fatal(err)
	}
}
