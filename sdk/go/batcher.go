package ferry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Defaults of BatcherConfig.
const (
	// DefaultMaxAge is how long the first event of a batch waits for the batch to fill.
	DefaultMaxAge = time.Second
	// DefaultBuffer is how many events the Batcher holds that are not yet in a request.
	DefaultBuffer = 10_000
	// DefaultConcurrency is how many batch requests are in flight at once.
	DefaultConcurrency = 2
	// maxRetainedFailures bounds the failed ids a Batcher keeps until Flush or Close reports
	// them; past it, BatchError.Unlisted counts the rest.
	maxRetainedFailures = 100_000
)

// Overflow is what Add does when the buffer is full.
type Overflow int

const (
	// Block waits for room (or for the context to end).
	Block Overflow = iota
	// FailFast returns ErrBufferFull at once.
	FailFast
)

// Errors of the Batcher.
var (
	// ErrBufferFull is Add's answer when the buffer is full and the Overflow is FailFast.
	ErrBufferFull = errors.New("ferry: the batcher's buffer is full")
	// ErrBatcherClosed is Add's answer after Close, and the cause of an event Close could not
	// send before its context ended.
	ErrBatcherClosed = errors.New("ferry: the batcher is closed")
)

// BatcherConfig configures a Batcher; the zero value takes every default.
type BatcherConfig struct {
	// MaxBatch is the most events one request carries (MaxBatchEvents if zero; at most that).
	MaxBatch int
	// MaxAge is how long an event waits for its batch to fill (DefaultMaxAge if zero).
	MaxAge time.Duration
	// Buffer is how many events wait to be sent at most (DefaultBuffer if zero).
	Buffer int
	// Overflow is what Add does when Buffer events wait: Block (the default) or FailFast.
	Overflow Overflow
	// Concurrency is how many batch requests are in flight at once (DefaultConcurrency if zero).
	Concurrency int
	// OnFailure, if set, is called from the background with the events of a batch that could
	// not be sent (after the client's retries) or that Ferry refused. Flush and Close report
	// them as well.
	OnFailure func([]FailedEvent)
}

// FailedEvent is an event the Batcher could not get accepted, and why.
type FailedEvent struct {
	ID  string
	Err error
}

// BatchError names exactly the events a Flush or Close could not get accepted.
type BatchError struct {
	Failed []FailedEvent
	// Unlisted counts failed events past the retained bound, whose ids are not listed.
	Unlisted int
}

func (e *BatchError) Error() string {
	ids := make([]string, 0, 3)
	for _, f := range e.Failed[:min(3, len(e.Failed))] {
		ids = append(ids, f.ID)
	}
	more := ""
	if n := len(e.Failed) + e.Unlisted - len(ids); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	first := ""
	if len(e.Failed) > 0 {
		first = ": " + e.Failed[0].Err.Error()
	}
	return fmt.Sprintf("ferry: %d events not accepted (%s%s)%s", len(e.Failed)+e.Unlisted, strings.Join(ids, ", "), more, first)
}

// IDs lists the ids of the failed events.
func (e *BatchError) IDs() []string {
	ids := make([]string, len(e.Failed))
	for i, f := range e.Failed {
		ids[i] = f.ID
	}
	return ids
}

// Batcher sends events in batches in the background: a batch goes when it holds MaxBatch events
// or its first event is MaxAge old, whichever comes first. Each event gets its id when it is
// added, and every retry of its batch sends it with that id under the batch's one
// Idempotency-Key. It is safe for concurrent use.
type Batcher struct {
	cfg  BatcherConfig
	send func(context.Context, []CloudEvent) (*BatchAccepted, error)
	log  *slog.Logger

	in      chan CloudEvent
	flushes chan chan struct{}
	// ctx is the background sends' context: cancelled only when Close gives up.
	ctx    context.Context
	cancel context.CancelFunc
	// stop ends the loop (Close, after its flush); done is closed when the loop has ended.
	stop chan struct{}
	done chan struct{}

	mu     sync.RWMutex // held for reading by Add, for writing by Close
	closed bool

	failMu   sync.Mutex
	failed   []FailedEvent
	unlisted int
}

// NewBatcher starts a Batcher that sends with c. Close it to send what it holds.
func (c *Client) NewBatcher(cfg BatcherConfig) (*Batcher, error) {
	return newBatcher(cfg, c.sendPrepared, c.log)
}

func newBatcher(cfg BatcherConfig, send func(context.Context, []CloudEvent) (*BatchAccepted, error), log *slog.Logger) (*Batcher, error) {
	if cfg.MaxBatch > MaxBatchEvents || cfg.MaxBatch < 0 {
		return nil, fmt.Errorf("ferry: MaxBatch %d is not between 1 and %d", cfg.MaxBatch, MaxBatchEvents)
	}
	cfg.MaxBatch = orDefault(cfg.MaxBatch, MaxBatchEvents)
	cfg.MaxAge = orDefault(cfg.MaxAge, DefaultMaxAge)
	cfg.Buffer = orDefault(cfg.Buffer, DefaultBuffer)
	cfg.Concurrency = orDefault(cfg.Concurrency, DefaultConcurrency)
	ctx, cancel := context.WithCancel(context.Background())
	b := &Batcher{
		cfg: cfg, send: send, log: log,
		in: make(chan CloudEvent, cfg.Buffer), flushes: make(chan chan struct{}),
		ctx: ctx, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{}),
	}
	go b.loop()
	return b, nil
}

