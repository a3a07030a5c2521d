package rehearsal

import (
	"math"
	"testing"
)

func TestRunsPerMonth_RateExpressions(t *testing.T) {
	for expr, want := range map[string]float64{"rate(1 minute)": 43830, "rate(5 minutes)": 8766, "rate(1 hour)": 730.5, "rate(1 day)": 43830.0 / 1440} {
		if got, err := runsPerMonth(expr); err != nil || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: %v, %v; want %v", expr, got, err, want)
		}
	}
	if _, err := runsPerMonth("cron(0 12 * * ? *)"); err == nil {
		t.Error("a cron expression was costed as if it were a rate")
	}
}

// Each item billed at rest is counted from the template: a secret the stack owns, one it names
// by ARN (once, however many grants name it), an alarm, a key, a schedule and the function it
// runs, an event source.
func TestCostAtRest_CountsWhatTheTemplateDeclares(t *testing.T) {
	imported := "arn:aws:secretsmanager:us-east-1:123456789012:secret:ferry/stripe-api-key"
	tm := Template{Resources: map[string]Resource{
		"Secret": {Type: "AWS::SecretsManager::Secret"},
		"Alarm":  {Type: "AWS::CloudWatch::Alarm", Properties: map[string]any{"Period": 60.0}},
		"Key":    {Type: "AWS::KMS::Key"},
		"Fn":     {Type: "AWS::Lambda::Function", Properties: map[string]any{"MemorySize": 1024.0}},
		"Policy": {Type: "AWS::IAM::Policy", Properties: map[string]any{"PolicyDocument": map[string]any{"Statement": []any{
			map[string]any{"Resource": []any{imported + "-??????", imported + "-AbCdEf"}},
		}}}},
		"Schedule": {Type: "AWS::Scheduler::Schedule", Properties: map[string]any{
			"ScheduleExpression": "rate(1 minute)", "Target": map[string]any{"Arn": map[string]any{"Fn::GetAtt": []any{"Fn", "Arn"}}},
		}},
		"Source": {Type: "AWS::Lambda::EventSourceMapping"},
	}}
	s, err := CostAtRest(tm)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"Secrets Manager secrets the stack creates":                   0.40,
		"Secrets Manager secrets the operator hands the stack by ARN": 0.40,
		"CloudWatch alarms (standard resolution)":                     0.10,
		"KMS customer managed keys (the alarm topic's)":               1.00,
		"EventBridge Scheduler invocations":                           0,
		// 43,830 runs: $0.0087660 in requests, 8,766 GB-s at 200 ms and 1 GB.
		"Lambda: the scheduled runs (arm64)":         43830/1e6*0.20 + 43830*0.2*lambdaArmPerGBSecond,
		"CloudWatch Logs: the scheduled runs' lines": 43830 * 700 / 1e9 * 0.50,
		// 5 pollers × 3 polls a minute: 657,450 requests, inside the free million.
		"SQS: the event sources' polls of idle queues": 0,
	}
	if len(s.Lines) != len(want) {
		t.Fatalf("%d lines %+v; want %d", len(s.Lines), s.Lines, len(want))
	}
	for _, l := range s.Lines {
		if w, ok := want[l.Item]; !ok || math.Abs(l.PerMonth-w) > 1e-9 {
			t.Errorf("%s: $%v; want $%v", l.Item, l.PerMonth, w)
		}
	}
	if math.Abs(s.TotalAfterFreeTier-(s.Total-0.10)) > 1e-9 {
		t.Errorf("after the free tier $%v; want the one alarm free", s.TotalAfterFreeTier)
	}
}
