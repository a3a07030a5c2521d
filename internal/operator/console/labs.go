package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymeter/ferry/internal/operator/lab"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// LabSpec is one lab the console runs, and the longest it may run.
type LabSpec struct {
	Name    string
	Timeout time.Duration
	Run     func(ctx context.Context, cfg lab.Config) (lab.Result, error)
}

// Bounds of the console's labs. Each is the lab's own duration with room to spare; the Engine
// Room waits out a dead worker's 30 s lease.
const (
	holdsFiveTimeout    = 30 * time.Second
	webhooksNineTimeout = 2 * time.Minute
	// The reconciliation lab waits out a report that a Kinde pause of a previous run delays.
	reconcileTimeout = 4 * time.Minute
	// slotMargin keeps a slot's lease a little longer than its run, so a slot is never free
	// while its run may still be going.
	slotMargin = 10 * time.Second
	// deadlineMargin is the time a run leaves its request to answer in.
	deadlineMargin = time.Second
)

// Labs are the labs the console runs: the same code ferry lab runs, on a fresh account each time.
var Labs = []LabSpec{
	{Name: "holds-five", Timeout: holdsFiveTimeout, Run: lab.HoldsFive},
	{Name: "webhooks-nine", Timeout: webhooksNineTimeout, Run: lab.WebhooksNine},
	{Name: "reconcile", Timeout: reconcileTimeout, Run: lab.Reconcile},
}

// ErrNoLab: no lab has this name.
var ErrNoLab = problem.New(problem.NotFound, "no such lab", "No lab has this name.")

// ErrLabsBusy: every lab slot is taken.
var ErrLabsBusy = problem.New(problem.Busy, "every lab slot is taken",
	fmt.Sprintf("%d labs are running already; this one did not start. Try again when one ends.", resources.ConsoleLabSlots))

// Run is one run of a lab: its result, or the error that stopped it half way.
type Run struct {
	Lab      string
	Result   lab.Result
	Err      error
	Duration time.Duration
}

// LabRunner runs the console's labs against the stack's own public URL, as ferry lab does from
// outside, each bounded in time and all of them in number (Slots).
type LabRunner struct {
	Labs        []LabSpec
	Slots       *Slots
	BaseURL     string
	OperatorKey string
	Log         *slog.Logger
	Now         func() time.Time
}

// Run runs the named lab. It fails without running anything when the lab is unknown (ErrNoLab),
// when the stack has no public URL, or when every slot is taken (ErrLabsBusy); a lab that needs
// ferry dev's stand-ins fails with a problem of kind Unsupported. Once the lab has started, its
// outcome is the Run: a lab that stopped half way is a Run with Err, not an error.
func (r *LabRunner) Run(ctx context.Context, name string) (Run, error) {
	spec, ok := r.spec(name)
	if !ok {
		return Run{}, ErrNoLab
	}
	if r.BaseURL == "" {
		return Run{}, problem.New(problem.Unsupported, "no public URL",
			"The stack does not know its own public URL (FERRY_API_URL), so it cannot run a lab against itself.")
	}
	timeout := spec.Timeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline)-deadlineMargin)
	}
	release, err := r.Slots.Acquire(ctx, timeout+slotMargin)
	if err != nil {
		return Run{}, err
	}
	defer release()
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	began := r.Now()
	res, err := spec.Run(runCtx, lab.Config{BaseURL: r.BaseURL, OperatorKey: r.OperatorKey})
	run := Run{Lab: name, Result: res, Duration: r.Now().Sub(began)}
	switch {
	case errors.Is(err, lab.ErrNeedsDev):
		return Run{}, problem.New(problem.Unsupported, "the lab needs ferry dev", "This lab steers ferry dev's local stand-ins, which this stack does not have: run it against ferry dev (make run). "+err.Error())
	case err != nil && runCtx.Err() != nil && ctx.Err() == nil:
		run.Err = fmt.Errorf("the lab did not finish within %s: %w", timeout.Round(time.Second), err)
	case err != nil:
		run.Err = err
	}
	if run.Err != nil {
		r.Log.Warn("lab stopped", "lab", name, "err", run.Err)
	} else {
		r.Log.Info("lab ran", "lab", name, "ok", res.OK(), "account", res.AccountID, "durationMs", run.Duration.Milliseconds())
	}
	return run, nil
}

func (r *LabRunner) spec(name string) (LabSpec, bool) {
	for _, s := range r.Labs {
		if s.Name == name {
			return s, true
		}
	}
	return LabSpec{}, false
}
