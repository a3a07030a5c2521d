package ferry

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// settleTimeout bounds the charge and settlement RunUnderHold makes after its job, on a context
// of their own (the job's may be cancelled by then).
const settleTimeout = 30 * time.Second

// ReserveHold holds part of a limit before a job starts (POST /v1/holds). The request's Key
// names the job: sending it again answers the same hold and holds nothing more. A refusal is a
// *LimitReachedError (with Remaining and Needed), *AccountInactiveError or *RateLimitedError.
func (c *Client) ReserveHold(ctx context.Context, req CreateHoldRequest) (*Hold, error) {
	var out Hold
	if err := c.mutate(ctx, http.MethodPost, "/v1/holds", req, &out); err != nil {
		return nil, fmt.Errorf("reserve hold %q: %w", req.Key, err)
	}
	return &out, nil
}

// GetHold reads a hold.
func (c *Client) GetHold(ctx context.Context, id string) (*Hold, error) {
	var out Hold
	if err := c.get(ctx, "/v1/holds/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Holds iterates over the account's holds in one status, newest first.
func (c *Client) Holds(ctx context.Context, params ListHoldsParams) iter.Seq2[Hold, error] {
	q := url.Values{"status": {string(params.Status)}}
	setQuery(q, "account", params.Account)
	setQuery(q, "cursor", params.Cursor)
	setQuery(q, "limit", params.Limit)
	return pages[Hold](ctx, c, "/v1/holds", q)
}

// ChargeHold charges one step of a job against its hold: charged = min(amount, held − used).
// The step's Key names it, so a repeated step charges nothing again. Capped means the step was
// cut and the job must stop. It renews the hold's lease.
func (c *Client) ChargeHold(ctx context.Context, holdID string, req ChargeRequest) (*Charge, error) {
	var out Charge
	if err := c.mutate(ctx, http.MethodPost, "/v1/holds/"+url.PathEscape(holdID)+"/charges", req, &out); err != nil {
		return nil, fmt.Errorf("charge hold %s step %q: %w", holdID, req.Key, err)
	}
	return &out, nil
}

// SettleHold settles a hold and releases what was not used: charged = min(used, held), where
// used is the job's final usage, or (nil) what the charges recorded. Settling again answers the
// same settlement.
func (c *Client) SettleHold(ctx context.Context, holdID string, used *int) (*Settlement, error) {
	var body any
	if used != nil {
		body = SettleRequest{Used: used}
	}
	var out Settlement
	if err := c.mutate(ctx, http.MethodPost, "/v1/holds/"+url.PathEscape(holdID)+"/settle", body, &out); err != nil {
		return nil, fmt.Errorf("settle hold %s: %w", holdID, err)
	}
	return &out, nil
}

// Job is a job running under a hold: its hold, and a way to charge steps as it goes.
type Job struct {
	c    *Client
	Hold *Hold

	mu       sync.Mutex
	recorded int
}

// Charge charges one step of the job (see ChargeHold). When the answer is Capped, the job has
// used what it holds and must stop.
func (j *Job) Charge(ctx context.Context, stepKey string, amount int) (*Charge, error) {
	ch, err := j.c.ChargeHold(ctx, j.Hold.Id, ChargeRequest{Key: stepKey, Amount: amount})
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	j.recorded = max(j.recorded, ch.Used)
	j.mu.Unlock()
	return ch, nil
}

// finalStepKey is the step key of the charge RunUnderHold makes for what the job reported
// beyond its own charges: fixed, so running the same job key again charges it once.
const finalStepKey = "ferry:run-under-hold:final"

// RunUnderHold reserves a hold for req, runs job under it, charges what the job reports it used
// (beyond the steps it charged itself) and settles the hold — always: when the job fails,
// panics or its context is cancelled too, so nothing stays held until the lease lapses. The
// charge and the settlement run on a context of their own, bounded by settleTimeout. A refused
// reservation returns its error and runs nothing.
//
// The job returns its total usage in the feature's units; the hold caps what is charged at
// what it holds. The result is the settlement (nil if settling failed) and the job's error
// joined with any error of the charge or the settlement.
func (c *Client) RunUnderHold(ctx context.Context, req CreateHoldRequest, job func(ctx context.Context, j *Job) (used int, err error)) (settlement *Settlement, err error) {
	hold, err := c.ReserveHold(ctx, req)
	if err != nil {
		return nil, err
	}
	j := &Job{c: c, Hold: hold, recorded: hold.Used}
	used := 0
	var jobErr error
	defer func() {
		// A panic in the job still settles the hold, then goes on up.
		p := recover()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		var chargeErr error
		j.mu.Lock()
		extra := used - j.recorded
		j.mu.Unlock()
		if extra > 0 && hold.Status == HoldStatusRUNNING {
			_, chargeErr = j.Charge(sctx, finalStepKey, extra)
		}
		s, settleErr := c.SettleHold(sctx, hold.Id, nil)
		settlement, err = s, errors.Join(jobErr, chargeErr, settleErr)
		if p != nil {
			panic(p)
		}
	}()
	used, jobErr = job(ctx, j)
	return nil, nil
}
