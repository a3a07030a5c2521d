package reconcile_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// rig is a harness that reports to a Kinde and a Stripe stand-in.
type rig struct {
	*apptest.Harness
	stand  *apptest.StandIns
	serial atomic.Int64
	keys   map[string]string
}

func newRig(t *testing.T, opts ...apptest.Options) *rig {
	t.Helper()
	var o apptest.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	stand := apptest.NewStandIns(t, plans.Default())
	o.Settings = o.Settings.With(stand.Settings)
	h := apptest.New(t, o)
	// The stand-ins answer at once: no waiting between read-backs and rechecks.
	h.MeterAPI().Reconciler.ConfirmWait = 10 * time.Millisecond
	h.MeterAPI().Reconciler.RecheckWait = 10 * time.Millisecond
	stand.Stripe.SetClock(h.Clock.Now)
	return &rig{Harness: h, stand: stand, keys: map[string]string{}}
}

// linked creates an account on plan, linked to a Kinde agreement and a Stripe customer.
func (r *rig) linked(t *testing.T, id, plan string) accounts.Account {
	t.Helper()
	a, key := r.LinkedAccount(t, id, plan)
	r.keys[id] = key
	return a
}

// bill bills n new events for the account through the worker.
func (r *rig) bill(t *testing.T, acct accounts.Account, n int) { t.Helper(); r.Bill(t, acct, n) }

// report runs the reporter, then the drainer, as the schedules do.
func (r *rig) report(t *testing.T) {
	t.Helper()
	if _, err := r.MeterAPI().Reporter.Run(context.Background()); err != nil {
		t.Fatalf("report: %v", err)
	}
	if _, err := r.MeterAPI().Drainer.Run(context.Background()); err != nil {
		t.Fatalf("drain: %v", err)
	}
}

// reconcile reconciles one account's current cycle and returns its events result.
func (r *rig) reconcile(t *testing.T, id string) (reconcile.Result, error) {
	t.Helper()
	return r.reconcileFeature(t, id, plans.FeatureEvents)
}

// reconcileFeature reconciles one account's current cycle and returns a feature's result.
func (r *rig) reconcileFeature(t *testing.T, id, feature string) (reconcile.Result, error) {
	t.Helper()
	page, err := r.MeterAPI().Reconciler.Run(context.Background(), reconcile.Input{Account: id, Cycle: r.cycle(t, id)})
	for _, res := range page.Results {
		if res.Feature == feature {
			return res, err
		}
	}
	t.Fatalf("no %s result in %+v (%v)", feature, page, err)
	return reconcile.Result{}, err
}

// apiKey is the key the account was created with.
func (r *rig) apiKey(t *testing.T, id string) string {
	t.Helper()
	key, ok := r.keys[id]
	if !ok {
		t.Fatalf("no key for %s", id)
	}
	return key
}

// spend runs one job that holds, charges and settles amount tokens (a settled hold is a ledger
// row of tokens).
func (r *rig) spend(t *testing.T, apiKey string, amount int64) {
	t.Helper()
	job := fmt.Sprintf("job-%d", r.serial.Add(1))
	resp := r.Do(t, http.MethodPost, "/v1/holds", apiKey, map[string]any{"key": job, "feature": "tokens", "amount": amount})
	if resp.Status != http.StatusCreated {
		t.Fatalf("hold %s: %d %s", job, resp.Status, resp.Body)
	}
	id := resp.JSON(t)["id"].(string)
	if resp = r.Do(t, http.MethodPost, "/v1/holds/"+id+"/charges", apiKey, map[string]any{"key": "step", "amount": amount}); resp.Status != http.StatusOK {
		t.Fatalf("charge %s: %d %s", job, resp.Status, resp.Body)
	}
	if resp = r.Do(t, http.MethodPost, "/v1/holds/"+id+"/settle", apiKey, map[string]any{}); resp.Status != http.StatusOK {
		t.Fatalf("settle %s: %d %s", job, resp.Status, resp.Body)
	}
}

func (r *rig) cycle(t *testing.T, id string) string {
	t.Helper()
	a, err := r.MeterAPI().Accounts.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a.CycleAt(r.Clock.Now()).Label()
}

// check returns a result's check for a provider.
func check(t *testing.T, res reconcile.Result, provider string) reconcile.Check {
	t.Helper()
	for _, c := range res.Checks {
		if c.Provider == provider {
			return c
		}
	}
	t.Fatalf("no %s check in %+v", provider, res)
	return reconcile.Check{}
}

func (r *rig) evidence(t *testing.T, id string) []reconcile.Record {
	t.Helper()
	recs, err := r.MeterAPI().Evidence.List(context.Background(), id, r.cycle(t, id))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func val(p *int64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
