package main

import (
	"strings"
	"testing"

	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Every finding of cfn-lint or checkov the template accepts is accepted on its resource with a
// reason in words: a checkov skip carries a comment, a cfn-lint ignore_checks entry its
// ignore_reasons entry. scripts/judge-template.sh fails on every finding not accepted this way.
func TestJudges_EveryAcceptedFindingHasAReason(t *testing.T) {
	for name, ctx := range map[string]map[string]any{"dev": dev, "prod": prod} {
		s := synthStage(t, ctx)
		t.Run(name, func(t *testing.T) {
			accepted := 0
			for id, r := range s.json["Resources"].(object) {
				meta, _ := r.(object)["Metadata"].(object)
				if ck, ok := meta[checkovMetadata].(object); ok {
					for _, skip := range list(ck["skip"]) {
						skip := skip.(object)
						accepted++
						if !isReason(skip["comment"]) {
							t.Errorf("%s: checkov %v accepted without a reason: %v", id, skip["id"], skip["comment"])
						}
					}
				}
				if cl, ok := meta[cfnLintMetadata].(object); ok {
					config, _ := cl["config"].(object)
					reasons, _ := config["ignore_reasons"].(object)
					for _, rule := range strs(config["ignore_checks"]) {
						accepted++
						if !isReason(reasons[rule]) {
							t.Errorf("%s: cfn-lint %s accepted without a reason: %v", id, rule, reasons[rule])
						}
					}
					if len(reasons) != len(strs(config["ignore_checks"])) {
						t.Errorf("%s: cfn-lint reasons %v for checks %v", id, reasons, config["ignore_checks"])
					}
				}
			}
			if accepted == 0 {
				t.Fatal("no accepted finding in the template: the judges' metadata is not written")
			}
		})
	}
}

func isReason(v any) bool {
	s, _ := v.(string)
	return len(strings.Fields(s)) >= minReasonWords
}

// The judges' findings that are fixed rather than accepted: each one has its assertion here, so
// accepting one instead (or undoing the fix) fails a test, not only the judges.

func TestQueues_EncryptedAtRest(t *testing.T) {
	for name, ctx := range map[string]map[string]any{"dev": dev, "prod": prod} {
		s := synthStage(t, ctx)
		queues := s.resourcesOfType("AWS::SQS::Queue")
		// Each defined queue, its dead-letter queue and the failed-runs queue.
		if len(queues) != 2*len(resources.Queues)+1 {
			t.Errorf("%s: %d queues; want %d", name, len(queues), 2*len(resources.Queues)+1)
		}
		for id, q := range queues {
			if props(q)["SqsManagedSseEnabled"] != true && props(q)["KmsMasterKeyId"] == nil {
				t.Errorf("%s: queue %s is not encrypted at rest: %v", name, id, props(q))
			}
		}
	}
}

func TestAlarms_TopicEncryptedUnderAKeyCloudWatchMayUse(t *testing.T) {
	s := synthStage(t, prod)
	keyID := ""
	for id, k := range s.resourcesOfType("AWS::KMS::Key") {
		keyID = id
		if props(k)["EnableKeyRotation"] != true {
			t.Errorf("key %s: rotation off", id)
		}
		if k["DeletionPolicy"] != "Retain" {
			t.Errorf("key %s: DeletionPolicy %v in prod; a deleted key makes the topic unusable", id, k["DeletionPolicy"])
		}
		cloudwatch := false
		for _, st := range allowStatements(k) {
			principal, _ := st["Principal"].(object)
			if principal["Service"] == "cloudwatch.amazonaws.com" {
				cloudwatch = contains(strs(st["Action"]), "kms:Decrypt") && contains(strs(st["Action"]), "kms:GenerateDataKey*")
			}
		}
		if !cloudwatch {
			t.Errorf("key %s: CloudWatch may not use it, so alarms could not publish to the topic", id)
		}
	}
	topics := s.resourcesOfType("AWS::SNS::Topic")
	if len(topics) != 1 {
		t.Fatalf("%d topics; want 1", len(topics))
	}
	for id, topic := range topics {
		if !refersTo(props(topic)["KmsMasterKeyId"], keyID) || keyID == "" {
			t.Errorf("topic %s: KmsMasterKeyId %v; want the topic key %s", id, props(topic)["KmsMasterKeyId"], keyID)
		}
	}
}

// Every asynchronous invocation (the scheduled functions, invoked by EventBridge Scheduler) ends
// somewhere visible when it fails: Lambda's dead-letter queue for a run that fails, Scheduler's
// for a run it cannot deliver, both the failed-runs queue, whose depth alarm notifies the topic.
func TestFunctions_AsyncInvocationsDeadLetterToFailedRuns(t *testing.T) {
	s := synthStage(t, dev)
	failedRuns := s.id(t, "AWS::SQS::Queue", object{"QueueName": resources.PhysicalName(s.cfg.Prefix(), failedRunsLogical)})
	for _, f := range resources.Functions {
		t.Run(f.Name, func(t *testing.T) {
			fnID := functionID(t, s, f.Name)
			dlq := props(s.json["Resources"].(object)[fnID].(object))["DeadLetterConfig"]
			if f.Every <= 0 {
				if dlq != nil {
					t.Errorf("synchronous function has a dead-letter queue %v", dlq)
				}
				return
			}
			if !refersTo(dlq, failedRuns) {
				t.Errorf("DeadLetterConfig %v; want the failed-runs queue", dlq)
			}
			found := false
			for _, sched := range s.resourcesOfType("AWS::Scheduler::Schedule") {
				target := props(sched)["Target"].(object)
				if refersTo(target["Arn"], fnID) {
					found = true
					if !refersTo(target["DeadLetterConfig"], failedRuns) {
						t.Errorf("schedule target DeadLetterConfig %v; want the failed-runs queue", target["DeadLetterConfig"])
					}
				}
			}
			if !found {
				t.Error("no schedule invokes it")
			}
		})
	}
	check(t, func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(object{
			"AlarmName":  resources.PhysicalName(s.cfg.Prefix(), failedRunsLogical+"-depth"),
			"Dimensions": arrayWith(like(object{"Name": "QueueName", "Value": object{"Fn::GetAtt": []any{failedRuns, "QueueName"}}})),
			"Threshold":  0,
		}))
	})
}

// The functions that call the providers' meter APIs on a schedule run one at a time.
func TestFunctions_ProviderFacingRunsReserveOneConcurrency(t *testing.T) {
	s := synthStage(t, dev)
	for _, name := range []string{resources.FunctionReporter, resources.FunctionDrainer, resources.FunctionReconciler} {
		fn := props(s.json["Resources"].(object)[functionID(t, s, name)].(object))
		if fn["ReservedConcurrentExecutions"] != 1.0 {
			t.Errorf("%s: ReservedConcurrentExecutions %v; want 1", name, fn["ReservedConcurrentExecutions"])
		}
	}
}

func TestLogGroups_EveryOneHasItsRetention(t *testing.T) {
	s := synthStage(t, map[string]any{ctxLogRetentionDays: "90"})
	groups := s.resourcesOfType("AWS::Logs::LogGroup")
	// One per function and the API's access logs.
	if len(groups) != len(resources.Functions)+1 {
		t.Errorf("%d log groups; want %d", len(groups), len(resources.Functions)+1)
	}
	for id, g := range groups {
		if props(g)["RetentionInDays"] != 90.0 {
			t.Errorf("log group %s: RetentionInDays %v; want 90", id, props(g)["RetentionInDays"])
		}
	}
}
