package reconcile_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/reporting/outbox"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
	"github.com/ferrymeter/ferry/internal/reporting/report"
)

// meterRig is a rig on testdata/plans/meters.json: tokens_in a SUM (Stripe "sum", deltas),
// storage_gb a MAX and active_users a UNIQUE_COUNT (Stripe "last", absolute values), each also
// reported to Kinde.
func meterRig(t *testing.T) *rig {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "plans", "meters.json"))
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := plans.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	stand := apptest.NewStandIns(t, catalog)
	h := apptest.New(t, apptest.Options{Catalog: &catalog, Settings: stand.Settings})
	h.MeterAPI().Reconciler.ConfirmWait = 10 * time.Millisecond
	h.MeterAPI().Reconciler.RecheckWait = 10 * time.Millisecond
	stand.Stripe.SetClock(h.Clock.Now)
	return &rig{Harness: h, stand: stand, keys: map[string]string{}}
}

var meterSerial int

func metered(typ string, data string) []byte {
	meterSerial++
	return []byte(fmt.Sprintf(`{"specversion":"1.0","id":"evt_m%04d","source":"/api/chat","type":%q,"data":%s}`, meterSerial, typ, data))
}

func tokensIn(n int) []byte {
	return metered("llm.call", fmt.Sprintf(`{"usage":{"input_tokens":%d,"output_tokens":1},"model":"gpt-4","region":"eu"}`, n))
}
func gb(n int) []byte          { return metered("storage.sampled", fmt.Sprintf(`{"gb":%d}`, n)) }
func user(u string) []byte     { return metered("app.login", fmt.Sprintf(`{"user_id":%q}`, u)) }
func stripeOf(f string) string { return "ferry_" + f }

// reconcileAll reconciles one account's current cycle and returns its results by feature.
func (r *rig) reconcileAll(t *testing.T, id string) (map[string]reconcile.Result, error) {
	t.Helper()
	page, err := r.MeterAPI().Reconciler.Run(context.Background(), reconcile.Input{Account: id, Cycle: r.cycle(t, id)})
	out := map[string]reconcile.Result{}
	for _, res := range page.Results {
		out[res.Feature] = res
	}
	return out, err
}

// providers reads what each provider's meter holds of the account's features.
func (r *rig) providers(t *testing.T, id string, features ...string) string {
	t.Helper()
	var out []string
	for _, f := range features {
		out = append(out, fmt.Sprintf("%s stripe=%d kinde=%d", f, r.stand.Stripe.Total(stripeOf(f), "cus_"+id), r.stand.Kinde.MeterTotal("agr_"+id, f)))
	}
	return strings.Join(out, "; ")
}