// Add puts an event in the buffer and returns its id (the caller's, or one minted now). When
// the buffer is full it waits for room, or returns ErrBufferFull with Overflow FailFast.
func (b *Batcher) Add(ctx context.Context, ev CloudEvent) (string, error) {
	prepare(&ev)
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return "", ErrBatcherClosed
	}
	if b.cfg.Overflow == FailFast {
		select {
		case b.in <- ev:
			return ev.Id, nil
		default:
			return "", ErrBufferFull
		}
	}
	select {
	case b.in <- ev:
		return ev.Id, nil
	case <-ctx.Done():
		return "", fmt.Errorf("ferry: add event %s: %w", ev.Id, ctx.Err())
	}
}

// Flush sends every event added before it and waits for their answers. It returns nil when
// every event since the last Flush was accepted, or a *BatchError naming exactly those that
// were not (those that failed in the background included).
func (b *Batcher) Flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case b.flushes <- done:
	case <-b.done:
		return b.report()
	case <-ctx.Done():
		return fmt.Errorf("ferry: flush: %w", ctx.Err())
	}
	select {
	case <-done:
		return b.report()
	case <-ctx.Done():
		return fmt.Errorf("ferry: flush: %w", ctx.Err())
	}
}

// Close stops taking events, sends every event it holds and waits for the answers. When ctx
// ends first, the sends in flight are abandoned and every event not known to be accepted is
// named in the *BatchError, as are the events that failed before.
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	already := b.closed
	b.closed = true
	b.mu.Unlock()
	if already {
		return ErrBatcherClosed
	}
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		done := make(chan struct{})
		b.flushes <- done
		<-done
	}()
	select {
	case <-flushed:
	case <-ctx.Done():
		// Abandon the sends in flight: each fails with the cancellation and is named.
		b.cancel()
		<-flushed
	}
	b.cancel()
	close(b.stop)
	<-b.done
	return b.report()
}

// report returns and forgets the failures so far.
func (b *Batcher) report() error {
	b.failMu.Lock()
	defer b.failMu.Unlock()
	if len(b.failed) == 0 && b.unlisted == 0 {
		return nil
	}
	err := &BatchError{Failed: b.failed, Unlisted: b.unlisted}
	b.failed, b.unlisted = nil, 0
	return err
}

func (b *Batcher) fail(fs []FailedEvent) {
	b.failMu.Lock()
	room := max(maxRetainedFailures-len(b.failed), 0)
	b.failed = append(b.failed, fs[:min(room, len(fs))]...)
	b.unlisted += len(fs) - min(room, len(fs))
	b.failMu.Unlock()
	b.log.LogAttrs(b.ctx, slog.LevelError, "ferry: events not accepted", slog.Int("events", len(fs)),
		slog.String("firstId", fs[0].ID), slog.String("err", fs[0].Err.Error()))
	if b.cfg.OnFailure != nil {
		b.cfg.OnFailure(fs)
	}
}

// loop owns the batch being filled: it sends it when full or old, and on each flush.
func (b *Batcher) loop() {
	defer close(b.done)
	sem := make(chan struct{}, b.cfg.Concurrency)
	var inflight sync.WaitGroup
	batch := make([]CloudEvent, 0, b.cfg.MaxBatch)
	age := time.NewTimer(time.Hour)
	age.Stop()
	dispatch := func() {
		if len(batch) == 0 {
			return
		}
		age.Stop()
		full := batch
		batch = make([]CloudEvent, 0, b.cfg.MaxBatch)
		sem <- struct{}{}
		inflight.Add(1)
		go func() {
			defer func() { <-sem; inflight.Done() }()
			b.deliver(full)
		}()
	}
	add := func(ev CloudEvent) {
		batch = append(batch, ev)
		if len(batch) == 1 {
			age.Reset(b.cfg.MaxAge)
		}
		if len(batch) == b.cfg.MaxBatch {
			dispatch()
		}
	}
	for {
		select {
		case ev := <-b.in:
			add(ev)
		case <-age.C:
			dispatch()
		case <-b.stop:
			return
		case done := <-b.flushes:
			// Everything added before the flush is in the channel by now.
			for n := len(b.in); n > 0; n-- {
				add(<-b.in)
			}
			dispatch()
			inflight.Wait()
			close(done)
		}
	}
}

// deliver sends one batch and records what was not accepted.
func (b *Batcher) deliver(batch []CloudEvent) {
	res, err := b.send(b.ctx, batch)
	if err != nil {
		var invalid *InvalidRequestError
		if errors.As(err, &invalid) && len(invalid.Results) == len(batch) {
			b.failResults(batch, invalid.Results)
			return
		}
		fs := make([]FailedEvent, len(batch))
		for i, ev := range batch {
			fs[i] = FailedEvent{ID: ev.Id, Err: err}
		}
		b.fail(fs)
		return
	}
	b.failResults(batch, res.Results)
}

// failResults records the items a batch's answer did not queue.
func (b *Batcher) failResults(batch []CloudEvent, results []BatchItemResult) {
	var fs []FailedEvent
	for i, ev := range batch {
		switch {
		case i >= len(results):
			fs = append(fs, FailedEvent{ID: ev.Id, Err: errors.New("ferry: the batch's answer has no result for this event")})
		case results[i].Status == Invalid:
			detail := "invalid"
			if results[i].Detail != nil {
				detail = *results[i].Detail
			}
			fs = append(fs, FailedEvent{ID: ev.Id, Err: fmt.Errorf("ferry: event refused: %s", detail)})
		}
	}
	if len(fs) > 0 {
		b.fail(fs)
	}
}
