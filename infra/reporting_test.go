package main

import (
	"strings"
	"testing"

	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// These tests cover meter reporting's deployment: the reporting functions and their schedules,
// the Stripe API key and the Kinde client reaching exactly the functions that report, and the
// alarms on DEAD outbox rows, unreadable or drifted meters, unconfirmed repairs and the review
// list.

const stripeSecretARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ferry/stripe-api-key-XyZ789"

// reportingContext reports to Kinde and Stripe, with limits from the plans.
func reportingContext() map[string]any {
	ctx := kindeContext(kindeSecretARN, ctxLimitsSource, "plan")
	ctx[ctxReportToKinde] = "true"
	ctx[ctxStripeAPIKeySecretARN] = stripeSecretARN
	return ctx
}

func TestReporting_FunctionsScheduledEveryMinuteAndNightly(t *testing.T) {
	s := synthStage(t, dev)
	for name, every := range map[string]string{
		resources.FunctionReporter:   "rate(1 minute)",
		resources.FunctionDrainer:    "rate(1 minute)",
		resources.FunctionReconciler: "rate(1 day)",
	} {
		f, ok := resources.FunctionByName(name)
		if !ok {
			t.Fatalf("no function %s", name)
		}
		if got := rateExpression(f.Every); got != every {
			t.Errorf("%s runs %s; want %s", name, got, every)
		}
		assertSchedule(t, s, f)
	}
	if f, _ := resources.FunctionByName(resources.FunctionMeterAPI); f.Every != 0 {
		t.Errorf("the meter API runs on a schedule")
	}
}

func TestReporting_TablesAndIndexes(t *testing.T) {
	s := synthStage(t, dev)
	for _, logical := range []string{resources.TableMeters, resources.TableOutbox, resources.TableEvidence, resources.TableReview} {
		table, ok := resources.TableByLogical(logical)
		if !ok {
			t.Fatalf("no table %s", logical)
		}
		t.Run(logical, func(t *testing.T) { assertTable(t, s, table) })
	}
	for logical, index := range map[string]string{
		resources.TableUsage: resources.IndexUsageReportDue, resources.TableLedger: resources.IndexLedgerByMeterRow,
		resources.TableHolds: resources.IndexHoldsBySettled, resources.TableOutbox: resources.IndexOutboxByDue,
	} {
		table, _ := resources.TableByLogical(logical)
		found := false
		for _, ix := range table.Indexes {
			found = found || ix.Name == index
		}
		if !found {
			t.Errorf("table %s has no index %s", logical, index)
		}
		assertTable(t, s, table)
	}
}

// With reporting on, the Stripe API key and the Kinde client reach exactly the functions that
// report (and list them), each granted read on that secret alone; the drainer talks to Stripe
// only.
func TestReporting_SecretsAndKindeSettingsReachExactlyTheReportingFunctions(t *testing.T) {
	s := synthStage(t, reportingContext())
	holders := 0
	for _, f := range resources.Functions {
		t.Run(f.Name, func(t *testing.T) {
			env := functionEnv(t, s, f.Name)
			wantStripe := f.ReportsUsage
			if got, ok := env[resources.EnvStripeAPIKeySecretARN]; ok != wantStripe || (ok && got != stripeSecretARN) {
				t.Errorf("%s = %v; want it only on reporting functions", resources.EnvStripeAPIKeySecretARN, got)
			}
			wantKinde := f.ReportsUsage && contains(f.Secrets, resources.EnvKindeClientSecretARN)
			if got, ok := env[resources.EnvReportKinde]; ok != wantKinde || (ok && got != "true") {
				t.Errorf("%s = %v; want true only on functions that report to Kinde", resources.EnvReportKinde, got)
			}
			if got, ok := env[resources.EnvKindeDomain]; ok != wantKinde || (ok && got != s.cfg.KindeDomain) {
				t.Errorf("%s = %v; want the domain only on functions that report to Kinde", resources.EnvKindeDomain, got)
			}
			roleID := refs(props(s.json["Resources"].(object)[functionID(t, s, f.Name)].(object))["Role"])[0]
			grantsStripe := false
			for _, st := range s.roleStatements(roleID) {
				for _, res := range list(st["Resource"]) {
					if str, ok := res.(string); ok && strings.Contains(str, "stripe-api-key") {
						grantsStripe = true
						if got := strings.Join(sortedSet(strs(st["Action"])), " "); got != strings.Join(wantSecretRead, " ") {
							t.Errorf("actions on the Stripe key %q; want %q", got, strings.Join(wantSecretRead, " "))
						}
					}
				}
			}
			if grantsStripe != wantStripe {
				t.Errorf("read on the Stripe key granted %v; want %v", grantsStripe, wantStripe)
			}
			if wantStripe {
				holders++
			}
		})
	}
	if holders != 4 {
		t.Errorf("%d functions hold the Stripe key; want the reporter, drainer, reconciler and meter API", holders)
	}
	check(t, func() {
		// The stack owns only the operator key and the Stripe webhook signing secret; the Stripe
		// API key and the Kinde secret are the operator's.
		s.tmpl.ResourceCountIs(jsii.String("AWS::SecretsManager::Secret"), jsii.Number(2))
	})
}

// Without reporting configured, no function gets the Stripe key or the Kinde client, and the
// reporting functions run (and report to nobody).
func TestReporting_OffByDefault(t *testing.T) {
	s := synthStage(t, dev)
	for _, f := range resources.Functions {
		env := functionEnv(t, s, f.Name)
		for _, k := range []string{resources.EnvStripeAPIKeySecretARN, resources.EnvReportKinde} {
			if v, ok := env[k]; ok {
				t.Errorf("%s: %s = %v with reporting off", f.Name, k, v)
			}
		}
	}
}

func TestReporting_AlarmsOnDeadRowsUnreadableOrDriftedMetersAndTheReviewList(t *testing.T) {
	s := synthStage(t, dev)
	for _, metric := range []string{
		metrics.OutboxDead, metrics.ReconcileUnreadable, metrics.ReconcileDrift, metrics.ReconcileUnconfirmed, metrics.ReviewListed,
	} {
		found := false
		for _, a := range metrics.Alarms {
			found = found || a.Metric == metric
		}
		if !found {
			t.Errorf("no alarm on %s", metric)
			continue
		}
		check(t, func() {
			s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(object{
				"MetricName": metric, "Namespace": metrics.Namespace,
				"AlarmName": resources.PhysicalName(s.cfg.Prefix(), metric),
			}))
		})
	}
}

func TestReporting_ConfigRefusesHalfSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  map[string]any
		want string
	}{
		{"kinde reporting without settings", map[string]any{ctxReportToKinde: "true"}, "reportToKinde=true needs kindeDomain, kindeClientId, kindeClientSecretArn"},
		{"not a boolean", map[string]any{ctxReportToKinde: "yes please"}, "context reportToKinde: want true or false"},
		{"stripe key not a secret", map[string]any{ctxStripeAPIKeySecretARN: "sk_live_123"}, "stripeApiKeySecretArn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ConfigFromContext(lookupIn(tc.ctx))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one containing %q", err, tc.want)
			}
		})
	}
	cfg, err := ConfigFromContext(lookupIn(reportingContext()))
	if err != nil || !cfg.ReportToKinde || !cfg.Stripe() || cfg.Kinde() {
		t.Errorf("config %+v, %v", cfg, err)
	}
}