// A SUM meter, a MAX meter and a UNIQUE_COUNT meter, on a capped and on a counted plan: the
// reporter sends Kinde every figure absolute, and Stripe the SUM as deltas and the MAX and the
// distinct count as absolute values, each report a meter event of its own (a figure that comes
// back to one sent before is sent again); the reconciler finds them matching, then repairs drift
// of each — over and under — and confirms the repair by reading it back.
func TestReconcile_SumMaxAndUniqueCountMeters_ReportedReconciledRepaired(t *testing.T) {
	for _, plan := range []string{"free", "plus"} {
		t.Run(plan, func(t *testing.T) {
			r := meterRig(t)
			id := "acct_meters_" + plan
			r.linked(t, id, plan)
			r.Meter(t, id, tokensIn(1532), tokensIn(8), gb(20), gb(60), gb(35), user("ann"), user("bob"), user("ann"))
			r.report(t)
			want := "tokens_in stripe=1540 kinde=1540; storage_gb stripe=60 kinde=60; active_users stripe=2 kinde=2"
			if got := r.providers(t, id, "tokens_in", "storage_gb", "active_users"); got != want {
				t.Fatalf("after the first report: %s\nwant %s", got, want)
			}
			r.Clock.Advance(2 * time.Minute)
			r.Meter(t, id, tokensIn(10), gb(80), gb(70), user("cat"), user("bob"))
			r.report(t)
			want = "tokens_in stripe=1550 kinde=1550; storage_gb stripe=80 kinde=80; active_users stripe=3 kinde=3"
			if got := r.providers(t, id, "tokens_in", "storage_gb", "active_users"); got != want {
				t.Fatalf("after the second report: %s\nwant %s", got, want)
			}
			rows, err := r.MeterAPI().Outbox.Cycle(context.Background(), id, "storage_gb", r.cycle(t, id))
			if err != nil || len(rows) != 2 || !rows[0].Absolute || rows[0].Value() != 60 || rows[1].Value() != 80 {
				t.Fatalf("storage_gb's outbox rows: %+v %v; want two absolute rows, 60 then 80", rows, err)
			}
			results, err := r.reconcileAll(t, id)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"tokens_in", "storage_gb", "active_users"} {
				if res := results[f]; check(t, res, "stripe").Verdict != reconcile.Match || check(t, res, "kinde").Verdict != reconcile.Match {
					t.Fatalf("%s: %+v", f, res)
				}
			}

			// Drift: someone else's events move each Stripe meter, after Ferry's last report.
			r.Clock.Advance(2 * time.Second)
			r.stand.Stripe.Drift(stripeOf("storage_gb"), "cus_"+id, 5, r.Clock.Now())   // below the ledger's 80
			r.stand.Stripe.Drift(stripeOf("active_users"), "cus_"+id, 9, r.Clock.Now()) // above the ledger's 3
			r.stand.Stripe.Drift(stripeOf("tokens_in"), "cus_"+id, -4, r.Clock.Now())   // under by 4
			r.Clock.Advance(2 * time.Second)
			results, err = r.reconcileAll(t, id)
			if err != nil {
				t.Fatal(err)
			}
			for f, verdict := range map[string]reconcile.Verdict{"storage_gb": reconcile.UnderBilled, "active_users": reconcile.OverBilled, "tokens_in": reconcile.UnderBilled} {
				res := results[f]
				c := check(t, res, "stripe")
				if c.Verdict != verdict || !c.Confirmed || c.ReadBack == nil || res.Ledger == nil || *c.ReadBack != *res.Ledger {
					t.Fatalf("%s: verdict %s confirmed %v read back %s ledger %s; want %s, repaired and confirmed",
						f, c.Verdict, c.Confirmed, val(c.ReadBack), val(res.Ledger), verdict)
				}
			}
			want = "tokens_in stripe=1550 kinde=1550; storage_gb stripe=80 kinde=80; active_users stripe=3 kinde=3"
			if got := r.providers(t, id, "tokens_in", "storage_gb", "active_users"); got != want {
				t.Fatalf("after the repairs: %s\nwant %s", got, want)
			}
			// The next run matches and adds no evidence.
			before := len(r.evidence(t, id))
			results, err = r.reconcileAll(t, id)
			for _, f := range []string{"tokens_in", "storage_gb", "active_users"} {
				if res := results[f]; err != nil || check(t, res, "stripe").Verdict != reconcile.Match {
					t.Fatalf("%s after the repair: %+v %v", f, res, err)
				}
			}
			if after := len(r.evidence(t, id)); after != before {
				t.Fatalf("a run on the same numbers added %d evidence rows", after-before)
			}
		})
	}
}

// The counters of a MAX and a UNIQUE_COUNT meter are checked against the units' records and
// rebuilt from them when they differ: the ledger's side, never the counter's.
func TestReconcile_MeterCountersRebuiltFromTheUnitsRecords(t *testing.T) {
	r := meterRig(t)
	id := "acct_rebuild"
	r.linked(t, id, "free")
	r.Meter(t, id, gb(20), gb(60), user("ann"), user("bob"))
	r.Meter(t, id, gb(40), user("cat"), user("ann"))
	r.report(t)
	ctx := context.Background()
	c := r.cycle(t, id)
	for f, wrong := range map[string]int64{"storage_gb": 7, "active_users": 1} {
		_, rows, err := r.MeterAPI().Usage.ReadRows(ctx, id, f, c)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			if usage.RowSK(row) == usage.BudgetSK {
				if err := r.MeterAPI().Usage.RebuildRow(ctx, row, wrong, r.Clock.Now().UnixMilli()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	results, err := r.reconcileAll(t, id)
	if err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]int64{"storage_gb": 60, "active_users": 3} {
		if res := results[f]; res.Rebuilt != 1 || res.Ledger == nil || *res.Ledger != want || check(t, res, "stripe").Verdict != reconcile.Match {
			t.Fatalf("%s: %+v; want the counter rebuilt to %d and Stripe matching", f, res, want)
		}
	}
}

// A figure for a "last" Stripe meter is dated a second after the one before it, within the
// cycle, so Stripe never reads two of Ferry's reports as simultaneous.
func TestLastTimestamp_StrictlyLaterWithinTheCycle(t *testing.T) {
	r := meterRig(t)
	a := r.linked(t, "acct_ts", "free")
	c := a.CycleAt(r.Clock.Now())
	now := r.Clock.Now().UnixMilli()
	for _, tc := range []struct{ now, prev, want int64 }{
		{now, 0, now},
		{now, now - 5_000, now},
		{now, now, (now/1000 + 1) * 1000},
		{c.End.UnixMilli() - 10, c.End.UnixMilli() - 500, c.End.UnixMilli() - 1000},
	} {
		if got := report.LastTimestampMs(tc.now, tc.prev, c); got != tc.want {
			t.Errorf("LastTimestampMs(%d, %d) = %d, want %d", tc.now, tc.prev, got, tc.want)
		}
	}
	_ = outbox.AbsoluteKey
}
